"""The node-local NVML collector: DCGM-compatible metrics and XID events pushed to the service."""
