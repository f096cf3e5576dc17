"""Reading request bodies defensively: a size cap enforced while streaming, then one-pass JSON validation.

A body over the limit is refused with 413 as soon as the declared length or the bytes read so far exceed
it; it is never buffered whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import pydantic
from aiohttp import web

_CHUNK = 64 * 1024
_MAX_DETAILS = 20
UNREADABLE = "the body could not be read as sent (its Content-Encoding or chunked framing is broken)"
M = TypeVar("M", bound=pydantic.BaseModel)


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
        try:
            chunk = await request.content.read(_CHUNK)
        except web.RequestPayloadError:
            # aiohttp could not decode what was sent (a gzip body that is not gzip, broken chunking).
            raise Rejection(400, "unreadable_body", UNREADABLE) from None
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise Rejection(413, "body_too_large", f"body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def decode(raw: bytes, model: type[M]) -> M:
    """Parse and validate in one pass (pydantic-core's JSON parser), mapping failures to 400 or 422.

    Syntax problems are 400 (the body is not JSON we can read), schema problems 422 (JSON of the wrong
    shape). The parser refuses nesting deeper than its recursion limit; the models themselves are flat.
    """
    if not raw:
        raise Rejection(400, "empty_body", "the request body is empty; expected a JSON object")
    try:
        return model.model_validate_json(raw)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
        syntax = next((e for e in errors if e["type"] == "json_invalid"), None)
        if syntax is None:
            raise schema_rejection(exc) from None
        message = str(syntax.get("ctx", {}).get("error", syntax["msg"]))
        if "recursion limit" in message:
            raise Rejection(400, "too_deep", f"JSON nesting is too deep: {message}") from None
        if "unicode" in message or "utf-8" in message.lower():
            raise Rejection(400, "bad_encoding", f"the body is not valid UTF-8 JSON: {message}") from None
        raise Rejection(400, "malformed_json", f"malformed JSON: {message}") from None


def schema_rejection(exc: pydantic.ValidationError) -> Rejection:
    details = [
        {"loc": ".".join(str(p) for p in item["loc"]) or "(body)", "msg": item["msg"]}
        for item in exc.errors(include_url=False)[:_MAX_DETAILS]
    ]
    first = details[0]
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return Rejection(422, "invalid_payload", f"{first['loc']}: {first['msg']}{more}", details)
