"""Decoding of `depends` XIDs: each rule's class, its catalog fallback, the context it reads, and why it says so."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.classify import xids
from app.classify.classifier import Rules, classify
from app.config import rules
from app.config.settings import RULES_DIR
from app.domain import FaultClass, Signal, SignalSource, SignalStatus, freeze_mapping

NOW = datetime.now(UTC)
CATALOG = rules.load_catalog(RULES_DIR / "xid-catalog.yaml")
POLICY = rules.load_policy(RULES_DIR / "policy.yaml")
SHIPPED = Rules(catalog=CATALOG, policy=POLICY)


def sig(
    xid: int | None,
    *,
    fp: str = "",
    ago: timedelta = timedelta(0),
    status: SignalStatus = SignalStatus.FIRING,
    name: str = "GpuXid",
    gpu: int = 0,
    **labels: str,
) -> Signal:
    return Signal(
        source=SignalSource.ALERTMANAGER,
        fingerprint=fp or f"fp-{xid}-{name}-{ago.total_seconds()}-{sorted(labels.items())}",
        status=status,
        name=name,
        starts_at=NOW - ago,
        received_at=NOW - ago,
        node="gpu-node-1",
        gpu=gpu,
        xid=xid,
        labels=freeze_mapping({**({"xid": str(xid)} if xid is not None else {}), **labels}),
    )


def with_entry(xid: int, **update: object) -> rules.XidCatalog:
    """The shipped catalog with one entry changed."""
    entry = CATALOG.xids[xid].model_copy(update=update)
    return CATALOG.model_copy(update={"xids": {**CATALOG.xids, xid: entry}})


def decode(
    signal: Signal, context: list[Signal], catalog: rules.XidCatalog = CATALOG, **policy: object
) -> xids.Decoded:
    assert signal.xid is not None
    classification = POLICY.classification.model_copy(update=policy)
    return xids.decode(
        signal, catalog.xids[signal.xid], catalog=catalog, policy=classification, context=context
    )


# --- the catalog's fallback -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xid", "labels"),
    [
        (48, {}),  # no row-remap failure
        (154, {}),  # no recovery action
        (154, {"recovery_action": "soon"}),  # unreadable
        (154, {"recovery_action": "99"}),  # not in the catalog's table
        (171, {}),  # alone
    ],
)
def test_the_catalogs_fallback_is_what_a_depends_xid_takes_without_context(
    xid: int, labels: dict[str, str]
) -> None:
    catalog = with_entry(xid, fallback="reboot-node")
    assert decode(sig(xid, **labels), [], catalog).fault_class is FaultClass.REBOOT_NODE
    assert decode(sig(xid, **labels), []).fault_class is FaultClass.RESET_GPU  # the shipped fallback


def test_a_repeating_link_takes_the_catalogs_fallback() -> None:
    catalog = with_entry(74, fallback="replace")
    repeats = [sig(74, link="1", ago=timedelta(minutes=m)) for m in (5, 10)]
    assert decode(sig(74, link="1"), repeats, catalog).fault_class is FaultClass.REPLACE


def test_without_a_fallback_a_depends_xid_resets_the_gpu() -> None:
    catalog = with_entry(154, fallback=None)
    assert decode(sig(154), [], catalog).fault_class is FaultClass.RESET_GPU


def test_a_depends_xid_of_a_companion_counts_by_its_fallback() -> None:
    catalog = with_entry(48, fallback="replace")
    decoded = decode(sig(45), [sig(48)], catalog)
    assert decoded.fault_class is FaultClass.REPLACE
    assert decoded.evidence == ("XID 48",)


def test_a_depends_entry_without_a_rule_is_refused() -> None:
    catalog = with_entry(48, rule=None)
    with pytest.raises(ValueError, match="XID 48 is 'depends' without a rule"):
        decode(sig(48), [], catalog)


# --- XID 48 and the row-remap failure ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "labels",
    [
        {"row_remap_failure": "1"},
        {"row_remap_failure": " TRUE "},
        {"remap_failure": "yes"},
        {"remap_failure": "Yes"},
    ],
)
def test_a_remap_failure_flag_makes_xid_48_a_replacement(labels: dict[str, str]) -> None:
    decoded = decode(sig(48, **labels), [])
    assert decoded.fault_class is FaultClass.REPLACE
    assert decoded.reason == (
        "XID 48 (double-bit ECC) with a row-remap failure on the same GPU: the GPU cannot spare "
        "the bad row any more, hand it off for replacement"
    )
    assert decoded.evidence == ("GpuXid (alertmanager)",)


@pytest.mark.parametrize("value", ["0", "false", "no", ""])
def test_a_remap_flag_that_says_no_is_no_failure(value: str) -> None:
    decoded = decode(sig(48, row_remap_failure=value), [])
    assert decoded.fault_class is FaultClass.RESET_GPU
    assert decoded.reason == (
        "XID 48 (double-bit ECC) without a row-remap failure: a GPU reset applies the pending remap"
    )
    assert decoded.evidence == ()


# --- XID 45 and 171/172: the XIDs beside them decide ------------------------------------------------------


def test_xid_45_beside_itself_only_is_still_alone() -> None:
    decoded = decode(sig(45), [sig(45, fp="another-45")])
    assert decoded.fault_class is FaultClass.IGNORE
    assert (
        decoded.reason
        == "XID 45 alone is cleanup after another error (or a killed process), never a root cause"
    )


def test_signals_without_an_xid_and_unknown_xids_are_passed_over_not_the_end() -> None:
    context = [sig(None, name="GpuHot"), sig(45, fp="another"), sig(999), sig(79)]
    decoded = decode(sig(45), context)
    assert decoded.fault_class is FaultClass.REBOOT_NODE
    assert decoded.evidence == ("XID 79",)


def test_the_worst_companion_is_by_severity_not_by_name() -> None:
    # "ignore" sorts before "restart-workload" by name; by severity the restart wins.
    decoded = decode(sig(45), [sig(43), sig(13)])
    assert decoded.fault_class is FaultClass.RESTART_WORKLOAD
    assert decoded.reason == "XID 45 accompanies XID 13, 43 on this GPU and takes the class of XID 13"
    assert decoded.evidence == ("XID 13", "XID 43")


def test_detail_xid_alone_says_what_it_assumes() -> None:
    decoded = decode(sig(171), [])
    entry = CATALOG.xids[171]
    assert decoded.reason == (
        f"XID 171 ({entry.name}) without the XID it accompanies on this GPU: assume {entry.fallback}"
    )


# --- XID 154: the driver's recovery action ----------------------------------------------------------------


def test_xid_154_reasons() -> None:
    assert decode(sig(154), []).reason == (
        "XID 154 without the driver's recovery action on the signal: assume reset-gpu"
    )
    assert decode(sig(154, recovery_action="soon"), []).reason == (
        "XID 154 with an unreadable recovery action 'soon'"
    )
    assert decode(sig(154, recovery_action="99"), []).reason == (
        "XID 154 with recovery action 99, which the catalog does not map"
    )
    mapped = decode(sig(154, gpu_recovery_action="2"), [])
    assert mapped.fault_class is FaultClass.REBOOT_NODE
    assert mapped.reason == "XID 154: the driver asks for recovery action 2 → reboot-node"


# --- XID 74 and friends: NVLink errors, per link ----------------------------------------------------------


def test_the_first_link_error_is_transient_and_says_its_count() -> None:
    decoded = decode(sig(74, link="3"), [])
    assert decoded.fault_class is FaultClass.TRANSIENT
    assert decoded.reason == (
        "XID 74 on link 3: occurrence 1 of 3 within 1h; NVLink errors are often absorbed by link retry, "
        "so retry before quarantining"
    )


def test_a_link_error_without_a_link_counts_on_the_gpu() -> None:
    first = decode(sig(74), [])
    assert first.reason.startswith("XID 74 on this GPU: occurrence 1 of 3 within 1h;")
    # With no link on the signal, every repeat on the GPU counts, whatever its link.
    again = [sig(74, nvlink="1", ago=timedelta(minutes=5)), sig(74, ago=timedelta(minutes=9))]
    assert decode(sig(74), again).fault_class is FaultClass.RESET_GPU


def test_repeats_on_the_link_within_the_window_escalate_with_evidence() -> None:
    earlier = [sig(74, link="3", ago=timedelta(minutes=m)) for m in (10, 60)]  # 60: exactly at the edge
    decoded = decode(sig(74, link="3"), earlier)
    assert decoded.fault_class is FaultClass.RESET_GPU
    assert decoded.reason == (
        "XID 74 repeated 3 times on link 3 within 1h (threshold 3): the link does not recover by retry"
    )
    assert decoded.evidence == tuple(f"XID 74 at {s.starts_at.isoformat()}" for s in earlier)


def test_a_resent_alert_is_not_a_repeat_of_the_link_error() -> None:
    """Alertmanager re-sends a firing alert under the same fingerprint: one occurrence, not three."""
    signal = sig(74, link="3", fp="same")
    resent = [replace(signal, starts_at=NOW - timedelta(minutes=m)) for m in (1, 2)]
    decoded = decode(signal, resent)
    assert decoded.fault_class is FaultClass.TRANSIENT
    assert "occurrence 1 of 3" in decoded.reason


def test_old_repeats_and_other_links_do_not_count() -> None:
    context = [
        sig(74, link="3", ago=timedelta(minutes=61)),
        sig(74, link="4", ago=timedelta(minutes=1)),
        sig(95, link="3", ago=timedelta(minutes=1)),
    ]
    assert "occurrence 1 of 3" in decode(sig(74, link="3"), context).reason
    # A repeat that does not say its link may be this link: it counts.
    assert "occurrence 2 of 3" in decode(sig(74, link="3"), [sig(74, ago=timedelta(minutes=1))]).reason


@pytest.mark.parametrize(
    ("window", "said"),
    [
        (timedelta(hours=2), "2h"),
        (timedelta(minutes=90), "90m"),
        (timedelta(minutes=2), "2m"),
        (timedelta(seconds=45), "45s"),
    ],
)
def test_the_window_is_said_in_its_largest_whole_unit(window: timedelta, said: str) -> None:
    decoded = decode(sig(74, link="0"), [], link_window=window)
    assert f"within {said};" in decoded.reason


def test_the_repeat_threshold_is_the_policys() -> None:
    earlier = [sig(74, link="0", ago=timedelta(minutes=1))]
    assert decode(sig(74, link="0"), earlier, link_repeats=2).fault_class is FaultClass.RESET_GPU
    assert decode(sig(74, link="0"), [], link_repeats=1).fault_class is FaultClass.RESET_GPU


# --- what the classifier hands the decoders ---------------------------------------------------------------


def test_resolved_or_stale_signals_do_not_decode_a_depends_xid() -> None:
    window = POLICY.classification.context_window
    resolved = sig(None, name="GpuRowRemapFailure", status=SignalStatus.RESOLVED)
    stale = sig(None, name="GpuRowRemapFailure", ago=window + timedelta(seconds=1))
    edge = sig(None, name="GpuRowRemapFailure", ago=window)
    assert classify(sig(48), rules=SHIPPED, context=[resolved]).fault_class is FaultClass.RESET_GPU
    assert classify(sig(48), rules=SHIPPED, context=[stale]).fault_class is FaultClass.RESET_GPU
    assert classify(sig(48), rules=SHIPPED, context=[edge]).fault_class is FaultClass.REPLACE
    assert classify(
        sig(45), rules=SHIPPED, context=[replace(sig(79), status=SignalStatus.RESOLVED)]
    ).fault_class is (FaultClass.IGNORE)


def test_link_repeats_reach_back_the_link_window_not_the_context_window() -> None:
    # 30 minutes is past the 10-minute context window but inside the 1-hour link window.
    earlier = [sig(74, link="1", ago=timedelta(minutes=m)) for m in (30, 40)]
    fault = classify(sig(74, link="1"), rules=SHIPPED, context=earlier)
    assert fault.fault_class is FaultClass.RESET_GPU
    assert fault.rule == "xid-per-link"
    assert len(fault.evidence) == 2
