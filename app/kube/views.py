"""Read views of the cluster kept by informers: the nodes, and the GPU pods by node, as domain values.

Reconciliation and the status page read these instead of listing every node each round, so a round costs
the API server nothing and the service O(changes): each watch event converts one object
(`convert.node_state`, `convert.pod_state`). A view is eventually consistent — it lags the server by one
event's delivery — which is what a list is too by the time it has been read; every write stays guarded by
the resourceVersion it was computed from (a stale one is a 409 and the next round reads again).

Only pods that request a GPU are kept (the drain's concern under `drain.gpu_pods_only`, and a small share
of a cluster's pods); a caller that needs every pod on a node lists them.

`ClusterView.start()` runs both informers as tasks; `stale` says whether either may be missing changes
(not yet listed, or its watch is down and being retried).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence

from app.backoff import Backoff
from app.domain import NodeState, PodState
from app.kube import convert, listwatch
from app.kube.informer import DEFAULT_BACKOFF, Hooks, Informer
from app.kube.listwatch import WATCH_TIMEOUT_S
from app.kube.responses import JsonObj
from app.kube.transport import Transport

# An informer's list pages: larger than the client's 500, since a start-up list of 100,000 pods in pages
# of 500 is 200 requests; kube-apiserver serves a page of a few thousand from its watch cache cheaply.
VIEW_PAGE_SIZE = 5000

PodKey = tuple[str, str]


def _name(obj: JsonObj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class NodeCache:
    """Every node, by name, as `NodeState`."""

    def __init__(self, *, gpu_resources: Sequence[str]) -> None:
        self._gpu_resources = tuple(gpu_resources)
        self._nodes: dict[str, NodeState] = {}

    def replace(self, objects: Iterable[JsonObj]) -> None:
        states = (convert.node_state(o, gpu_resources=self._gpu_resources) for o in objects)
        self._nodes = {s.name: s for s in states}

    def apply(self, kind: str, obj: JsonObj) -> None:
        if kind == "DELETED":
            self._nodes.pop(_name(obj), None)
            return
        state = convert.node_state(obj, gpu_resources=self._gpu_resources)
        self._nodes[state.name] = state

    def all(self) -> list[NodeState]:
        return [self._nodes[name] for name in sorted(self._nodes)]

    def get(self, name: str) -> NodeState | None:
        return self._nodes.get(name)

    def __len__(self) -> int:
        return len(self._nodes)


class GpuPodCache:
    """The pods that request a GPU and are bound to a node, by node."""

    def __init__(self, *, gpu_resources: Sequence[str]) -> None:
        self._gpu_resources = tuple(gpu_resources)
        self._node_of: dict[PodKey, str] = {}
        self._by_node: dict[str, dict[PodKey, PodState]] = {}

    def replace(self, objects: Iterable[JsonObj]) -> None:
        self._node_of, self._by_node = {}, {}
        for obj in objects:
            self.apply("ADDED", obj)

    def apply(self, kind: str, obj: JsonObj) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        self._drop(key)
        if kind == "DELETED":
            return
        spec = obj.get("spec") or {}
        node = spec.get("nodeName")
        if not node or convert.pod_gpu_request(spec, self._gpu_resources) <= 0:
            return
        self._node_of[key] = node
        self._by_node.setdefault(node, {})[key] = convert.pod_state(obj, gpu_resources=self._gpu_resources)

    def _drop(self, key: PodKey) -> None:
        node = self._node_of.pop(key, None)
        if node is None:
            return
        on_node = self._by_node.get(node)
        if on_node is not None:
            on_node.pop(key, None)
            if not on_node:
                del self._by_node[node]

    def on(self, node: str) -> list[PodState]:
        pods = self._by_node.get(node) or {}
        return [pods[key] for key in sorted(pods)]

    def __len__(self) -> int:
        return len(self._node_of)


class ClusterView:
    """The nodes and the GPU pods, each kept by an informer; read without a request."""

    def __init__(
        self, nodes: Informer, pods: Informer, node_cache: NodeCache, pod_cache: GpuPodCache
    ) -> None:
        self.node_informer = nodes
        self.pod_informer = pods
        self._nodes = node_cache
        self._pods = pod_cache
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def synced(self) -> bool:
        """Both informers have listed once: the view can answer."""
        return self.node_informer.synced.is_set() and self.pod_informer.synced.is_set()

    @property
    def opened(self) -> bool:
        """Both informers have listed and opened a watch once: a stale view from now on is an outage."""
        return self.node_informer.opened and self.pod_informer.opened

    @property
    def stale(self) -> bool:
        """Either informer may be missing changes (its watch is down, or it has not listed yet)."""
        return self.node_informer.stale or self.pod_informer.stale

    def nodes(self) -> list[NodeState]:
        """Every node, by name."""
        return self._nodes.all()

    def node(self, name: str) -> NodeState | None:
        return self._nodes.get(name)

    def labelled(self, key: str) -> list[NodeState]:
        """The nodes that carry label `key` (the label selector `key`), by name."""
        return [n for n in self._nodes.all() if n.label(key) is not None]

    def gpu_pods_on(self, node: str) -> list[PodState]:
        """The pods on `node` that request a GPU, by namespace and name."""
        return self._pods.on(node)

    def start(self) -> None:
        for informer in (self.node_informer, self.pod_informer):
            self._tasks.append(asyncio.create_task(informer.run(), name=f"sickbay-view-{informer.resource}"))

    async def wait_synced(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for both first lists; whether they came."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self.node_informer.synced.wait()
                await self.pod_informer.synced.wait()
        return self.synced

    async def wait_fresh(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` until both informers have listed and opened their watch; whether they
        did (the first list alone leaves a moment, the watch's opening, in which the view is still stale)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self.node_informer.watching.wait()
                await self.pod_informer.watching.wait()
        return self.synced and not self.stale

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def cluster_view(
    transport: Transport,
    *,
    gpu_resources: Sequence[str] = (convert.GPU_RESOURCE,),
    hooks: Hooks = Hooks(),  # noqa: B008 - frozen, so one shared default is safe
    page_size: int = VIEW_PAGE_SIZE,
    watch_timeout_s: int = WATCH_TIMEOUT_S,
    backoff: Backoff = DEFAULT_BACKOFF,
) -> ClusterView:
    """A view on `transport` (give it a token bucket of its own: a start-up list is many pages)."""
    node_cache = NodeCache(gpu_resources=gpu_resources)
    pod_cache = GpuPodCache(gpu_resources=gpu_resources)

    def informer(source: listwatch.ListWatch, cache: NodeCache | GpuPodCache) -> Informer:
        return Informer(source, cache, hooks=hooks, watch_timeout_s=watch_timeout_s, backoff=backoff)

    nodes = informer(listwatch.nodes(transport, page_size=page_size), node_cache)
    pods = informer(listwatch.pods(transport, page_size=page_size), pod_cache)
    return ClusterView(nodes, pods, node_cache, pod_cache)
