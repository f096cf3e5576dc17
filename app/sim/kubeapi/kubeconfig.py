"""A kubeconfig pointing at a simulated API server, for kubectl and `kubernetes.config.load_kube_config`.

Plain HTTP on loopback with a dummy bearer token: the server checks the token, so a client that forgets
its credentials fails here as it would against a real cluster.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from app.sim.kubeapi.resources import JsonObj

DEFAULT_TOKEN = "sickbay-sim-token"  # noqa: S105 - a fixed dummy credential for a loopback simulator
DEFAULT_CONTEXT = "sickbay-sim"


def kubeconfig_document(
    server_url: str, *, token: str = DEFAULT_TOKEN, context: str = DEFAULT_CONTEXT, namespace: str = "default"
) -> JsonObj:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": context, "cluster": {"server": server_url}}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [
            {"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}
        ],
        "current-context": context,
    }


def write_kubeconfig(
    path: str | Path,
    *,
    server_url: str,
    token: str = DEFAULT_TOKEN,
    context: str = DEFAULT_CONTEXT,
    namespace: str = "default",
) -> Path:
    """Write the kubeconfig (mode 0600, as kubectl expects of credentials) and return its path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    document = kubeconfig_document(server_url, token=token, context=context, namespace=namespace)
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    target.chmod(0o600)
    return target
