"""Whole-body decoding: the 400s for bodies that are not JSON we can read, and the 422's message and
details for JSON of the wrong shape (where, what, how many more)."""

from __future__ import annotations

import pydantic
import pytest

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
