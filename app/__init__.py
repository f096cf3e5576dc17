"""Sickbay: GPU fault remediation for Kubernetes."""
