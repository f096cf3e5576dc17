"""Carries out a Plan against Kubernetes: dry-run, pause, safety gates, retries, journal and Events."""
