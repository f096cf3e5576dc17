"""One error type for bad configuration, with a message that names the field, so start-up fails readably."""

from __future__ import annotations

from pathlib import Path

import pydantic


class ConfigError(Exception):
    """Raised for any invalid settings, policy or catalog; `str()` is the whole message for the operator."""


def describe(error: pydantic.ValidationError, *, source: Path | str) -> ConfigError:
    """Fold a pydantic error into one message: `source: field.path: problem` for every problem found."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        problems.append(f"{where}: {item['msg']}")
    count = len(problems)
    head = f"invalid configuration in {source}" + (f" ({count} problems)" if count > 1 else "")
    return ConfigError(head + ": " + "; ".join(problems))
