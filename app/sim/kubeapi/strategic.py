"""Strategic merge patch, Kubernetes' schema-aware merge for built-in kinds.

Maps merge recursively and null deletes a key (as in RFC 7386). Lists merge by their merge key where the
kind declares one (node conditions by `type`, owner references by `uid`, containers by `name`), merge as a
set for scalar lists with a merge strategy, and are replaced whole otherwise. The directives clients send
(`$patch: replace|delete`, `$setElementOrder/…`, `$deleteFromPrimitiveList/…`, `$retainKeys`) are honoured
and never stored. Pure: inputs are never modified.
"""

from __future__ import annotations

import copy
from typing import Any

from app.sim.kubeapi.errors import ApiError
from app.sim.kubeapi.patches import patch_rejected
from app.sim.kubeapi.patchmeta import Path, Rules

_DELETE = object()  # a map patch carrying `$patch: delete` removes the map itself
_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"


def apply_strategic_merge_patch(original: Any, patch: Any, *, rules: Rules) -> Any:
    if not isinstance(patch, dict):
        raise ApiError(400, "BadRequest", message="strategic merge patch must be a JSON object")
    merged = _merge_map(original if isinstance(original, dict) else {}, patch, path=(), rules=rules)
    return {} if merged is _DELETE else merged


def _strip(value: Any) -> Any:
    """A patch value copied into the result, with any directives removed."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and set(v) == {"$patch"})]
    return value


def _merge_map(original: dict[str, Any], patch: dict[str, Any], *, path: Path, rules: Rules) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return _strip(patch)
    if directive not in (None, "merge"):
        raise ApiError(400, "BadRequest", message=f"Unknown patch type: {directive}")
    result = dict(original)
    for key, value in patch.items():
        if key.startswith("$"):
            if key.startswith(_DELETE_FROM):
                field = key[len(_DELETE_FROM) :]
                result[field] = [v for v in result.get(field) or [] if v not in (value or [])]
            continue
        if value is None:
            result.pop(key, None)
            continue
        sub = (*path, key)
        current = result.get(key)
        if isinstance(value, dict):
            merged = _merge_map(current if isinstance(current, dict) else {}, value, path=sub, rules=rules)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(
                current if isinstance(current, list) else [], value, path=sub, rules=rules
            )
        else:
            result[key] = copy.deepcopy(value)
    for key, order in patch.items():
        if key.startswith(_ORDER) and isinstance(order, list):
            field = key[len(_ORDER) :]
            if isinstance(result.get(field), list):
                result[field] = _reorder(result[field], order, key=rules.get((*path, field)))
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(original: list[Any], patch: list[Any], *, path: Path, rules: Rules) -> list[Any]:
    if path not in rules:
        return [_strip(v) for v in patch]
    key = rules[path]
    if key is None:
        merged = list(original)
        merged.extend(copy.deepcopy(v) for v in patch if v not in merged)
        return merged
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip(item) for item in patch if not (isinstance(item, dict) and "$patch" in item)]
    result = [copy.deepcopy(item) for item in original]
    for item in patch:
        if not isinstance(item, dict):
            raise patch_rejected(f"list {'.'.join(path)} merges by {key!r} and needs objects, got {item!r}")
        if key not in item:
            raise patch_rejected(f"map: {item} does not contain declared merge key: {key}")
        wanted = item[key]
        if item.get("$patch") == "delete":
            result = [existing for existing in result if existing.get(key) != wanted]
            continue
        for index, existing in enumerate(result):
            if isinstance(existing, dict) and existing.get(key) == wanted:
                merged = _merge_map(existing, item, path=path, rules=rules)
                if merged is _DELETE:
                    del result[index]
                else:
                    result[index] = merged
                break
        else:
            result.append(_strip(item))
    return result


def _reorder(items: list[Any], order: list[Any], *, key: str | None) -> list[Any]:
    """Put the named items first in the order given; items the order doesn't name keep theirs after them."""

    def ident(item: Any) -> Any:
        return item.get(key) if key is not None and isinstance(item, dict) else item

    ranked = {repr(ident(o) if isinstance(o, dict) else o): i for i, o in enumerate(order)}
    named = [item for item in items if repr(ident(item)) in ranked]
    named.sort(key=lambda item: ranked[repr(ident(item))])
    return named + [item for item in items if repr(ident(item)) not in ranked]
