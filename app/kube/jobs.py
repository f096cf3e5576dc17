"""batch/v1 Job calls and their translation: the audit lists Jobs (their pod failure policy); the
verification step creates one from its manifest and reads it back as a `JobRun`.

Works on plain JSON, as `app.kube.convert` does, so a field a newer server adds is simply ignored. The
verification step (`app.decide.verification`) needs no list and no delete: it reads the one Job a node's
annotation names, and Kubernetes deletes finished Jobs itself (`ttlSecondsAfterFinished`). How a Job ended
is its terminal condition, `Complete` or `Failed` with a reason (`DeadlineExceeded`,
`BackoffLimitExceeded`), as the Job API documents it
(kubernetes.io/docs/concepts/workloads/controllers/job/#job-termination-and-cleanup).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

import aiohttp

from app.domain import FailureRule, JobRun, JobState
from app.kube import convert, errors, names
from app.kube.responses import JsonObj
from app.kube.transport import Transport

JOBS_PATH = "/apis/batch/v1/namespaces/{namespace}/jobs"
JOB_PATH = JOBS_PATH + "/{name}"
NODE_LABEL = "sickbay.io/node"


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

    async def create_job(self, manifest: Mapping[str, object]) -> None:
        """Create the Job; ConflictError when one of that name exists already (a create retried)."""
        meta = manifest.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        names.check_pod(namespace, name)
        await self._transport.call(
            "POST",
            JOBS_PATH,
            what=f"CREATE job {namespace}/{name}",
            body=dict(manifest),
            path_params={"namespace": namespace},
        )

    async def get_job(self, namespace: str, name: str) -> JobRun | None:
        """The Job as it stands; None when there is none of that name."""
        names.check_pod(namespace, name)
        try:
            body = await self._transport.call(
                "GET",
                JOB_PATH,
                what=f"GET job {namespace}/{name}",
                path_params={"namespace": namespace, "name": name},
            )
        except errors.NotFoundError:
            return None
        return job_run(body)


def job_state(job: Mapping[str, Any], *, gpu_resources: Sequence[str] = (convert.GPU_RESOURCE,)) -> JobState:
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    policy = spec.get("podFailurePolicy")
    rules = (policy or {}).get("rules") or () if isinstance(policy, Mapping) else ()
    backoff = spec.get("backoffLimit")
    return JobState(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        gpu_request=convert.pod_gpu_request(template, gpu_resources),
        backoff_limit=backoff if isinstance(backoff, int) and not isinstance(backoff, bool) else 6,
        failure_rules=tuple(failure_rule(r) for r in rules if isinstance(r, Mapping)),
        has_failure_policy=isinstance(policy, Mapping),
        active=int(status.get("active") or 0),
        done=_terminal(status) is not None,
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


def job_run(job: JsonObj | Mapping[str, Any]) -> JobRun:
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    ended = _terminal(status)
    succeeded = None if ended is None else ended.get("type") == "Complete"
    reason = str((ended or {}).get("reason") or "")
    message = str((ended or {}).get("message") or "")
    return JobRun(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        node=str((meta.get("labels") or {}).get(NODE_LABEL) or ""),
        succeeded=succeeded,
        reason=reason,
        message=message,
        start_time=convert.parse_time(status.get("startTime")),
    )


def _terminal(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Job's terminal condition (`Complete` or `Failed`, status True; the last when both), or None while
    it runs: what the audit's `done` and the verification's outcome both read."""
    ended = None
    for condition in status.get("conditions") or ():
        if (
            isinstance(condition, Mapping)
            and condition.get("status") == "True"
            and condition.get("type") in ("Complete", "Failed")
        ):
            ended = condition
    return ended
