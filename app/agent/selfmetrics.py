"""The agent's own health metrics (`sickbay_agent_*`), on a registry of its own, never the global one.

These describe the agent (events seen, delivered, rejected, dropped from a full spool, push outcomes), not
the GPUs; GPU series are dcgm-exporter's and come from `exposition`. Creating them has no side effects.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge


@dataclass(frozen=True, slots=True)
class AgentMetrics:
    registry: CollectorRegistry
    events: Counter
    delivered: Counter
    rejected: Counter
    push_attempts: Counter
    spool_dropped: Counter
    spool_events: Gauge
    spool_bytes: Gauge
    gpus_lost: Gauge
    polls: Counter


def create_metrics() -> AgentMetrics:
    registry = CollectorRegistry(auto_describe=True)
    return AgentMetrics(
        registry=registry,
        events=Counter("sickbay_agent_events", "GPU events recorded, by kind.", ["kind"], registry=registry),
        delivered=Counter(
            "sickbay_agent_events_delivered", "Events the service accepted (2xx).", registry=registry
        ),
        rejected=Counter(
            "sickbay_agent_events_rejected",
            "Events the service refused (a 4xx other than 429, or one by one in a 2xx); not retried.",
            registry=registry,
        ),
        push_attempts=Counter(
            "sickbay_agent_push_attempts",
            "Push requests by outcome: delivered, retry, rejected.",
            ["outcome"],
            registry=registry,
        ),
        spool_dropped=Counter(
            "sickbay_agent_spool_dropped",
            "Oldest undelivered events dropped because the spool was full.",
            registry=registry,
        ),
        spool_events=Gauge("sickbay_agent_spool_events", "Events waiting in the spool.", registry=registry),
        spool_bytes=Gauge(
            "sickbay_agent_spool_bytes", "Bytes of events waiting in the spool.", registry=registry
        ),
        gpus_lost=Gauge("sickbay_agent_gpus_lost", "GPUs NVML reports as lost.", registry=registry),
        polls=Counter("sickbay_agent_polls", "Completed counter polls.", registry=registry),
    )
