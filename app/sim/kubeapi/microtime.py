"""`metav1.MicroTime` fields as kube-apiserver's decoder reads them: exactly six fractional digits.

A Lease's `acquireTime` and `renewTime` (and an Event's `eventTime`) are MicroTime, which
k8s.io/apimachinery/pkg/apis/meta/v1/micro_time.go unmarshals with
`time.Parse(RFC3339Micro, str)`, RFC3339Micro being "2006-01-02T15:04:05.000000Z07:00". Go's layout
".000000" demands exactly six digits, so a whole-second time without a fraction — what the official Python
client sends for a `datetime` with `microsecond == 0`, since `isoformat()` then drops it
(`…T10:00:00+00:00`) — or a millisecond one (`….123Z`) or a naive one (no zone) is refused before any
validation runs. The simulator used to store whatever string it got. A value that parses is stored as the
server re-encodes it: UTC, six digits, `Z` (MicroTime.MarshalJSON).

This module only parses and reports, with Go's `time.ParseError` text; `registry.py` decides the answer
(400 for a create or update body, 422 for a patch, as the real handlers do).
"""

from __future__ import annotations

import calendar
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from app.sim.kubeapi.resources import JsonObj, ResourceType

RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"

# Where each kind keeps MicroTime values (paths into the object).
_FIELDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "Lease": (("spec", "acquireTime"), ("spec", "renewTime")),
    "Event": (("eventTime",), ("series", "lastObservedTime")),
}


class MicroTimeError(ValueError):
    """The value is not a MicroTime; the message is the Go decoder's."""


def _go_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _fail(value: str, *, rest: str, element: str) -> MicroTimeError:
    return MicroTimeError(
        f"parsing time {_go_quote(value)} as {_go_quote(RFC3339_MICRO)}: cannot parse "
        f"{_go_quote(rest)} as {_go_quote(element)}"
    )


def _out_of_range(value: str, what: str) -> MicroTimeError:
    return MicroTimeError(f"parsing time {_go_quote(value)}: {what} out of range")


def _digits(rest: str, count: int) -> int | None:
    head = rest[:count]
    return int(head) if len(head) == count and head.isascii() and head.isdigit() else None


# The layout's elements in order: the literal before each, the element as Go names it, its digits, and the
# range Go checks as it parses (None: no range; a day's month-dependent limit is checked at the end).
_STEPS: tuple[tuple[str, str, int, tuple[str, int, int] | None], ...] = (
    ("", "2006", 4, None),
    ("-", "01", 2, ("month", 1, 12)),
    ("-", "02", 2, ("day", 1, 31)),
    ("T", "15", 2, ("hour", 0, 23)),
    (":", "04", 2, ("minute", 0, 59)),
    (":", "05", 2, ("second", 0, 59)),
)


def parse_micro_time(value: str) -> datetime:
    """Parse like Go's time.Parse(RFC3339Micro, value), or raise MicroTimeError with Go's message."""
    rest = value
    fields: list[int] = []
    for literal, element, width, limits in _STEPS:
        if not rest.startswith(literal):
            raise _fail(value, rest=rest, element=literal)
        rest = rest[len(literal) :]
        number = _digits(rest, width)
        if number is None:
            raise _fail(value, rest=rest, element=element)
        if limits is not None and not limits[1] <= number <= limits[2]:
            raise _out_of_range(value, limits[0])
        rest = rest[width:]
        fields.append(number)
    year, month, day, hour, minute, second = fields
    # ".000000" takes exactly six digits: fewer (or none) fail here, a seventh fails the zone that follows.
    fraction = _digits(rest[1:], 6) if rest[:1] in (".", ",") else None
    if fraction is None:
        raise _fail(value, rest=rest, element=".000000")
    zone, rest = _zone(value, rest[7:])
    if rest:
        raise MicroTimeError(f"parsing time {_go_quote(value)}: extra text: {_go_quote(rest)}")
    if day > calendar.monthrange(year, month)[1]:
        raise _out_of_range(value, "day")
    return datetime(year, month, day, hour, minute, second, fraction, tzinfo=zone)


def _zone(value: str, rest: str) -> tuple[timezone, str]:
    """Go's "Z07:00": a literal Z, or a sign, two hour digits, a colon and two minute digits."""
    if rest.startswith("Z"):
        return UTC, rest[1:]
    hours, minutes = _digits(rest[1:], 2), _digits(rest[4:], 2)
    if len(rest) < 6 or rest[0] not in "+-" or rest[3] != ":" or hours is None or minutes is None:
        raise _fail(value, rest=rest, element="Z07:00")
    if hours > 24:
        raise _out_of_range(value, "time zone offset hour")
    if minutes > 60:
        raise _out_of_range(value, "time zone offset minute")
    offset = timedelta(hours=hours, minutes=minutes)
    return timezone(-offset if rest[0] == "-" else offset), rest[6:]


def format_micro_time(moment: datetime) -> str:
    """MicroTime.MarshalJSON: the instant in UTC, six fractional digits, `Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_GO_JSON_KINDS = {bool: "bool", int: "number", float: "number", dict: "object", list: "array"}


def _decode_value(raw: Any) -> str | None:
    """One MicroTime value as the server re-encodes it; None for JSON null (the field is then unset)."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        kind = _GO_JSON_KINDS.get(type(raw), "value")
        raise MicroTimeError(f"json: cannot unmarshal {kind} into Go value of type string")
    return format_micro_time(parse_micro_time(raw))


def normalise(rt: ResourceType, obj: JsonObj) -> None:
    """Rewrite `obj`'s MicroTime fields as stored, or raise MicroTimeError for the first that won't decode."""
    for path in _FIELDS.get(rt.kind, ()) if rt.builtin else ():
        parent: Any = obj
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or path[-1] not in parent:
            continue
        decoded = _decode_value(parent[path[-1]])
        if decoded is None:
            del parent[path[-1]]
        else:
            parent[path[-1]] = decoded
