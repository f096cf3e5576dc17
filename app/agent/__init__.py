"""The node-local NVML collector: DCGM-compatible metrics and XID events pushed to the service.

Deployed as its own DaemonSet, so it imports no other `app` package except `app.config.errors`.
`app.agent.commands` declares `sickbay agent`'s flags; `app.agent.main` runs it (`run(args)`,
`run_agent(settings)`). The modules the standalone real-GPU check uses (`model`, `nvml`, `devices`,
`readings`, `events`, `exposition`, `xid`) import only the standard library, and this package's
`__init__` must stay free of imports for that reason.
"""
