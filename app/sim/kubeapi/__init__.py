"""A simulated Kubernetes API server for tests and the demo, spoken to by the official client and kubectl.

No real API server can run on the machines Sickbay is developed on, so this one reproduces the semantics
Sickbay depends on rather than a convenient subset: resourceVersion conflicts, selectors, strategic merge
by Kubernetes' real merge keys, status subresources, the eviction subresource against
PodDisruptionBudgets (with the disruption controller's arithmetic), Leases, Events. It is test and demo
infrastructure only; production code never imports it. Behaviours checked against a real kube-apiserver:
a stale UID or resourceVersion delete precondition is 409 Conflict in BeforeDelete's words; node taints
are validated as `metadata.taints[i]` (each cause twice on an update); a node's or pod's /status write
keeps label changes and resets only what its status strategy resets; MicroTime fields (Lease
`acquireTime`/`renewTime`, Event `eventTime`) need exactly six fractional digits and read back in UTC; a
new PodDisruptionBudget answers all-zero counts.

TokenReview and SubjectAccessReview (create-only, never stored) answer over identities and grants a test
registers: `api.register_pod_token(token, namespace=, service_account=, pod=, node=, audience=)` (a
projected ServiceAccount token, its pod and node in the user's `extra`), `api.register_token(token, user)`,
`api.grant(user_or_group, verb, group, resource)`; unknown tokens are not authenticated (see `reviews`).

The disruption controller lags as kube-controller-manager does: an eviction spends `disruptionsAllowed`
and records the pod in `disruptedPods` at once, `currentHealthy` follows `disruption_sync_s` later (0.1 s
by default; 0 syncs inline; seed objects are synced at once).

    async with KubeApiServer(seed=EXAMPLE_SEED, grace_scale=0.01, disruption_sync_s=0.1) as api:
        api.write_kubeconfig(tmp / "kubeconfig")          # kubectl and kubernetes.config use it as is
        api.configure_faults(FaultConfig(error_rate=0.2, kinds=("429", "500"), seed=1))
        api.fail_evictions(EvictionFailure("training", "*", code=403))  # RBAC refuses these evictions
        api.counters()                                    # {"requests": {"get": {"nodes": 1}}, ...}
        api.configure_disruption_sync(60); api.sync_controllers()  # hold the controller back, then catch up

Watches (`?watch=1`) stream changes from a bounded per-resource log, with bookmarks, `timeoutSeconds` and
410 Expired for a resourceVersion the log no longer covers (`watch`, `watchlog`;
`api.compact_watch_history()` plays etcd's compaction). Not simulated (a request for them fails loudly
rather than pretending): server-side apply
(415), OpenAPI documents (kubectl create/apply need --validate=false), managedFields, events.k8s.io/v1,
a scheduler, and controllers other than the disruption controller. There is no kubelet: pods move to
Running when a test writes their status. A deleted pod bound to a node stays Terminating for its grace
period times `grace_scale` (0.01: 30 s become 0.3 s), then a stand-in kubelet confirms the deletion as a
real one does; with `grace_scale` 0 deleted pods go at once. Namespace deletion is immediate. Continue
tokens page through one snapshot, at the first page's resourceVersion, until the watch log no longer covers
it (410 Expired, with a token to finish against current state: `paging`). Requests without credentials are served as the anonymous user (kubectl sends no bearer token
over plain HTTP); a wrong token is 401.
"""

from app.sim.kubeapi.faults import EvictionFailure, FaultConfig, FaultKind
from app.sim.kubeapi.kubeconfig import DEFAULT_TOKEN, write_kubeconfig
from app.sim.kubeapi.seed import SeedError, expand_seed, read_seed_file
from app.sim.kubeapi.server import KubeApiServer, build_app, load_seed, run

EXAMPLE_SEED = __file__.rsplit("/", 1)[0] + "/examples/small-cluster.yaml"

__all__ = [
    "DEFAULT_TOKEN",
    "EXAMPLE_SEED",
    "EvictionFailure",
    "FaultConfig",
    "FaultKind",
    "KubeApiServer",
    "SeedError",
    "build_app",
    "expand_seed",
    "load_seed",
    "read_seed_file",
    "run",
    "write_kubeconfig",
]
