"""Job calls: list batch/v1 Jobs (the audit reads their pod failure policy), and their translation.

Works on plain JSON, as `app.kube.convert` does, so a field a newer server adds is simply ignored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

import aiohttp

from app.domain import FailureRule, JobState
from app.kube import convert, names
from app.kube.transport import Transport


class JobCalls:
    def __init__(self, transport: Transport, *, gpu_resources: Sequence[str], page_size: int) -> None:
        self._transport = transport
        self._gpu_resources = tuple(gpu_resources)
        self._page_size = page_size

    async def list_jobs(self, *, namespace: str | None = None) -> list[JobState]:
        if namespace:
            names.check_namespace(namespace)
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs" if namespace else "/apis/batch/v1/jobs"
        t = self._transport

        def page(token: str | None) -> Awaitable[aiohttp.ClientResponse]:
            query: list[tuple[str, str | int]] = [("limit", self._page_size)]
            if token:
                query.append(("continue", token))
            return t.direct("GET", path, query=query)

        items = await t.list_all("LIST jobs" + (f" in {namespace}" if namespace else ""), page)
        return [job_state(item, gpu_resources=self._gpu_resources) for item in items]


def job_state(job: Mapping[str, Any], *, gpu_resources: Sequence[str] = (convert.GPU_RESOURCE,)) -> JobState:
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    policy = spec.get("podFailurePolicy")
    rules = (policy or {}).get("rules") or () if isinstance(policy, Mapping) else ()
    backoff = spec.get("backoffLimit")
    done = any(
        isinstance(c, Mapping) and c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return JobState(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        gpu_request=convert.pod_gpu_request(template, gpu_resources),
        backoff_limit=backoff if isinstance(backoff, int) and not isinstance(backoff, bool) else 6,
        failure_rules=tuple(failure_rule(r) for r in rules if isinstance(r, Mapping)),
        has_failure_policy=isinstance(policy, Mapping),
        active=int(status.get("active") or 0),
        done=done,
    )


def failure_rule(raw: Mapping[str, Any]) -> FailureRule:
    codes = raw.get("onExitCodes") or {}
    return FailureRule(
        action=str(raw.get("action") or ""),
        conditions=tuple(
            str(c.get("type") or "") for c in raw.get("onPodConditions") or () if isinstance(c, Mapping)
        ),
        exit_operator=str(codes.get("operator") or "") if isinstance(codes, Mapping) else "",
        exit_codes=tuple(
            int(v) for v in (codes.get("values") or ()) if isinstance(v, int) and not isinstance(v, bool)
        )
        if isinstance(codes, Mapping)
        else (),
    )
