"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), the two schema-free patch types.

Both are pure functions over JSON values that return a new document and never modify their input, so a
failed patch leaves the stored object untouched. Strategic merge lives in `strategic.py` because it needs
per-kind merge keys.
"""

from __future__ import annotations

import copy
from typing import Any

from app.sim.kubeapi.errors import ApiError


def patch_rejected(message: str) -> ApiError:
    """kube-apiserver answers an unappliable patch with 422 and no object details."""
    return ApiError(422, "Invalid", message=message)


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise patch_rejected(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], part: str, *, allow_end: bool) -> int:
    if part == "-" and allow_end:
        return len(container)
    if not part.isdigit() or (len(part) > 1 and part.startswith("0")):
        raise patch_rejected(f"invalid array index {part!r}")
    index = int(part)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise patch_rejected(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict):
            if part not in node:
                raise patch_rejected(f"missing path element {part!r}")
            node = node[part]
        elif isinstance(node, list):
            node = node[_index(node, part, allow_end=False)]
        else:
            raise patch_rejected(f"cannot descend into a scalar at {part!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts)
    part = parts[-1]
    if isinstance(parent, dict):
        if part not in parent:
            raise patch_rejected(f"path {path!r} does not exist")
        return parent[part]
    if isinstance(parent, list):
        return parent[_index(parent, part, allow_end=False)]
    raise patch_rejected(f"path {path!r} does not exist")


def _add(doc: Any, path: str, *, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts)
    part = parts[-1]
    if isinstance(parent, dict):
        parent[part] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, part, allow_end=True), value)
    else:
        raise patch_rejected(f"cannot add at {path!r}")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    parts = _pointer(path)
    if not parts:
        raise patch_rejected("cannot remove the whole document")
    parent = _parent(doc, parts)
    part = parts[-1]
    if isinstance(parent, dict):
        if part not in parent:
            raise patch_rejected(f"unable to remove nonexistent key: {part}: missing value")
        return doc, parent.pop(part)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, part, allow_end=False))
    raise patch_rejected(f"cannot remove at {path!r}")


def apply_json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 over a deep copy; any failing operation rejects the whole patch."""
    if not isinstance(operations, list):
        raise ApiError(400, "BadRequest", message="json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, "BadRequest", message=f"invalid json patch operation: {op!r}")
        kind, path = op["op"], str(op["path"])
        if kind == "add":
            doc = _add(doc, path, value=copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc, _ = _remove(doc, path) if _pointer(path) else (doc, None)
            doc = _add(doc, path, value=copy.deepcopy(op.get("value")))
        elif kind == "move":
            doc, moved = _remove(doc, str(op.get("from", "")))
            doc = _add(doc, path, value=moved)
        elif kind == "copy":
            doc = _add(doc, path, value=copy.deepcopy(_get(doc, str(op.get("from", "")))))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise patch_rejected(f"testing value {path} failed: test failed")
        else:
            raise ApiError(400, "BadRequest", message=f"unexpected json patch operation {kind!r}")
    return doc
