"""Intake bounds that keep hostile input a 4xx: timestamps in a plausible range, names matched whole,
values echoed cut, and an auth check that takes any header text.

Times are relative to the injected `now`, never to the machine's clock; year 1 and 9999 are the hostile
values themselves (out of any range), not calendar dates the tests depend on.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app import kubenames
from app.config.settings import AuthSettings
from app.ingest import admission, auth, payloads, signals

KEYS = signals.NodeKeys(("node",))
NOW = datetime.now(UTC).replace(microsecond=0)
ZERO = "0001-01-01T00:00:00Z"


def raw_alert(**fields: Any) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {"alertname": "GpuXid", "node": "gpu-1", "gpu": "0", "xid": "79"},
        "startsAt": (NOW - timedelta(minutes=5)).isoformat(),
        "endsAt": ZERO,
        "fingerprint": "0123456789abcdef",
        **fields,
    }


def raw_event(**fields: Any) -> dict[str, Any]:
    return {
        "id": "ev-1",
        "node": "gpu-1",
        "gpu": 0,
        "kind": "xid",
        "xid": 79,
        "occurred_at": (NOW - timedelta(seconds=3)).isoformat(),
        **fields,
    }


def sorted_alert(**fields: Any) -> admission.Sorted:
    return admission.sort_alerts([raw_alert(**fields)], keys=KEYS, received_at=NOW)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("startsAt", "0001-01-01T00:00:00Z"),  # Go's zero time as a start: the OverflowError row
        ("startsAt", "0001-01-01T00:30:00+01:00"),  # astimezone of this overflows
        ("startsAt", "9999-12-31T23:59:59-01:00"),  # and of this
        ("startsAt", "1999-12-31T23:59:59Z"),
        ("endsAt", "1970-01-01T00:00:00Z"),  # an end before 2000 that is not the zero time
        ("endsAt", "9999-12-31T23:59:59-01:00"),
    ],
)
def test_an_implausible_timestamp_is_refused_as_invalid_timestamp(field: str, value: str) -> None:
    got = sorted_alert(**{field: value})
    assert got.records == ()
    (refusal,) = got.refusals
    assert (refusal.where, refusal.reason) == (f"alerts.0.{field}", admission.Reason.INVALID_TIMESTAMP)
    assert refusal.item[field] == value  # kept as it came, for the dead-letter list


def test_a_start_more_than_a_day_ahead_of_the_clock_is_refused_and_a_day_is_not() -> None:
    assert sorted_alert(startsAt=(NOW + signals.AHEAD).isoformat()).records
    got = sorted_alert(startsAt=(NOW + signals.AHEAD + timedelta(seconds=1)).isoformat())
    assert [r.reason for r in got.refusals] == [admission.Reason.INVALID_TIMESTAMP]
    assert "ahead of this service's clock" in got.refusals[0].message


def test_the_earliest_plausible_start_and_the_zero_end_are_accepted() -> None:
    got = sorted_alert(startsAt=signals.EARLIEST.isoformat(), endsAt=ZERO)
    (record,) = got.records
    assert record.starts_at == signals.EARLIEST.isoformat()
    alert = payloads.AlertmanagerAlert.model_validate(raw_alert(endsAt=ZERO))
    assert signals.from_alert(alert, keys=KEYS, received_at=NOW).ends_at is None


def test_an_end_ahead_by_a_resolve_timeout_is_kept_in_utc() -> None:
    ends = (NOW + timedelta(hours=2)).astimezone(timezone(timedelta(hours=-3)))
    alert = payloads.AlertmanagerAlert.model_validate(raw_alert(endsAt=ends.isoformat()))
    got = signals.from_alert(alert, keys=KEYS, received_at=NOW)
    assert got.ends_at == ends
    assert got.ends_at is not None
    assert got.ends_at.tzinfo == UTC


@pytest.mark.parametrize(
    "occurred_at",
    ["0001-01-01T00:00:00Z", "1999-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00"],
)
def test_an_agent_event_from_an_implausible_time_is_refused(occurred_at: str) -> None:
    got = admission.sort_events([raw_event(occurred_at=occurred_at)], received_at=NOW)
    assert got.records == ()
    assert [(r.where, r.reason) for r in got.refusals] == [
        ("events.0.occurred_at", admission.Reason.INVALID_TIMESTAMP)
    ]


def test_a_plausible_agent_event_is_admitted_with_its_instant() -> None:
    got = admission.sort_events([raw_event()], received_at=NOW)
    (record,) = got.records
    assert datetime.fromisoformat(record.starts_at) == NOW - timedelta(seconds=3)


@pytest.mark.parametrize("name", ["gpu-a-00\n", "gpu-a-00\r\n", "gpu\n-a", "\ngpu-a-00"])
def test_a_name_with_a_newline_is_no_kubernetes_name(name: str) -> None:
    assert kubenames.subdomain_problem(name) is not None
    assert kubenames.label_problem(name) is not None
    got = sorted_alert(labels={"alertname": "X", "node": name})
    assert [(r.where, r.reason) for r in got.refusals] == [
        ("alerts.0.labels.node", admission.Reason.INVALID_ALERT)
    ]


def test_a_pod_or_namespace_with_a_trailing_newline_is_refused() -> None:
    labels = {"alertname": "X", "node": "gpu-1", "namespace": "ml\n", "pod": "train-0"}
    assert [r.where for r in sorted_alert(labels=labels).refusals] == ["alerts.0.labels.namespace"]
    labels = {**labels, "namespace": "ml", "pod": "train-0\n"}
    assert [r.where for r in sorted_alert(labels=labels).refusals] == ["alerts.0.labels.pod"]


@pytest.mark.parametrize("label", ["gpu", "xid"])
def test_a_5000_digit_label_is_refused_and_echoed_cut(label: str) -> None:
    got = sorted_alert(labels={"alertname": "X", "node": "gpu-1", label: "9" * 5000})
    (refusal,) = got.refusals
    assert refusal.where == f"alerts.0.labels.{label}"
    assert "(5000 characters)" in refusal.message
    assert len(refusal.message) < 200
    assert refusal.item["labels"][label] == "9" * 5000  # the dead-letter list keeps it whole


BEARER = AuthSettings(mode="bearer", token="s3cret")  # type: ignore[arg-type]
BASIC = AuthSettings(mode="basic", username="am", password="pw")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "header",
    [
        "Bearer \udcff\udcfe",  # what aiohttp makes of the bytes \xff\xfe (surrogateescape)
        "Bearer s3cret\udcff",
        "Bearer \ud800",
        "Bearer s3crét",
        "\udcff\udcfe",
    ],
)
def test_a_bearer_header_of_any_bytes_is_refused_not_raised(header: str) -> None:
    verdict = auth.check(header, BEARER)
    assert not verdict.ok
    assert verdict.problem


@pytest.mark.parametrize("credentials", ["\udcff\udcfe", "bé==", "YW06cHc=\udcff", "/w=="])
def test_basic_credentials_of_any_bytes_are_refused_not_raised(credentials: str) -> None:
    verdict = auth.check(f"Basic {credentials}", BASIC)
    assert not verdict.ok
    assert verdict.problem == "malformed Basic credentials" or verdict.problem == "bad credentials"


def test_the_right_credentials_still_pass() -> None:
    assert auth.check("Bearer s3cret", BEARER).ok
    assert auth.check("Basic YW06cHc=", BASIC).ok  # am:pw


# Every code point, lone surrogates included (hypothesis leaves category Cs out unless told) and drawn
# often: they are what aiohttp makes of header bytes that are not UTF-8, and rare among all code points.
ANY_CHARACTER = st.one_of(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=()),
    st.characters(exclude_categories=()),
)
ANY_TEXT = st.lists(ANY_CHARACTER, max_size=60).map("".join)  # st.text drops surrogates whatever it is given


@settings(max_examples=200, deadline=None)
@given(header=st.one_of(ANY_TEXT, ANY_TEXT.map("Bearer ".__add__), ANY_TEXT.map("Basic ".__add__)))
def test_any_header_text_gets_a_verdict_and_only_the_secret_passes(header: str) -> None:
    for config, secret in ((BEARER, "s3cret"), (BASIC, "YW06cHc=")):
        verdict = auth.check(header, config)
        assert not verdict.ok or secret in header
        assert verdict.ok or verdict.problem


@pytest.mark.parametrize(
    ("ahead", "span"),
    [(timedelta(days=1), "1 day"), (timedelta(days=2), "2 days"), (timedelta(days=365), "365 days")],
)
def test_a_time_too_far_ahead_says_by_how_much_it_may_be(ahead: timedelta, span: str) -> None:
    late = NOW + ahead + timedelta(seconds=1)
    with pytest.raises(signals.TimestampError) as caught:
        signals.check_time(late, now=NOW, where="alerts.0.startsAt", ahead=ahead)
    assert (caught.value.where, caught.value.message) == (
        "alerts.0.startsAt",
        f"{late.isoformat()} is more than {span} ahead of this service's clock",
    )
