"""A value from outside cannot forge a log line: in the text format every record is one line with its
control, bidi and surrogate characters escaped (a traceback's lines marked `| `), in JSON one object per
line that reads back to exactly what was logged; a malformed HTTP request is one line, rate-limited."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest
from aiohttp import http_exceptions, web
from hypothesis import given, settings
from hypothesis import strategies as st

from app.config.settings import LogSettings, load_settings
from app.obs import logs

FORGED = "x\n2026-01-01 00:00:00,000 CRITICAL app.act: breaker reset by admin"
HOSTILE = [
    FORGED,
    "a\r\nb",
    "\x1b[2J\x1b[31mred",  # ANSI: clear the screen, colour
    "admin\u202egnp.exe",  # right-to-left override
    "\u2066isolated\u2069",
    "line\u2028separator",
    "c1\x85next-line",
    "\udcff\udcfe",  # what aiohttp makes of header bytes \xff\xfe
    "nul\x00bell\x07del\x7f",
]
# Every character that may start a new line, move the cursor or reorder text.
BREAKING = {chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)}
BREAKING |= {chr(c) for c in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def record(msg: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("app.ingest.handlers", logging.WARNING, __file__, 1, msg, args, exc_info)


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_argument_stays_on_its_records_one_line_in_text(value: str) -> None:
    line = logs.TextFormatter().format(record("alert %s from group %r", value, value))
    assert len(line.splitlines()) == 1
    assert not BREAKING & set(line)
    assert not any(0xD800 <= ord(c) < 0xE000 for c in line)
    assert line.encode("utf-8")  # a stream handler can write it
    assert "WARNING app.ingest.handlers: alert " in line


def test_the_escapes_are_readable() -> None:
    line = logs.TextFormatter("%(message)s").format(
        record("%s|%s|%s|%s", "a\nb", "\x1b[31m", "\u202e", "\udcff")
    )
    assert line == "a\\nb|\\x1b[31m|\\u202e|\\udcff"


def test_a_hostile_message_itself_is_escaped_too() -> None:
    line = logs.TextFormatter("%(message)s").format(record(FORGED))
    assert line == FORGED.replace("\n", "\\n")


@pytest.mark.parametrize("value", HOSTILE)
def test_json_lines_are_one_object_that_reads_back_exactly(value: str) -> None:
    line = logs.JsonFormatter().format(record("pod %s", value))
    assert len(line.splitlines()) == 1
    assert line.isascii()
    parsed = json.loads(line)
    assert parsed["msg"] == f"pod {value}"
    assert (parsed["level"], parsed["logger"]) == ("WARNING", "app.ingest.handlers")
    assert parsed["ts"].endswith("+00:00")


def test_a_traceback_quoting_hostile_text_cannot_start_a_line() -> None:
    exc = raised(ValueError(FORGED))
    text = logs.TextFormatter().format(record("failed on %s", "row 1", exc=exc))
    first, *rest = text.splitlines()
    assert "failed on row 1" in first
    assert rest
    assert all(line.startswith(logs.CONTINUATION) for line in rest)
    assert any("Traceback" in line for line in rest)
    assert "CRITICAL" in text  # the text is there, marked as a continuation, never a record's start
    parsed = json.loads(logs.JsonFormatter().format(record("failed", exc=exc)))
    assert parsed["exc"].endswith(f"ValueError: {FORGED}")


def test_the_formatters_leave_the_record_as_logged_for_other_handlers() -> None:
    exc = raised(RuntimeError("boom"))
    rec = record("a %s", "b\n", exc=exc)
    logs.TextFormatter().format(rec)
    assert (rec.msg, rec.args, rec.exc_info is not None) == ("a %s", ("b\n",), True)


def test_a_long_message_is_cut_and_says_by_how_much() -> None:
    line = logs.TextFormatter("%(message)s", max_chars=300).format(record("got %s", "9" * 5000))
    assert line == "got " + "9" * 296 + "... (4704 more characters)"
    parsed = json.loads(logs.JsonFormatter(max_chars=300).format(record("got %s", "9" * 5000)))
    assert parsed["msg"].endswith("... (4704 more characters)")


@settings(max_examples=200, deadline=None)
@given(value=st.lists(st.characters(exclude_categories=()), max_size=40).map("".join))
def test_any_text_is_one_line_in_both_formats(value: str) -> None:
    text = logs.TextFormatter().format(record("label %s", value))
    assert len(text.splitlines()) == 1
    assert not BREAKING & set(text)
    assert json.loads(logs.JsonFormatter().format(record("label %s", value)))["msg"] == f"label {value}"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_setup_installs_the_configured_format_on_the_root_logger(fmt: str) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    try:
        config = load_settings(auth={"mode": "none"}, log={"format": fmt}).log
        logs.setup(config, level="INFO", stream=stream)
        logging.getLogger("app.test").warning("alertname %s", FORGED)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    (line,) = stream.getvalue().splitlines()
    if fmt == "json":
        assert json.loads(line)["msg"] == f"alertname {FORGED}"
    else:
        assert line.endswith("WARNING app.test: alertname " + FORGED.replace("\n", "\\n"))


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def server_record(exc: BaseException, peer: str = "10.0.0.9") -> logging.LogRecord:
    """What aiohttp's RequestHandler.handle_error logs: `log_exception("Error handling request from %s")`."""
    rec = logging.LogRecord(
        logs.SERVER_LOGGER, logging.ERROR, __file__, 1, "Error handling request from %s", (peer,), None
    )
    rec.exc_info = (type(exc), exc, exc.__traceback__)
    return rec


BAD_HEADER = http_exceptions.BadHttpMessage("Invalid header value char:\n\n  b'X-Evil: \\x1b[31m'\n    ^")


def test_a_malformed_request_becomes_one_warning_line_without_traceback() -> None:
    rejected = logs.RejectedRequests(per_second=5, clock=Ticks())
    rec = server_record(raised(BAD_HEADER))
    assert rejected.filter(rec)
    assert rec.exc_info is None
    assert rec.levelname == "WARNING"
    line = logs.TextFormatter("%(levelname)s %(message)s").format(rec)
    assert line == "WARNING refused a malformed HTTP request from 10.0.0.9: 400 Invalid header value char"


def test_malformed_requests_beyond_the_rate_are_dropped_and_counted_on_the_next_line() -> None:
    ticks = Ticks()
    rejected = logs.RejectedRequests(per_second=5, clock=ticks)
    kept = [rejected.filter(server_record(raised(BAD_HEADER))) for _ in range(1000)]
    assert sum(kept) == 5
    assert (rejected.suppressed, rejected.refused) == (995, 1000)
    ticks.now += 1.0  # a second later: five more lines may be written
    rec = server_record(raised(BAD_HEADER))
    assert rejected.filter(rec)
    assert rec.getMessage().endswith("(995 more refused since the last such line)")
    assert rejected.suppressed == 0


def test_a_body_aiohttp_could_not_drain_is_one_line_too() -> None:
    # After answering, aiohttp drains the unread body; a gzip body that is not gzip fails there and is
    # logged as "Unhandled exception" with the payload error (caused by the parser's) as exc_info.
    exc = web.RequestPayloadError("400, message:\n  Can not decode content-encoding: gzip")
    exc.__cause__ = http_exceptions.ContentEncodingError("Can not decode content-encoding: gzip")
    rec = server_record(raised(exc))
    rec.msg, rec.args = "Unhandled exception", ()
    assert logs.RejectedRequests(per_second=5, clock=Ticks()).filter(rec)
    assert rec.exc_info is None
    assert rec.getMessage() == (
        "refused a malformed HTTP request from unknown: 400 Can not decode content-encoding: gzip"
    )


def test_a_handlers_own_exception_keeps_its_traceback() -> None:
    rejected = logs.RejectedRequests(per_second=1, clock=Ticks())
    for _ in range(3):  # never rate-limited: a bug is not a peer's malformed request
        rec = server_record(raised(KeyError("bug")))
        assert rejected.filter(rec)
        assert rec.exc_info is not None
        assert rec.levelno == logging.ERROR


def test_refuse_quietly_installs_one_filter_on_aiohttps_server_logger() -> None:
    target = logging.getLogger(logs.SERVER_LOGGER)
    before = list(target.filters)
    try:
        logs.refuse_quietly(LogSettings(rejected_requests_per_s=2))
        second = logs.refuse_quietly(LogSettings(rejected_requests_per_s=3))
        installed = [f for f in target.filters if isinstance(f, logs.RejectedRequests)]
        assert installed == [second]
        assert second.per_second == 3
    finally:
        target.filters[:] = before


def test_the_escape_table_covers_what_splitlines_breaks_on() -> None:
    # Every character str.splitlines treats as a line boundary is escaped.
    breakers = {chr(c) for c in range(sys.maxunicode + 1) if len(f"a{chr(c)}b".splitlines()) > 1}
    assert breakers
    assert all(logs.escape(c) != c for c in breakers)


def test_the_default_handler_follows_stderr_when_it_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    first, second = io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr(sys, "stderr", first)
        logs.setup(LogSettings(), level="INFO")
        logging.getLogger("app.test").warning("to the first")
        first.close()  # a capture that ended: records after it must not hit the closed stream
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("app.test").warning("to the second")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert second.getvalue().count("\n") == 1
    assert "to the second" in second.getvalue()
