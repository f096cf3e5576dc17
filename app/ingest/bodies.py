"""Reading request bodies defensively: a size cap enforced while streaming, JSON with a nesting cap.

A body over the limit is refused with 413 as soon as the declared length or the bytes read so far exceed
it; it is never buffered whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Rejection(Exception):
    """A request we refuse; becomes a JSON error response with this status."""

    status: int
    reason: str
    message: str
    details: list[dict[str, str]] = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.reason, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out


async def read_limited(request: web.Request, *, limit: int) -> bytes:
    declared = request.content_length
    if declared is not None and declared > limit:
        raise Rejection(413, "body_too_large", f"body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await request.content.read(_CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise Rejection(413, "body_too_large", f"body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes, *, max_depth: int) -> Any:
    if not raw:
        raise Rejection(400, "empty_body", "the request body is empty; expected a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejection(
            400, "bad_encoding", f"the body is not UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Rejection(
            400, "malformed_json", f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise Rejection(400, "too_deep", f"JSON nesting exceeds the limit of {max_depth}") from None
    depth = _max_depth(data, limit=max_depth)
    if depth > max_depth:
        raise Rejection(400, "too_deep", f"JSON nesting depth exceeds the limit of {max_depth}")
    return data


def _max_depth(data: Any, *, limit: int) -> int:
    """Container depth of parsed JSON, walked iteratively and stopping once past `limit`.

    The C parser itself gives up (RecursionError) on absurd nesting; this enforces the configured,
    much smaller limit without recursion and without scanning scalars.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest
