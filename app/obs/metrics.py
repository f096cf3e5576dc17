"""Sickbay's own Prometheus metrics, on a registry passed in (never the global one), so tests get fresh ones."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class Metrics:
    registry: CollectorRegistry
    received: Counter
    duplicates: Counter
    rejected: Counter
    requests_rejected: Counter
    unattributed: Counter
    inbox_depth: Gauge
    request_seconds: Histogram
    commit_requests: Histogram
    faults: Counter
    unknown_xids: Counter
    pipeline_errors: Counter
    dead_lettered: Counter
    job_failures: Counter
    processing_seconds: Histogram
    actions: Counter
    breaker_open: Gauge
    nodes_by_state: Gauge
    drain_seconds: Histogram
    evictions_blocked: Counter
    drains_failed: Counter
    kube_errors: Counter
    leader: Gauge
    gpu_risk: Gauge
    node_risk: Gauge
    model_info: Gauge
    model_precision: Gauge
    model_recall: Gauge
    proactive_nodes: Gauge
    proactive_refusals: Counter
    shadow: Gauge
    shadow_trips: Counter
    audit_findings: Gauge
    audit_last_run: Gauge
    watch_view_events: Counter
    watch_view_relists: Counter
    watch_view_stale: Gauge
    watch_view_fallbacks: Counter
    retention_pruned: Counter
    db_size: Gauge


def create_metrics(registry: CollectorRegistry | None = None) -> Metrics:
    registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
    return Metrics(
        registry=registry,
        received=Counter(
            "sickbay_alerts_received",
            "Alerts and events accepted into the inbox",
            ["source"],
            registry=registry,
        ),
        duplicates=Counter(
            "sickbay_alerts_duplicate",
            "Alerts and events already in the inbox (same fingerprint, startsAt and status)",
            ["source"],
            registry=registry,
        ),
        rejected=Counter(
            "sickbay_alerts_rejected",
            "Alerts and agent events refused one by one and kept in the dead-letter list, by reason",
            ["source", "reason"],
            registry=registry,
        ),
        requests_rejected=Counter(
            "sickbay_requests_rejected",
            "Webhook and agent requests refused as a whole (4xx, or 503 to be retried), by reason",
            ["source", "reason"],
            registry=registry,
        ),
        unattributed=Counter(
            "sickbay_alerts_unattributed",
            "Alerts stored that name no node (no node label set): they reach no node",
            registry=registry,
        ),
        inbox_depth=Gauge("sickbay_inbox_depth", "Inbox rows not yet processed", registry=registry),
        request_seconds=Histogram(
            "sickbay_http_request_duration_seconds",
            "HTTP request latency",
            ["route", "method", "code"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        ),
        commit_requests=Histogram(
            "sickbay_inbox_commit_requests",
            "Requests carried by one inbox transaction (group commit)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=registry,
        ),
        faults=Counter(
            "sickbay_faults",
            "Signals classified, by fault class and status",
            ["fault_class", "status"],
            registry=registry,
        ),
        unknown_xids=Counter(
            "sickbay_unknown_xids",
            "Firing faults whose XID the XID catalog does not list (classified by classification.unknown_xid)",
            ["xid"],
            registry=registry,
        ),
        pipeline_errors=Counter(
            "sickbay_pipeline_errors", "Inbox rows the pipeline failed to process", registry=registry
        ),
        dead_lettered=Counter(
            "sickbay_inbox_dead_lettered",
            "Inbox rows the pipeline gave up on and moved to the dead-letter list, by source and reason "
            "(unprocessable: it no longer validates; retries_exhausted: it failed every retry)",
            ["source", "reason"],
            registry=registry,
        ),
        job_failures=Counter(
            "sickbay_job_failures",
            "Runs of a scheduled background job that failed (it runs again at its next time)",
            ["job"],
            registry=registry,
        ),
        processing_seconds=Histogram(
            "sickbay_pipeline_processing_seconds",
            "Time from receipt to journaled plan",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        ),
        actions=Counter(
            "sickbay_actions",
            "Actions carried out, by kind and outcome",
            ["kind", "outcome"],
            registry=registry,
        ),
        breaker_open=Gauge(
            "sickbay_breaker_open",
            "1 while the blast-radius breaker refuses new quarantines",
            registry=registry,
        ),
        nodes_by_state=Gauge(
            "sickbay_nodes", "Nodes Sickbay is acting on, by remediation state", ["state"], registry=registry
        ),
        drain_seconds=Histogram(
            "sickbay_drain_duration_seconds",
            "Time to drain a quarantined node's GPU pods, until the evicted ones are gone",
            buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800),
            registry=registry,
        ),
        evictions_blocked=Counter(
            "sickbay_evictions_blocked",
            "Evictions still refused by a PodDisruptionBudget at the drain deadline",
            registry=registry,
        ),
        drains_failed=Counter(
            "sickbay_drains_failed",
            "Drains that left pods on the node, so it stayed drain-failed and was not handed off, by why "
            "(eviction-failed, blocked, terminating, unlisted; a drain with two reasons counts under both)",
            ["reason"],
            registry=registry,
        ),
        kube_errors=Counter(
            "sickbay_kube_errors",
            "Kubernetes API calls that failed after retries",
            ["kind"],
            registry=registry,
        ),
        leader=Gauge("sickbay_leader", "1 while this replica is the leader", registry=registry),
        gpu_risk=Gauge(
            "sickbay_gpu_risk",
            "Calibrated probability of a hardware fault within the horizon",
            ["node", "gpu"],
            registry=registry,
        ),
        node_risk=Gauge(
            "sickbay_node_risk", "The node's risk: its riskiest GPU", ["node"], registry=registry
        ),
        model_info=Gauge("sickbay_model_info", "1 for the risk model in use", ["version"], registry=registry),
        model_precision=Gauge(
            "sickbay_model_precision", "Holdout precision from the model card", registry=registry
        ),
        model_recall=Gauge("sickbay_model_recall", "Holdout recall from the model card", registry=registry),
        proactive_nodes=Gauge(
            "sickbay_proactive_nodes",
            "GPU nodes carrying the sickbay.io/at-risk taint, by level (warn: PreferNoSchedule, act: NoSchedule)",
            ["level"],
            registry=registry,
        ),
        proactive_refusals=Counter(
            "sickbay_proactive_budget_refusals",
            "Escalations to at-risk act held at warn because the proactive budget was full",
            registry=registry,
        ),
        shadow=Gauge(
            "sickbay_predict_shadow",
            "1 (for its reason) while the proactive ladder runs in shadow for the current model: it scores "
            "and records, it taints nothing; all 0 while it acts",
            ["reason"],
            registry=registry,
        ),
        shadow_trips=Counter(
            "sickbay_predict_shadow_trips",
            "Times the runtime guard sent an acting proactive ladder back to shadow, by reason",
            ["reason"],
            registry=registry,
        ),
        # Labelled by kind of finding only (app.audit.checks.Kind, a fixed set), never by object.
        audit_findings=Gauge(
            "sickbay_audit_findings",
            "Findings of the last scheduled audit of GPU-node hygiene (`sickbay audit`), by kind",
            ["kind"],
            registry=registry,
        ),
        audit_last_run=Gauge(
            "sickbay_audit_last_run_timestamp_seconds",
            "When the last scheduled audit read the cluster successfully (Unix time)",
            registry=registry,
        ),
        watch_view_events=Counter(
            "sickbay_watch_view_events",
            "Watch events applied to the cluster view (kube.watch), by resource and type (BOOKMARK included)",
            ["resource", "type"],
            registry=registry,
        ),
        watch_view_relists=Counter(
            "sickbay_watch_view_relists",
            "Lists the cluster view made again after its first, by resource and why (expired: the watch's "
            "resourceVersion fell out of the API server's history, 410 Gone)",
            ["resource", "reason"],
            registry=registry,
        ),
        watch_view_stale=Gauge(
            "sickbay_watch_view_stale",
            "1 while the cluster view of a resource may miss changes (not listed yet, or its watch is down and "
            "retried); reconciliation and the status page then list instead",
            ["resource"],
            registry=registry,
        ),
        watch_view_fallbacks=Counter(
            "sickbay_watch_view_fallbacks",
            "Reads that listed from the API server because the cluster view could not answer, by reader "
            "(reconcile, audit, reads, planning) and reason (not-synced: its first lists and watches had not "
            "come, within kube.view_sync_wait_s for reconcile and audit; stale: a watch is down)",
            ["reader", "reason"],
            registry=registry,
        ),
        retention_pruned=Counter(
            "sickbay_retention_pruned_rows",
            "Rows the retention job deleted, by table",
            ["table"],
            registry=registry,
        ),
        db_size=Gauge(
            "sickbay_db_size_bytes",
            "The SQLite file's size as SQLite counts it (pages), after the last retention pass",
            registry=registry,
        ),
    )
