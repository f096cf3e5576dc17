"""Observability of Sickbay itself: its Prometheus metrics (own registry) and logging."""
