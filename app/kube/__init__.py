"""The only package that imports `kubernetes`: a small typed port with typed errors."""
