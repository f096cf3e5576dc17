"""Whole-body decoding: the 400s for bodies that are not JSON we can read, and the 422's message and
details for JSON of the wrong shape (where, what, how many more)."""

from __future__ import annotations

import pydantic
import pytest
from aiohttp import web

from app.ingest import bodies


class Body(pydantic.BaseModel):
    version: int
    items: list[int]


def rejection(raw: bytes) -> bodies.Rejection:
    with pytest.raises(bodies.Rejection) as caught:
        bodies.decode(raw, Body)
    return caught.value


def test_a_valid_body_decodes() -> None:
    assert bodies.decode(b'{"version": 1, "items": [2]}', Body) == Body(version=1, items=[2])


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "empty_body"),
        (b"{nope", "malformed_json"),
        (b"[" * 300 + b"]" * 300, "too_deep"),
        (b'{"version": "\xff"}', "bad_encoding"),
    ],
)
def test_bodies_we_cannot_read_are_400(raw: bytes, reason: str) -> None:
    got = rejection(raw)
    assert (got.status, got.reason) == (400, reason)


def test_one_schema_error_names_where_and_what() -> None:
    got = rejection(b'{"version": 1, "items": [1, "x"]}')
    assert (got.status, got.reason) == (422, "invalid_payload")
    assert got.details == [{"loc": "items.1", "msg": got.details[0]["msg"]}]
    assert got.message == f"items.1: {got.details[0]['msg']}"
    assert got.body() == {"error": "invalid_payload", "message": got.message, "details": got.details}


def test_several_schema_errors_say_how_many_more() -> None:
    got = rejection(b'{"items": ["a", "b"]}')
    assert [d["loc"] for d in got.details] == ["version", "items.0", "items.1"]
    assert got.message.endswith(" (and 2 more)")
    assert got.message.startswith("version: ")
    two = rejection(b'{"items": ["a"]}')
    assert two.message.endswith(" (and 1 more)")


def test_the_body_itself_of_the_wrong_type_is_located_as_the_body() -> None:
    got = rejection(b"[1]")
    assert got.details[0]["loc"] == "(body)"
    assert "url" not in str(got.details)


def test_details_are_capped_but_the_count_is_not() -> None:
    got = rejection(b'{"version": 1, "items": [' + b",".join(b'"x"' for _ in range(30)) + b"]}")
    assert len(got.details) == 20
    assert got.message.endswith(" (and 29 more)")


def test_a_rejection_without_details_has_no_details_key() -> None:
    assert bodies.Rejection(413, "body_too_large", "too big").body() == {
        "error": "body_too_large",
        "message": "too big",
    }


@pytest.mark.parametrize(
    ("raw", "reason", "message"),
    [
        (b"", "empty_body", "the request body is empty; expected a JSON object"),
        (b"{nope", "malformed_json", "malformed JSON: key must be a string at line 1 column 2"),
        (
            b"[" * 300 + b"]" * 300,
            "too_deep",
            "JSON nesting is too deep: recursion limit exceeded at line 1 column 202",
        ),
        (
            b'{"version": "\xff"}',
            "bad_encoding",
            "the body is not valid UTF-8 JSON: invalid unicode code point at line 1 column 14",
        ),
    ],
)
def test_a_400_says_what_the_parser_found_without_its_prefix(raw: bytes, reason: str, message: str) -> None:
    assert rejection(raw).body() == {"error": reason, "message": message}


class Stream:
    """What read_limited reads of a request: its declared length and its body stream, in given pieces."""

    def __init__(self, pieces: list[bytes], *, declared: int | None, broken: bool = False) -> None:
        self.content_length = declared
        self.content = self
        self._pieces = list(pieces)
        self._broken = broken
        self.reads = 0

    async def read(self, n: int) -> bytes:
        self.reads += 1
        if self._broken:
            raise web.RequestPayloadError("bad gzip")
        return self._pieces.pop(0) if self._pieces else b""


async def read(stream: Stream, limit: int) -> bytes:
    return await bodies.read_limited(stream, limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pieces", "declared"),
    [
        ([b"abc", b"de"], 5),  # exactly the limit is allowed, declared or read
        ([b"abc", b"de"], None),
        ([b"ab", b"c"], 3),
        ([], 0),
    ],
)
async def test_a_body_within_the_limit_is_read_whole(pieces: list[bytes], declared: int | None) -> None:
    assert await read(Stream(pieces, declared=declared), 5) == b"".join(pieces)


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    stream = Stream([b"x"], declared=6)
    with pytest.raises(bodies.Rejection) as caught:
        await read(stream, 5)
    assert caught.value.body() == {
        "error": "body_too_large",
        "message": "body of 6 bytes exceeds the limit of 5 bytes",
    }
    assert caught.value.status == 413
    assert stream.reads == 0


@pytest.mark.parametrize("declared", [None, 2])  # undeclared, or a length that lies
async def test_bytes_read_over_the_limit_are_refused_as_they_arrive(declared: int | None) -> None:
    stream = Stream([b"abc", b"def", b"ghi"], declared=declared)
    with pytest.raises(bodies.Rejection) as caught:
        await read(stream, 5)
    assert (caught.value.status, caught.value.body()) == (
        413,
        {"error": "body_too_large", "message": "body exceeds the limit of 5 bytes"},
    )
    assert stream.reads == 2  # stopped at the piece that crossed the limit


async def test_a_body_aiohttp_cannot_decode_is_a_400() -> None:
    with pytest.raises(bodies.Rejection) as caught:
        await read(Stream([], declared=None, broken=True), 5)
    assert (caught.value.status, caught.value.body()) == (
        400,
        {"error": "unreadable_body", "message": bodies.UNREADABLE},
    )
