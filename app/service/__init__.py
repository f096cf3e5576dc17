"""The running service: everything `sickbay serve` wires around the loop.

The HTTP application and its start-up (`runtime`), the inbox consumer (`pipeline`) and the one function
from signal to Plan it shares with `sickbay explain` (`planning`, `explain`), the scheduler and its jobs
(`schedule`, `rechecks`, `alertsync`, `scoring_job`, `validation`, `retraining_job`), the status page
(`status`) and the JSON API (`api`). Nothing below this package imports it: the loop itself —
ingest → classify → decide → act, over kube/store/config/obs, with predict and agent beside — lives in
the packages at the top of `app`.
"""
