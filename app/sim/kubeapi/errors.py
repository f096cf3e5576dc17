"""API errors shaped exactly like the `Status` objects Kubernetes returns.

Clients branch on `code` and `reason` (409 Conflict vs AlreadyExists, 429 with a DisruptionBudget cause), so
the simulator raises one exception type that carries a real Status body. Messages follow kube-apiserver's
wording so logs and assertions read the same against either server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from app.sim.kubeapi.resources import JsonObj, ResourceType


class ApiError(Exception):
    """A failed request, rendered as a `Status` with the given HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        *,
        message: str,
        details: JsonObj | None = None,
        headers: Mapping[str, str] | None = None,
        list_meta: JsonObj | None = None,
    ) -> None:
        super().__init__(message)
        self.list_meta = dict(list_meta or {})  # Status.metadata: a 410's fresh `continue`, say
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = dict(headers or {})

    def status(self) -> JsonObj:
        body: JsonObj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.list_meta),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:  # metav1.Status.reason is omitempty (an admission webhook's denial may have none)
            del body["reason"]
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(rt: ResourceType, name: str, **extra: Any) -> JsonObj:
    details: JsonObj = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    details.update(extra)
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", message=f'{rt.qualified} "{name}" not found', details=_details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", message=f'{rt.qualified} "{name}" already exists', details=_details(rt, name)
    )


def conflict(rt: ResourceType, name: str, *, why: str | None = None, by_kind: bool = False) -> ApiError:
    """409 Conflict. `by_kind` names the object by its kind (`Pod`, `PodDisruptionBudget.policy`) as the
    delete path does: rest.BeforeDelete builds its GroupResource as {Group: gvk.Group, Resource: gvk.Kind}
    (k8s.io/apiserver/pkg/registry/rest/delete.go), where an update's conflict names the resource (`pods`)."""
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    if by_kind:
        qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
        details: JsonObj = {"name": name, **({"group": rt.group} if rt.group else {}), "kind": rt.kind}
    else:
        qualified, details = rt.qualified, _details(rt, name)
    return ApiError(
        409,
        "Conflict",
        message=f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        details=details,
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message=message)


def invalid(rt: ResourceType, name: str, *, causes: Sequence[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; each cause is (reason, field, message), e.g. ("FieldValueInvalid", "metadata.name", ...).

    Every cause is listed in `details.causes`, repeats included, but the message names each once:
    field.ErrorList.ToAggregate drops errors whose text it has already seen
    (k8s.io/apimachinery/pkg/util/validation/field/errors.go), while NewInvalid copies the list as is.
    """
    listed = list(dict.fromkeys(f"{fld}: {msg}" for _, fld, msg in causes))
    summary = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
    details: JsonObj = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    details["causes"] = [{"reason": reason, "message": msg, "field": fld} for reason, fld, msg in causes]
    return ApiError(422, "Invalid", message=f'{rt.kind} "{name}" is invalid: {summary}', details=details)


def invalid_patch(patched: JsonObj, *, why: str) -> ApiError:
    """422 for a patch whose result does not decode: an Invalid on the field `patch`, for no kind and no name.

    The value is the patched object as JSON, as the JSON and merge patchers report it (the strategic
    patcher prints its Go map instead); the message keeps Go's `%q` quoting of it.
    """
    value = json.dumps(json.dumps(patched, separators=(",", ":")))
    message = f"Invalid value: {value}: {why}"
    details: JsonObj = {"causes": [{"reason": "FieldValueInvalid", "message": message, "field": "patch"}]}
    return ApiError(422, "Invalid", message=f' "" is invalid: patch: {message}', details=details)


def forbidden(rt: ResourceType, name: str, *, why: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        message=f'{rt.qualified} "{name}" is forbidden: {why}',
        details=_details(rt, name),
    )


def too_many_requests(message: str, *, retry_after_s: int = 0, causes: Sequence[JsonObj] = ()) -> ApiError:
    details: JsonObj = {}
    if causes:
        details["causes"] = list(causes)
    if retry_after_s > 0:
        details["retryAfterSeconds"] = retry_after_s
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s > 0 else {}
    return ApiError(429, "TooManyRequests", message=message, details=details, headers=headers)


def internal(message: str) -> ApiError:
    return ApiError(
        500,
        "InternalError",
        message=f"Internal error occurred: {message}",
        details={"causes": [{"message": message}]},
    )


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", message="the server does not allow this method on the requested resource"
    )


def unsupported_media_type(content_type: str, accepted: Sequence[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        message=f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}"
        + (f" (got {content_type})" if content_type else ""),
    )


def not_acceptable(accept: str) -> ApiError:
    return ApiError(
        406,
        "NotAcceptable",
        message=f"only the following media types are accepted: application/json ({accept})",
    )


def timeout(message: str) -> ApiError:
    return ApiError(504, "Timeout", message=message, details={})


def success(code: int, *, details: JsonObj | None = None) -> JsonObj:
    body: JsonObj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details is not None:
        body["details"] = details
    return body
