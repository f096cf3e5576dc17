"""`sickbay audit`: the Kubernetes guidance on GPU failures as a check of one cluster's hygiene.

`checks` (pure: findings over a `Snapshot`), `fields` (which dcgm-exporter counters the rule bundle and
the model need), `snapshot` (reads the cluster through the kube port's `AuditPort`, and Prometheus),
`report` (table, JSON, exit code), `commands` (the CLI's arguments) and `cli` (runs them).
"""
