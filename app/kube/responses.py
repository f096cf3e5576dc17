"""One HTTP attempt's answer as JSON or a typed error (`app.kube.errors`), never as a status code.

The API server's `Status.message` becomes the error's message; a 429 says whether a PodDisruptionBudget
refused an eviction (the drain logic owns that wait) and how long `Retry-After` asks for. It sends nothing
and retries nothing: `transport` does both.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
from kubernetes.aio.client.exceptions import OpenApiException

from app.kube import errors

JsonObj = dict[str, Any]
Request = Callable[[], Awaitable[aiohttp.ClientResponse]]


def error_from_response(what: str, status: int, body: bytes, headers: Mapping[str, str]) -> errors.KubeError:
    """The typed error for a non-2xx answer; the API server's `Status.message` becomes the message."""
    text = body.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text) if text else {}
    except ValueError:
        parsed = {}
    status_obj: JsonObj = parsed if isinstance(parsed, dict) else {}
    message = f"{what} failed with {status}: {status_obj.get('message') or text[:200] or 'no message'}"
    if status == 404:
        return errors.NotFoundError(message, status=status)
    if status == 409:
        return errors.ConflictError(message, status=status)
    if status == 403:
        return errors.ForbiddenError(message, status=status)
    if status == 429:
        details = status_obj.get("details") or {}
        causes = (details.get("causes") or []) if isinstance(details, dict) else []
        budget = any(isinstance(c, dict) and c.get("reason") == "DisruptionBudget" for c in causes)
        budget = budget or "disruption budget" in str(status_obj.get("message", "")).lower()
        retry_after = _retry_after(headers.get("Retry-After"))
        if retry_after is None and isinstance(details, dict):
            retry_after = _retry_after(details.get("retryAfterSeconds"))
        return errors.TooManyRequestsError(message, retry_after=retry_after, budget=budget)
    if status >= 500:
        return errors.UnavailableError(message, status=status)
    return errors.KubeError(message, status=status)


async def request_json(what: str, request: Request, *, limit_s: float) -> JsonObj:
    """One HTTP attempt: send, read the whole answer within `limit_s` seconds, return its JSON or raise a typed error."""
    try:
        async with asyncio.timeout(limit_s):
            response = await request()
            try:
                body = await response.read()
            finally:
                response.release()
    except TimeoutError as exc:
        raise errors.UnavailableError(f"{what} timed out after {limit_s:g}s") from exc
    except aiohttp.ClientError as exc:
        raise errors.UnavailableError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
    except OpenApiException as exc:  # raised by the client itself, e.g. for a body it cannot send
        raise errors.KubeError(f"{what} failed: {exc}", status=getattr(exc, "status", None) or None) from exc
    if not 200 <= response.status < 300:
        raise error_from_response(what, response.status, body, response.headers)
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except ValueError as exc:
        raise errors.UnavailableError(
            f"{what} answered {response.status} with a body that is not JSON"
        ) from exc
    return parsed if isinstance(parsed, dict) else {"items": parsed}


def _retry_after(raw: object) -> float | None:
    """Retry-After in seconds (the API server sends whole seconds; an HTTP date is ignored)."""
    try:
        seconds = float(str(raw))
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None
