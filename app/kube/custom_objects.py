"""Custom objects (a remediator's request, say) created from their manifests.

The plural in the URL is the kind lower-cased plus "s" (`RemediationRequest` → `remediationrequests`)
unless `plurals` maps the kind (or `Kind.group`) to the real one; an object is namespaced exactly when its
manifest has `metadata.namespace`.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.kube.transport import COMPONENT, Transport


def plural_of(kind: str, group: str, plurals: Mapping[str, str]) -> str:
    """The resource name of a custom kind: `plurals["Kind.group"]`, `plurals["Kind"]`, or `kind.lower() + "s"`."""
    return plurals.get(f"{kind}.{group}") or plurals.get(kind) or kind.lower() + "s"


class CustomObjectCalls:
    def __init__(self, transport: Transport, *, plurals: Mapping[str, str]) -> None:
        self._transport = transport
        self.plurals = dict(plurals)

    async def create_custom_object(self, manifest: Mapping[str, object]) -> None:
        """Create any custom resource from its manifest (see the module docstring for the plural and scope)."""
        api_version = str(manifest.get("apiVersion") or "")
        kind = str(manifest.get("kind") or "")
        metadata = manifest.get("metadata")
        meta: Mapping[str, object] = metadata if isinstance(metadata, Mapping) else {}
        group, _, version = api_version.rpartition("/")
        if not group or not version or not kind:
            raise ValueError(
                f"a custom object needs apiVersion group/version and kind, got {api_version!r}/{kind!r}"
            )
        plural = plural_of(kind, group, self.plurals)
        namespace = str(meta.get("namespace") or "")
        body = dict(manifest)
        what = f"CREATE {kind} {namespace + '/' if namespace else ''}{meta.get('name') or meta.get('generateName')}"
        t = self._transport
        if namespace:
            await t.send(
                what,
                lambda: t.custom.create_namespaced_custom_object_without_preload_content(
                    group,
                    version,
                    namespace,
                    plural,
                    body,
                    field_manager=COMPONENT,
                    _request_timeout=t.timeout,
                ),
            )
        else:
            await t.send(
                what,
                lambda: t.custom.create_cluster_custom_object_without_preload_content(
                    group, version, plural, body, field_manager=COMPONENT, _request_timeout=t.timeout
                ),
            )
