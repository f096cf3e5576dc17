"""batch/v1 Job calls: create one from its manifest, read one back as a `JobState`.

The verification step (`app.decide.verification`) is all that runs Jobs; it needs no list and no delete:
it reads the one Job a node's annotation names, and Kubernetes deletes finished Jobs itself
(`ttlSecondsAfterFinished`). How a Job ended is its terminal condition, `Complete` or `Failed` with a
reason (`DeadlineExceeded`, `BackoffLimitExceeded`), as the Job API documents it
(kubernetes.io/docs/concepts/workloads/controllers/job/#job-termination-and-cleanup).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.domain import JobState
from app.kube import convert, errors, names
from app.kube.responses import JsonObj
from app.kube.transport import Transport

JOBS_PATH = "/apis/batch/v1/namespaces/{namespace}/jobs"
JOB_PATH = JOBS_PATH + "/{name}"
NODE_LABEL = "sickbay.io/node"


class JobCalls:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport

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

    async def get_job(self, namespace: str, name: str) -> JobState | None:
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
        return job_state(body)


def job_state(job: JsonObj | Mapping[str, Any]) -> JobState:
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    succeeded: bool | None = None
    reason = message = ""
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True" or condition.get("type") not in ("Complete", "Failed"):
            continue
        succeeded = condition.get("type") == "Complete"
        reason, message = str(condition.get("reason") or ""), str(condition.get("message") or "")
    return JobState(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        node=str((meta.get("labels") or {}).get(NODE_LABEL) or ""),
        succeeded=succeeded,
        reason=reason,
        message=message,
        start_time=convert.parse_time(status.get("startTime")),
    )
