"""Retraining from Prometheus history: a worse challenger keeps the current model, a better one is promoted
and its card shows both; Prometheus down or too little data change nothing; the weekly job runs off the
event loop; `sickbay train --from-prometheus` says when Prometheus cannot be reached.

Prometheus is `fakeprom.FrameClient` over the small simulated fleet (16 nodes x 6 days): the reader sees
what a real server would answer for it. The journal's labels are the simulator's hardware failures, as
`retrain.journal_failures` would return them.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

from app import cli
from app.config import rules
from app.config.settings import RULES_DIR, PredictionSettings, load_settings
from app.predict import dataset, history, prometheus, registry, retrain, split, train
from app.service import retraining_job
from app.service.runtime import SERVICES, build_app
from app.store import journal
from tests.predict.conftest import SHIPPED_MODELS, ModelFactory, with_card
from tests.predict.fakeprom import DownClient, FrameClient

HOUR = 3600.0
DAY = 86400.0


def small_config(**changes: Any) -> train.TrainConfig:
    """12 h horizon; half the nodes held out, the last third of the time: a holdout with several failures."""
    base: dict[str, Any] = {
        "horizon_s": 12 * HOUR,
        "split": split.SplitSpec(
            embargo_s=12 * HOUR,
            warmup_s=12 * HOUR,
            train_fraction=0.45,
            validation_fraction=0.2,
            holdout_node_fraction=0.5,
        ),
        "max_iter": 40,
        "min_alarm_rows": 3,
    }
    return train.TrainConfig(**{**base, **changes})


# Leaves of 10 million rows: no split is possible, every GPU gets the same probability — a model that
# cannot tell a failing GPU from a healthy one (PR-AUC = the base rate) and alarms on all of them.
CRIPPLED = {"min_samples_leaf": 10_000_000, "max_iter": 1}


@pytest.fixture(scope="module")
def fleet(train_dataset: Path) -> tuple[pd.DataFrame, pd.DataFrame, datetime]:
    """The dataset's samples, its hardware failures as journal rows would give them, and its end."""
    frame = dataset.read_timeseries(train_dataset)
    truth = dataset.read_truth(train_dataset)
    rows = [
        {"node": f.node, "gpu": f.gpu, "time": f.failure_time, "fault_class": f.fault_class, "mode": f.mode}
        for f in truth.failures.itertuples()
        if not f.pending
    ]
    end = datetime.fromtimestamp(float(frame["timestamp"].max()), UTC)
    return frame, history.from_records(rows), end


@pytest.fixture(scope="module")
def client(fleet: tuple[pd.DataFrame, pd.DataFrame, datetime]) -> FrameClient:
    return FrameClient(fleet[0])


@pytest.fixture(scope="module")
def xid_classes() -> dict[int, str]:
    return history.xid_classes(rules.load_catalog(RULES_DIR / "xid-catalog.yaml"))


def reader_for(client: prometheus.RangeClient) -> prometheus.Reader:
    return prometheus.Reader(
        prometheus.ReaderSettings(url="http://user:secret@prom:9090", step_s=300), client=client
    )


def shipped_copy(directory: Path) -> Path:
    shutil.copytree(SHIPPED_MODELS, directory)
    return directory


def snapshot(models: Path) -> tuple[bytes, list[str]]:
    return (models / registry.POINTER_FILE).read_bytes(), sorted(p.name for p in models.iterdir())


def run(
    models: Path,
    client: prometheus.RangeClient,
    fleet: tuple[pd.DataFrame, pd.DataFrame, datetime],
    xid_classes: dict[int, str],
    config: train.TrainConfig,
    **kwargs: Any,
) -> retrain.RetrainOutcome:
    _, journal_failures, end = fleet
    # The rules-baseline gate has its own tests (test_baseline_gate.py): these judge challenger vs current.
    options: dict[str, Any] = {
        "window_s": 6 * DAY,
        "failures_from_journal": journal_failures,
        "gate": False,
        **kwargs,
    }
    return retrain.retrain(
        reader=reader_for(client),
        models_dir=models,
        now=end,
        xid_classes=xid_classes,
        config=config,
        **options,
    )


@pytest.fixture(scope="module")
def rejected(
    tmp_path_factory: pytest.TempPathFactory,
    client: FrameClient,
    fleet: tuple[pd.DataFrame, pd.DataFrame, datetime],
    xid_classes: dict[int, str],
) -> tuple[Path, bytes, list[str], retrain.RetrainOutcome]:
    """A crippled challenger against the shipped model: the models directory, its state before, the outcome."""
    models = shipped_copy(tmp_path_factory.mktemp("rejected") / "models")
    pointer, names = snapshot(models)
    outcome = run(models, client, fleet, xid_classes, small_config(**CRIPPLED))
    return models, pointer, names, outcome


def test_a_worse_challenger_keeps_the_current_model(
    rejected: tuple[Path, bytes, list[str], retrain.RetrainOutcome],
) -> None:
    models, pointer, names, outcome = rejected
    assert outcome.status is retrain.Status.KEPT, outcome.reason
    assert "does not beat" in outcome.reason
    assert (models / registry.POINTER_FILE).read_bytes() == pointer
    assert outcome.current == json.loads(pointer)["current"]
    # The rejected challenger is kept for inspection, not activated, and its card says why.
    assert outcome.challenger is not None
    assert sorted(p.name for p in models.iterdir()) == sorted([*names, outcome.challenger])
    card = registry.load(models / outcome.challenger).card
    record = card.metrics["promotion"]
    assert record == outcome.promotion
    assert record["promoted"] is False
    assert record["current"]["version"] == outcome.current
    assert record["challenger"]["pr_auc"] < record["current"]["pr_auc"]
    # Labels came from both sources, and the card says where the data came from (without credentials).
    assert outcome.failures["xid"] > 0
    assert outcome.failures["merged"] >= outcome.failures["xid"]
    assert card.training["sources"] == ["prometheus:http://prom:9090"]
    assert not any("secret" in line for line in card.training["provenance"])


def test_a_better_challenger_is_promoted_and_its_card_shows_both(
    tmp_path: Path,
    rejected: tuple[Path, bytes, list[str], retrain.RetrainOutcome],
    client: FrameClient,
    fleet: tuple[pd.DataFrame, pd.DataFrame, datetime],
    xid_classes: dict[int, str],
) -> None:
    # The crippled model rejected above is current now (as if an operator had installed it).
    weak_dir, _, _, before = rejected
    assert before.challenger is not None
    models = tmp_path / "models"
    shutil.copytree(weak_dir / before.challenger, models / before.challenger)
    registry.activate(models, before.challenger)

    outcome = run(models, client, fleet, xid_classes, small_config())

    assert outcome.status is retrain.Status.PROMOTED, outcome.reason
    assert outcome.challenger is not None
    assert registry.read_pointer(models) == {"current": outcome.challenger, "previous": before.challenger}
    assert registry.load_current(models).card.version == outcome.challenger
    assert registry.load(models / before.challenger).card.version == before.challenger  # kept for rollback
    record = registry.load_current(models).card.metrics["promotion"]
    assert record["promoted"] is True
    assert record["metric"] == "pr_auc"
    assert record["current"]["version"] == before.challenger
    assert record["challenger"]["version"] == outcome.challenger
    assert record["challenger"]["pr_auc"] > record["current"]["pr_auc"]
    assert record["challenger"]["false_alarms"] <= record["current"]["false_alarms"]
    assert record["holdout"]["positives"] > 0
    assert registry.rollback(models) == before.challenger


def test_prometheus_down_skips_loudly_and_changes_nothing(
    tmp_path: Path,
    fleet: tuple[pd.DataFrame, pd.DataFrame, datetime],
    xid_classes: dict[int, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    models = shipped_copy(tmp_path / "models")
    before = snapshot(models)
    with caplog.at_level(logging.WARNING, logger="app.predict.retrain"):
        outcome = run(models, DownClient(), fleet, xid_classes, small_config())
    assert outcome.status is retrain.Status.PROMETHEUS_UNAVAILABLE
    assert outcome.skipped
    assert "Connection refused" in outcome.reason
    assert any("retraining skipped" in r.getMessage() for r in caplog.records)
    assert snapshot(models) == before
    assert outcome.current == registry.read_pointer(models)["current"]


def test_too_little_data_skips_and_changes_nothing(
    tmp_path: Path,
    client: FrameClient,
    fleet: tuple[pd.DataFrame, pd.DataFrame, datetime],
    xid_classes: dict[int, str],
) -> None:
    models = shipped_copy(tmp_path / "models")
    before = snapshot(models)
    few = run(
        models, client, fleet, xid_classes, small_config(), window_s=6 * HOUR, failures_from_journal=None
    )
    assert few.status is retrain.Status.TOO_LITTLE_DATA
    assert "hardware failures in the window" in few.reason
    # Enough failures, but 36 h minus 12 h of warm-up and two 12 h embargoes leave no part to train on.
    thin = run(models, client, fleet, xid_classes, small_config(), window_s=36 * HOUR, min_failures=1)
    assert thin.status is retrain.Status.TOO_LITTLE_DATA
    assert "positive" in thin.reason
    assert snapshot(models) == before


def test_old_versions_are_pruned_but_never_current_or_previous(
    tmp_path: Path, make_model: ModelFactory
) -> None:
    model = make_model()
    for day, version in enumerate(["a", "b", "c", "d", "e", "f"], start=1):
        created = datetime(2025, 3, day, tzinfo=UTC).isoformat()
        registry.save(tmp_path, with_card(model, version=version, created_at=created))
    (tmp_path / "notes").mkdir()  # not a model: left alone
    registry.activate(tmp_path, "a")
    registry.activate(tmp_path, "b")  # current b, previous a
    assert registry.prune(tmp_path, keep=2) == ["d", "c"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CURRENT.json", "a", "b", "e", "f", "notes"]


def test_journal_failures_reads_hardware_faults_on_gpus(tmp_path: Path) -> None:
    path = tmp_path / "sickbay.db"
    with sqlite3.connect(path) as db:
        db.executescript(journal.SCHEMA)
        rows = [
            ("2025-03-05T10:00:00+00:00", "n1", 3, 79, "reboot-node", "firing"),
            ("2025-03-05T10:20:00+00:00", "n1", 3, 79, "reboot-node", "firing"),  # the same failure again
            ("2025-03-06T10:00:00+00:00", "n2", 0, 48, "reset-gpu", "firing"),
            ("2025-03-06T11:00:00+00:00", "n2", 0, 48, "reset-gpu", "resolved"),
            ("2025-03-06T12:00:00+00:00", "n3", 1, None, "at-risk", "firing"),  # our own prediction
            ("2025-03-06T13:00:00+00:00", "n4", None, None, "reboot-node", "firing"),  # no GPU: no slot
            ("2025-03-06T14:00:00+00:00", "n5", 2, 13, "restart-workload", "firing"),
            ("2025-02-01T10:00:00+00:00", "n6", 0, 79, "reboot-node", "firing"),  # before the window
        ]
        db.executemany(
            "INSERT INTO faults (at, node, gpu, xid, class, rule, status, source, fingerprint, reason, signal, "
            "plan) VALUES (?, ?, ?, ?, ?, 'r', ?, 'alertmanager', 'f', '', '{}', '{}')",
            rows,
        )
    failures = retrain.journal_failures(path, since=datetime(2025, 3, 1, tzinfo=UTC))
    assert list(zip(failures["node"], failures["gpu"], failures["fault_class"], strict=True)) == [
        ("n1", 3, "reboot-node"),
        ("n2", 0, "reset-gpu"),
    ]
    assert failures["mode"].tolist() == ["xid-79", "xid-48"]
    with pytest.raises(retrain.JournalUnreadable):
        retrain.journal_failures(tmp_path / "none.db", since=datetime(2025, 3, 1, tzinfo=UTC))


# -- the weekly job -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "after", "expected"),
    [
        (
            "0 3 * * 0",
            datetime(2026, 11, 25, 12, tzinfo=UTC),
            datetime(2026, 11, 29, 3, tzinfo=UTC),
        ),  # Sunday
        ("0 3 * * 7", datetime(2026, 11, 25, 12, tzinfo=UTC), datetime(2026, 11, 29, 3, tzinfo=UTC)),
        ("30 1 * * 1-5", datetime(2026, 11, 28, 12, tzinfo=UTC), datetime(2026, 11, 30, 1, 30, tzinfo=UTC)),
        ("0 0 * * */3", datetime(2026, 11, 29, 12, tzinfo=UTC), datetime(2026, 12, 2, 0, tzinfo=UTC)),  # Wed
        ("0 6 * * sat", datetime(2026, 11, 25, 12, tzinfo=UTC), datetime(2026, 11, 28, 6, tzinfo=UTC)),
    ],
)
def test_the_cron_expression_means_what_it_means_in_a_crontab(
    cron: str, after: datetime, expected: datetime
) -> None:
    assert retraining_job.cron_trigger(cron).get_next_fire_time(None, after) == expected


def job(tmp_path: Path, **kwargs: Any) -> retraining_job.Retraining:
    settings = PredictionSettings(
        models_dir=shipped_copy(tmp_path / "models"),
        prometheus_url="http://prom:9090",
        retrain_cron="0 3 * * 0",
        retrain_window_s=6 * DAY,
    )
    options: dict[str, Any] = {
        "catalog": rules.load_catalog(RULES_DIR / "xid-catalog.yaml"),
        "journal_path": None,
        "registry": CollectorRegistry(),
        "clock": lambda: datetime(2025, 3, 9, tzinfo=UTC),
        **kwargs,
    }
    return retraining_job.Retraining(settings, **options)


def counted(job_: retraining_job.Retraining, outcome: str) -> float:
    return float(job_.metrics.runs.labels(outcome=outcome)._value.get())


async def test_the_weekly_job_is_scheduled_and_runs_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    reloaded: list[str] = []

    def fake_retrain(**kwargs: Any) -> retrain.RetrainOutcome:
        seen.update(kwargs, thread=threading.get_ident())
        now = kwargs["now"]
        return retrain.RetrainOutcome(
            status=retrain.Status.PROMOTED,
            reason="better",
            at=now,
            window_start=now - timedelta(seconds=kwargs["window_s"]),
            window_end=now,
            current="new",
            previous="old",
            challenger="new",
        )

    monkeypatch.setattr(retrain, "retrain", fake_retrain)
    weekly = job(tmp_path, on_promoted=lambda: reloaded.append(threading.current_thread().name))
    await weekly.start()
    try:
        next_run = weekly.next_run()
        assert next_run is not None
        assert (next_run.weekday(), next_run.hour, next_run.minute) == (6, 3, 0)  # Sunday 03:00 UTC
        outcome = await weekly.run_once()  # what the scheduler calls
    finally:
        await weekly.stop()
    assert outcome is not None
    assert outcome.promoted
    assert seen["thread"] != threading.get_ident()  # trained in a worker thread, not on the event loop
    assert seen["window_s"] == 6 * DAY
    assert seen["now"] == datetime(2025, 3, 9, tzinfo=UTC)
    assert seen["config"] is None  # labels like the current model does
    assert seen["threads"] == 2
    assert reloaded  # scoring reloads the model, off the event loop too
    assert reloaded[0] != threading.main_thread().name
    assert counted(weekly, "promoted") == 1
    assert weekly.metrics.last_promoted._value.get() == datetime(2025, 3, 9, tzinfo=UTC).timestamp()


async def test_the_job_survives_prometheus_down_and_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reloaded: list[int] = []
    down = job(tmp_path / "down", reader=reader_for(DownClient()), on_promoted=lambda: reloaded.append(1))
    outcome = await down.run_once()
    assert outcome is not None
    assert outcome.status is retrain.Status.PROMETHEUS_UNAVAILABLE
    assert counted(down, "prometheus-unavailable") == 1
    assert not reloaded

    def broken(**kwargs: Any) -> retrain.RetrainOutcome:
        raise RuntimeError("boom")

    monkeypatch.setattr(retrain, "retrain", broken)
    assert await down.run_once() is None
    assert counted(down, "failed") == 1

    follower = job(tmp_path / "follower", is_leader=lambda: False)
    assert await follower.run_once() is None
    assert sum(counted(follower, o) for o in retraining_job.OUTCOMES) == 0


async def test_the_service_schedules_retraining_when_prometheus_is_set(
    tmp_path: Path, aiohttp_client: Any
) -> None:
    settings = load_settings(
        auth={"mode": "none"},
        inbox={"path": tmp_path / "inbox.db"},
        prediction={
            "enabled": True,
            "models_dir": shipped_copy(tmp_path / "models"),
            "prometheus_url": closed_port_url(),
        },
    )
    client = await aiohttp_client(build_app(settings))
    await client.app[SERVICES].prediction_started()
    weekly = client.app[SERVICES].retraining
    assert weekly is not None
    next_run = weekly.next_run()
    assert next_run is not None
    assert (next_run.weekday(), next_run.hour, next_run.minute) == (6, 3, 0)
    text = await (await client.get("/metrics")).text()
    assert 'sickbay_retrain_runs_total{outcome="promoted"} 0.0' in text


# -- the command line -----------------------------------------------------------------------------------


def test_train_from_prometheus_exits_4_when_prometheus_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = shipped_copy(tmp_path / "models")
    before = snapshot(models)
    url = closed_port_url()
    code = cli.main(["train", "--from-prometheus", url, "--out", str(models), "--days", "1", "--quiet"])
    assert code == 4
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["status"] == "prometheus-unavailable"
    assert snapshot(models) == before


def test_train_takes_a_dataset_or_prometheus_not_both(
    train_dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(
            ["train", "--dataset", str(train_dataset), "--from-prometheus", "http://prom:9090", "--out", "m"]
        )
    assert exited.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def closed_port_url() -> str:
    """A loopback URL nothing listens on (a port bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_settings_defaults() -> None:
    settings = PredictionSettings()
    assert (settings.retrain_enabled, settings.retrain_cron, settings.retrain_window_s) == (
        True,
        "0 3 * * 0",
        28 * DAY,
    )
    with pytest.raises(ValueError, match="crontab"):
        PredictionSettings(retrain_cron="weekly")
