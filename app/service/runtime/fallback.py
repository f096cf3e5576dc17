"""What aiohttp would answer itself, answered without raising on hostile bytes: Expect and unrouted paths.

aiohttp's default `Expect` handler quotes the header into the text of its 417 (aiohttp
`web_urldispatcher._default_expect_handler`); a header byte that is not UTF-8 arrives as a lone surrogate
(the parser's surrogateescape), that text cannot be encoded, and the answer is a 500 with a traceback.
It runs before any middleware, for every route and for the 404/405 of a path no route matches, so each
route takes `expect` (public `expect_handler`), and `add_fallback` adds a last route that matches every
other request: it answers the 404 or 405 aiohttp would have, in JSON, with the same safe `expect`.
"""

from __future__ import annotations

from aiohttp import HttpVersion11, hdrs, web

_CONTINUE = "100-continue"


def _error(status: int, error: str, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": error, "message": message}, status=status, headers=headers or None)


async def expect(request: web.Request) -> web.StreamResponse | None:
    """`Expect: 100-continue` as aiohttp answers it (its default handler); anything else is a 417."""
    if request.version != HttpVersion11:
        return None
    if request.headers.get(hdrs.EXPECT, "").lower() == _CONTINUE:
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        # As aiohttp does: the interim answer is not the start of the response body.
        request.writer.output_size = 0
        return None
    return _error(417, "expectation_failed", f"only 'Expect: {_CONTINUE}' is understood")


async def _unrouted(request: web.Request) -> web.StreamResponse:
    """404, or 405 with `Allow` when another route has this path (aiohttp's `UrlDispatcher.resolve`)."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is request.match_info.route.resource:
            continue
        match, methods = await resource.resolve(request)
        allowed |= methods if match is None else set()
    if allowed:
        return _error(
            405,
            "method_not_allowed",
            f"{request.method} is not allowed here",
            Allow=",".join(sorted(allowed)),
        )
    return _error(404, "not_found", "no such route")


def add_fallback(app: web.Application) -> None:
    """Register the route of last resort; call after every other route is added."""
    app.router.add_route("*", "/{path:.*}", _unrouted, expect_handler=expect)
