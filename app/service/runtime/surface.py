"""What every response and every POST must satisfy, whatever the route: the HTTP surface's two rules.

- Every POST must say `Content-Type: application/json` (415 otherwise). A web page can make a browser
  send a cross-site POST only as a "simple request" (a form's content types, or no body at all) unless a
  CORS preflight allows more, and Sickbay answers no preflight: so requiring JSON is what keeps any page
  a Sickbay operator opens from resetting the breaker or posting alerts, with `auth.mode: none` above all.
- Every response says `X-Content-Type-Options: nosniff`; HTML responses (the status page) also forbid
  scripts, framing and leaking the URL in `Referer`: the page has no JavaScript, so its policy is the
  strictest one that still loads its own inline style.

Middlewares only: no handler logic, no settings.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The status page inlines its stylesheet (`<style>`) and loads nothing else.
HTML_POLICY = "; ".join(
    (
        "default-src 'none'",
        "style-src 'unsafe-inline'",
        "img-src 'self' data:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
HTML_HEADERS = {
    "Content-Security-Policy": HTML_POLICY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


@web.middleware
async def require_json_posts(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.method == "POST" and request.content_type != "application/json":
        given = request.headers.get("Content-Type") or "none"
        return web.json_response(
            {"error": "unsupported_media_type", "message": f"POST needs application/json, got {given}"},
            status=415,
        )
    return await handler(request)


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:  # aiohttp's own 404/405 answers get the headers too
        _stamp(exc)
        raise
    _stamp(response)
    return response


def _stamp(response: web.StreamResponse) -> None:
    if response.prepared:  # streamed already: its headers are on the wire
        return
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    if response.content_type == "text/html":
        for name, value in HTML_HEADERS.items():
            response.headers.setdefault(name, value)
