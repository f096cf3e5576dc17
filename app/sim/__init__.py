"""Simulation for demos and tests only (GPU fleet, DCGM exporter, Kubernetes API). Never imported by production code."""
