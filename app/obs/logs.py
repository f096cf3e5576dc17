"""The service's log, which text from outside cannot forge: one record is one line, in either format.

Alert labels, group keys, pod names and HTTP headers reach log messages. Written raw, a newline in one
plants a line of its own (a fake `CRITICAL`), an ANSI escape rewrites the terminal, a bidi override
reorders what a reader sees, and a lone surrogate (what aiohttp makes of a non-UTF-8 header byte) makes
the stream handler fail. So:

- `TextFormatter` escapes every control character (C0, DEL, C1), the line and paragraph separators, the
  bidi controls and surrogates in the whole line, arguments included; a traceback's own lines follow,
  each marked `| ` (escaped the same way), so a line that does not start with `| ` is always a record;
- `JsonFormatter` writes one JSON object per line, ASCII only (JSON's escapes do the rest);
- `RejectedRequests`, on aiohttp's server logger, turns each request aiohttp's parser refused (an ERROR
  with an 11-line traceback quoting the header, by default) into one WARNING line, rate-limited.

`setup` installs the formatter (from `sickbay serve`); `refuse_quietly` installs the filter (from the
application's assembly, so every server built from it has it). This module decides nothing else.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any

from aiohttp import http_exceptions, web_protocol

from app.config.settings import LogSettings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONTINUATION = "| "
SERVER_LOGGER = "aiohttp.server"  # where aiohttp's RequestHandler logs (aiohttp.log.server_logger)
DEFAULT_MAX_CHARS = LogSettings().max_message_chars

_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
# Bidi controls (Unicode TR9): ALM, LRM, RLM, the embeddings and overrides, the isolates.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_LINE_BREAKS = (0x2028, 0x2029)  # str.splitlines breaks on these as it does on \n
_SURROGATES = range(0xD800, 0xE000)


def _escapes() -> dict[int, str]:
    table: dict[int, str] = {}
    for code in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)):
        table[code] = _NAMED.get(code, f"\\x{code:02x}")
    for code in (*_BIDI, *_LINE_BREAKS, *_SURROGATES):
        table[code] = f"\\u{code:04x}"
    return table


_ESCAPES = _escapes()


def escape(text: str) -> str:
    """`text` with every character that could break, hide or reorder a log line written as `\\xNN`/`\\uNNNN`."""
    return text.translate(_ESCAPES)


def clip(text: str, limit: int) -> str:
    """At most `limit` characters of `text`, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


class TextFormatter(logging.Formatter):
    """`asctime level logger: message`, one line per record; a traceback's lines marked `| `."""

    def __init__(self, fmt: str = TEXT_FORMAT, *, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        super().__init__(fmt)
        self.max_chars = max_chars

    def format(self, record: logging.LogRecord) -> str:
        # A copy, so another handler of the same record still sees it as logged.
        view = logging.makeLogRecord(record.__dict__)
        view.msg, view.args = clip(record.getMessage(), self.max_chars), None
        view.exc_info, view.exc_text, view.stack_info = None, None, None
        line = escape(super().format(view))
        extra = [self.formatException(record.exc_info)] if record.exc_info else []
        if record.stack_info:
            extra.append(self.formatStack(record.stack_info))
        marked = [CONTINUATION + escape(part) for block in extra for part in block.splitlines()]
        return "\n".join([line, *marked])


class JsonFormatter(logging.Formatter):
    """One JSON object per record and line: `ts` (UTC, RFC 3339), `level`, `logger`, `msg`, `exc`, `stack`."""

    def __init__(self, *, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        super().__init__()
        self.max_chars = max_chars

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": clip(record.getMessage(), self.max_chars),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        # ensure_ascii: newlines, controls, bidi and surrogates all leave as \uNNNN escapes.
        return json.dumps(out, ensure_ascii=True)


def formatter(settings: LogSettings) -> logging.Formatter:
    if settings.format == "json":
        return JsonFormatter(max_chars=settings.max_message_chars)
    return TextFormatter(max_chars=settings.max_message_chars)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is at the time of the record, like logging's last resort does:
    bound at set-up, a handler outlives a replaced (and closed) stderr — an embedding program's or a
    test's capture — and every later record becomes a "Logging error" traceback."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _value: IO[str]) -> None:
        pass


def setup(settings: LogSettings, *, level: str, stream: IO[str] | None = None) -> logging.Handler:
    """The root logger writes to `stream` (stderr) through the configured formatter, and nothing else."""
    handler: logging.Handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    handler.setFormatter(formatter(settings))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


class RejectedRequests(logging.Filter):
    """A malformed request aiohttp refused: one WARNING line, no traceback, at most `per_second` a second.

    aiohttp's `RequestHandler.handle_error` logs `"Error handling request from %s"` with the parser's
    `HttpProcessingError` (BadHttpMessage, LineTooLong, ...) as `exc_info`, whose text quotes the raw
    header; after answering, it logs a body it could not drain (`_refusal`) as "Unhandled exception". Here that record is rewritten to the status, the first line of the parser's reason (its own
    words, not the request's bytes, cut and escaped anyway) and the peer; beyond the rate the records are
    dropped and counted, and the next line written says how many. Any other record passes unchanged:
    a handler's own exception (a bug) keeps its traceback.
    """

    def __init__(self, *, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.per_second = per_second
        self._clock = clock
        self._capacity = max(1.0, per_second)
        self._tokens = self._capacity
        self._last = clock()
        self._lock = threading.Lock()
        self.suppressed = 0  # dropped since the last line written
        self.refused = 0  # malformed requests seen in all

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        refusal = _refusal(exc)
        if refusal is None:
            return True
        with self._lock:
            self.refused += 1
            if not self._take():
                self.suppressed += 1
                return False
            suppressed, self.suppressed = self.suppressed, 0
        args = record.args if isinstance(record.args, tuple) else ()
        peer = str(args[0]) if len(args) == 1 else "unknown"
        code, reason = refusal
        record.msg = "refused a malformed HTTP request from %s: %d %s%s"
        record.args = (
            peer,
            code,
            escape(clip(reason, 120)),
            f" ({suppressed} more refused since the last such line)" if suppressed else "",
        )
        record.exc_info, record.exc_text = None, None
        # An ERROR (aiohttp's choice) becomes a WARNING: the service is fine, the peer was wrong.
        record.levelno = min(record.levelno, logging.WARNING)
        record.levelname = logging.getLevelName(record.levelno)
        return True

    def _take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._last) * self.per_second)
        self._last = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


def _refusal(exc: BaseException | None) -> tuple[int, str] | None:
    """(status, reason) when `exc` is aiohttp refusing the peer's bytes; None for anything else.

    `HttpProcessingError`: the parser refused the request line, a header or the framing. A
    `RequestPayloadError` logged by aiohttp itself is a body it could not decode while draining it after
    the answer (a `Content-Encoding: gzip` body that is not gzip): "Unhandled exception", by default.
    """
    if isinstance(exc, web_protocol.RequestPayloadError):
        cause = exc.__cause__
        if isinstance(cause, http_exceptions.HttpProcessingError):
            return cause.code, _first_line(cause.message) or "unreadable body"
        return 400, "unreadable body"
    if isinstance(exc, http_exceptions.HttpProcessingError):
        return exc.code, _first_line(exc.message)
    return None


def _first_line(text: str) -> str:
    return (text.splitlines() or [""])[0].strip().rstrip(":")


def refuse_quietly(settings: LogSettings, *, logger: str = SERVER_LOGGER) -> RejectedRequests:
    """Install a `RejectedRequests` filter on aiohttp's server logger, replacing one installed before."""
    target = logging.getLogger(logger)
    for old in [f for f in target.filters if isinstance(f, RejectedRequests)]:
        target.removeFilter(old)
    installed = RejectedRequests(per_second=settings.rejected_requests_per_s)
    target.addFilter(installed)
    return installed
