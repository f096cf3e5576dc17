"""Scene 0, the prediction: the model is promoted, flags a GPU hours before it fails, and the proactive
ladder acts; later the predicted failure is brought forward. What Sickbay decided and did is read back
into the `Forecast` the report shows (journal, metrics, the cluster's Events).
"""

from __future__ import annotations

from app.demo import prediction
from app.demo.configs import REPO
from app.demo.stack import Stack
from app.demo.timeline import Recorder, Scene, parse_time

# From the model's promotion to the at-risk taint: the next scoring cycle, then its first read of the
# whole look-back (a few seconds on two cores), then the ladder.
PREDICTION_WITHIN_S = 60.0
CHECKPOINT_REASON = "SickbayCheckpointRequested"
VALIDATION_NOTE = "the demo fleet is the simulator the model was trained on (validated by the demo)"


async def play_prediction(stack: Stack, rec: Recorder, scene: Scene, forecast: prediction.Forecast) -> None:
    """Scene 0: promote the model, wait for the at-risk taint, read what Sickbay decided and did."""
    risk, sim = forecast.precursor, stack.fleet
    rec.begin(
        scene,
        f"trained model promoted into Sickbay; GPU {risk.gpu}'s memory has run "
        f"{risk.mem_rise_at(sim.time_s):.1f} °C over its own baseline for "
        f"{prediction.hours(risk.running_s(sim.time_s))}, rising, throttled now and then, no rule taking it out",
    )
    # Sickbay's ladder runs in shadow for a model not validated on this fleet. The demo's fleet is the
    # simulator the model was trained on, so the demo validates it first, the operator's way, and says so.
    version = prediction.current_version(REPO / "models")
    await stack.validate_model(version, VALIDATION_NOTE)
    rec.note(
        risk.node,
        f"model {version} validated on this fleet by the operator path (sickbay model validate --force): "
        "without it the proactive ladder would run in shadow, journal what it would do and taint nothing",
    )
    forecast.model = stack.promote_model()
    forecast.promoted_at = scene.signal
    await rec.wait([scene], within_s=PREDICTION_WITHIN_S)
    await rec.settle()  # the plan's outcomes (the checkpoint requests) land right after the taint
    await read_forecast(stack, rec, scene, forecast)


async def read_forecast(stack: Stack, rec: Recorder, scene: Scene, forecast: prediction.Forecast) -> None:
    """What Sickbay decided and did, from its journal, its metrics and the cluster."""
    risk = forecast.precursor
    journal = await stack.actions()
    item = next((i for i in journal.get("items", []) if i.get("id") == scene.fault_id), None)
    taint = next(
        (a for a in ((item or {}).get("plan") or {}).get("actions", []) if a.get("kind") == "taint-at-risk"),
        None,
    )
    if taint is not None:
        forecast.reason = str(taint.get("reason", ""))
        forecast.score, forecast.drivers = prediction.parse_reason(forecast.reason)
        params = taint.get("params") or {}
        forecast.level = str(params.get("level", "")) if isinstance(params, dict) else ""
    outcomes = [o for o in journal.get("outcomes", []) if o.get("fault_id") == scene.fault_id]
    forecast.evictions = sum(1 for o in outcomes if o.get("kind") in ("evict-pod", "drain"))
    forecast.scored_at, forecast.decided_at = scene.alert, scene.decision
    forecast.taint_at, forecast.taint = scene.effect, scene.effect_text
    if scene.alert is not None:  # the fleet runs on the wall clock since its past: sim time then
        then = stack.fleet.time_s - (rec.now() - scene.alert)
        forecast.running_at_score_s = risk.running_s(then)
        forecast.due_at_score_s = risk.due_in_s(then)
    scores = prediction.parse_gpu_risks(await stack.sickbay_metrics())
    forecast.gpus_scored = len(scores)
    others = [v for key, v in scores.items() if key != (risk.node, risk.gpu)]
    forecast.others_max = max(others, default=None)
    asked = [parse_time(o.get("at")) for o in outcomes if o.get("kind") == "request-checkpoint"]
    times = [rec.rel(t) for t in asked if t is not None]
    forecast.checkpoints_at = min(times, default=None)
    for event in stack.events(reason=CHECKPOINT_REASON):  # the Events as the cluster has them
        involved = event.get("involvedObject") or {}
        forecast.events.append(
            (
                str(involved.get("kind")),
                f"{involved.get('namespace')}/{involved.get('name')}",
                str(event.get("type", "")),
            )
        )
    pods = sum(1 for e in forecast.events if e[0] == "Pod")
    rec.note(
        risk.node,
        f"{CHECKPOINT_REASON} Events on {pods} pod(s) and {len(forecast.events) - pods} owner(s); "
        f"{forecast.evictions} evictions (prediction.drain is off)",
    )


async def fail_predicted(stack: Stack, rec: Recorder, scene: Scene, forecast: prediction.Forecast) -> None:
    """Scene 0, later: the predicted failure happens now; wait for the quarantine."""
    risk = forecast.precursor
    pods = await stack.cluster.list_pods(node=risk.node)
    forecast.pods_kept = tuple(
        f"{p.namespace}/{p.name}" for p in pods if p.gpu_request > 0 and p.phase == "Running"
    )
    due = risk.due_in_s(stack.fleet.time_s)
    rec.begin(
        scene,
        f"XID {prediction.THERMAL_XID}, GPU {risk.gpu} fell off the bus: the failure the model "
        f"predicted, brought forward {prediction.hours(due)}",
    )
    stack.fleet.fail_early(risk.node, risk.gpu)
    forecast.failed_at, forecast.brought_forward_s = scene.signal, due
    await rec.wait([scene], within_s=20)
    await rec.settle()  # the journal's item for it, if the cluster showed the effect first
    forecast.quarantined_at = scene.effect
    closed = forecast.closed_s
    if closed is not None:
        rec.note(
            risk.node,
            f"when GPU {risk.gpu} failed, the node had taken no new work for {closed:.0f}s (since the "
            f"model flagged it, {prediction.hours(forecast.due_at_score_s or 0.0)} before the failure "
            "was due)",
        )
