"""Configuration: service settings (pydantic-settings) and the policy and XID catalog loaded from `rules/`.

Loading is the only I/O here; every loader raises `ConfigError` with one message that names the bad field.
"""
