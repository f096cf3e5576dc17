"""Node calls: read, list, one guarded merge patch for a quarantine, and one status condition.

A patch that rewrites the taint list keeps the `timeAdded` of the taints it leaves in place: the raw
taints of recently read nodes are remembered by (name, resourceVersion), and the patch is built from them
(`convert.node_merge_patch`). Reads return domain values (`convert.node_state`), never API objects.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime

from app.domain import Condition, NodePatch, NodeState
from app.kube import conflicts, convert, names
from app.kube.responses import JsonObj
from app.kube.transport import COMPONENT, MERGE_PATCH, STRATEGIC_MERGE_PATCH, Transport

_CONDITION_WRITE_TRIES = 3
_TAINT_MEMORY = 1024


class NodeCalls:
    def __init__(
        self,
        transport: Transport,
        *,
        gpu_resources: Sequence[str],
        page_size: int,
        now: Callable[[], datetime],
    ) -> None:
        self._transport = transport
        self._gpu_resources = tuple(gpu_resources)
        self._page_size = page_size
        self._now = now
        # Raw taints of recently read nodes by (name, resourceVersion), so a patch that rewrites the taint
        # list keeps the `timeAdded` of taints it leaves in place.
        self._taints: OrderedDict[tuple[str, str], list[JsonObj]] = OrderedDict()

    async def get_node(self, name: str) -> NodeState:
        return self._node_state(await self._get_node_json(name))

    async def list_nodes(self, *, label_selector: str | None = None) -> list[NodeState]:
        t = self._transport
        items = await t.list_all(
            "LIST nodes",
            lambda token: t.core.list_node_without_preload_content(
                label_selector=label_selector,
                limit=self._page_size,
                _continue=token,
                _request_timeout=t.timeout,
            ),
        )
        return [self._node_state(item) for item in items]

    async def patch_node(self, patch: NodePatch) -> NodeState:
        """One merge patch with labels, annotations, taints and cordon, guarded by the read resourceVersion."""
        names.check_node(patch.node)
        if patch.empty:
            return await self.get_node(patch.node)
        body = convert.node_merge_patch(
            patch, previous_taints=self._taints.get((patch.node, patch.resource_version), ())
        )
        t = self._transport
        updated = await t.send(
            f"PATCH node {patch.node}",
            lambda: t.direct(
                "PATCH",
                "/api/v1/nodes/{name}",
                path_params={"name": patch.node},
                query=(("fieldManager", COMPONENT),),
                body=body,
                content_type=MERGE_PATCH,
            ),
        )
        return self._node_state(updated)

    async def set_node_condition(self, node: str, condition: Condition) -> None:
        """Set one `status.conditions` entry (merged by type); the transition time moves only on a status change.

        The node is read first to know the current status; the write carries that read's resourceVersion, and a
        409 (the kubelet wrote in between) re-reads and tries again.
        """

        async def attempt(number: int) -> None:
            raw = await self._get_node_json(node)
            current = convert.node_state(raw, gpu_resources=self._gpu_resources).condition(condition.type)
            body = convert.condition_patch(
                condition,
                current=current,
                now=self._now(),
                resource_version=str((raw.get("metadata") or {}).get("resourceVersion") or ""),
            )
            await self._patch_node_status(node, body)

        t = self._transport
        await conflicts.retry_on_conflict(
            attempt, what=f"node {node}", tries=_CONDITION_WRITE_TRIES, sleep=t.sleep, rand=t.rand
        )

    async def _patch_node_status(self, node: str, body: JsonObj) -> None:
        names.check_node(node)
        t = self._transport
        await t.send(
            f"PATCH node {node}/status",
            lambda: t.core.patch_node_status_without_preload_content(
                node,
                body,
                field_manager=COMPONENT,
                _content_type=STRATEGIC_MERGE_PATCH,
                _request_timeout=t.timeout,
            ),
        )

    def _node_state(self, raw: JsonObj) -> NodeState:
        state = convert.node_state(raw, gpu_resources=self._gpu_resources)
        taints = (raw.get("spec") or {}).get("taints") or []
        self._taints[(state.name, state.resource_version)] = [t for t in taints if isinstance(t, dict)]
        while len(self._taints) > _TAINT_MEMORY:
            self._taints.popitem(last=False)
        return state

    async def _get_node_json(self, name: str) -> JsonObj:
        names.check_node(name)
        t = self._transport
        return await t.send(
            f"GET node {name}",
            lambda: t.direct("GET", "/api/v1/nodes/{name}", path_params={"name": name}),
        )
