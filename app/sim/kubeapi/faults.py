"""Injected API failures and latency, decided before a request touches any state.

A share of resource requests answers 429 (with `Retry-After: 1`), 500, or hangs until the client gives up
(capped, and released at shutdown); every request can also carry a fixed added latency. The decision is
drawn from a seeded generator, one draw per eligible request, so a test that replays the same requests
sees the same failures. A fault is always decided and answered *before* the handler reads or writes
state: a failed write never half-happens (there is no "applied but response lost" mode).

Separately, evictions of chosen pods can fail outright and every time (`EvictionFailure`), with the body a
real server sends for that cause: 403 for RBAC that does not grant `pods/eviction`, 400 for a validating
admission webhook that denies it, 500 for an internal error. These are the failures a drain must not
mistake for success.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from app.sim.kubeapi import errors
from app.sim.kubeapi.errors import ApiError
from app.sim.kubeapi.resources import PODS

FaultKind = Literal["429", "500", "timeout"]
FAULT_KINDS: tuple[FaultKind, ...] = ("429", "500", "timeout")


@dataclass(frozen=True)
class FaultConfig:
    """What to inject. `verbs`/`resources` narrow which requests are eligible (None means all)."""

    error_rate: float = 0.0
    kinds: tuple[FaultKind, ...] = ("429", "500")
    latency_ms: float = 0.0
    seed: int | None = None
    hang_s: float = 30.0
    verbs: frozenset[str] | None = None  # e.g. {"patch", "create"}
    resources: frozenset[str] | None = None  # e.g. {"nodes", "pods/eviction"}
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.error_rate <= 1.0:
            problems.append(f"error_rate must be within [0, 1], got {self.error_rate}")
        unknown = [k for k in self.kinds if k not in FAULT_KINDS]
        if unknown or (self.error_rate > 0 and not self.kinds):
            problems.append(
                f"kinds must be a non-empty subset of {list(FAULT_KINDS)}, got {list(self.kinds)}"
            )
        if self.latency_ms < 0 or self.hang_s < 0 or self.retry_after_s < 0:
            problems.append("latency_ms, hang_s and retry_after_s must not be negative")
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultConfig:
        """Build from the control endpoint's JSON; unknown keys are an error, not silently ignored."""
        known = set(cls.__dataclass_fields__)
        extra = sorted(set(data) - known)
        if extra:
            raise ValueError(f"unknown fault settings: {extra}; known: {sorted(known)}")
        values: dict[str, Any] = dict(data)
        if "kinds" in values:
            values["kinds"] = tuple(str(k) for k in values["kinds"])
        for key in ("verbs", "resources"):
            if values.get(key) is not None:
                values[key] = frozenset(str(v) for v in values[key])
        for key in ("error_rate", "latency_ms", "hang_s"):
            if key in values:
                values[key] = float(values[key])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kinds"] = list(self.kinds)
        for key in ("verbs", "resources"):
            data[key] = sorted(data[key]) if data[key] is not None else None
        return data


EVICTION_FAILURE_CODES = (400, 403, 500)


@dataclass(frozen=True)
class EvictionFailure:
    """Every eviction of `namespace/name` fails with `code`; `*` in either matches any.

    403: the requester lacks RBAC for `pods/eviction` (`user` names it). The message is the authorizer's,
    `<resource> "<name>" is forbidden: User "<user>" cannot create resource "pods/eviction" in API group ""
    in the namespace "<ns>"` (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/
    errors.go, forbiddenMessage).
    400: a validating admission webhook denied it. kube-apiserver raises a webhook's code below 400 to 400
    and prefixes its message with `admission webhook "<name>" denied the request` (ToStatusErr in
    .../admission/plugin/webhook/errors/statuserror.go); the reason is the webhook's own, here none.
    500: an internal error (`Internal error occurred: <message>`), which clients retry until they give up.
    """

    namespace: str
    name: str
    code: int
    message: str = ""
    user: str = "system:serviceaccount:sickbay:sickbay"
    webhook: str = "deny-eviction.policy.example.com"

    def __post_init__(self) -> None:
        if self.code not in EVICTION_FAILURE_CODES:
            raise ValueError(f"code must be one of {list(EVICTION_FAILURE_CODES)}, got {self.code}")
        if not self.namespace or not self.name:
            raise ValueError("namespace and name are required ('*' matches any)")

    def matches(self, namespace: str, name: str) -> bool:
        return self.namespace in ("*", namespace) and self.name in ("*", name)

    def error(self, namespace: str, name: str) -> ApiError:
        """The error kube-apiserver answers this eviction of `namespace/name` with."""
        if self.code == 403:
            why = (
                f'User "{self.user}" cannot create resource "pods/eviction" in API group "" '
                f'in the namespace "{namespace}"'
            )
            return errors.forbidden(PODS, name, why=why)
        if self.code == 400:
            denied = f'admission webhook "{self.webhook}" denied the request'
            message = f"{denied}: {self.message}" if self.message else f"{denied} without explanation"
            return ApiError(400, "", message=message)
        return errors.internal(self.message or "etcdserver: request timed out")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvictionFailure:
        known = set(cls.__dataclass_fields__)
        extra = sorted(set(data) - known)
        if extra:
            raise ValueError(f"unknown eviction failure settings: {extra}; known: {sorted(known)}")
        text = {k: str(v) for k, v in data.items() if k != "code"}
        return cls(
            namespace=text.get("namespace", ""),
            name=text.get("name", ""),
            code=int(data.get("code", 0)),
            **{k: v for k, v in text.items() if k not in ("namespace", "name")},
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FaultInjector:
    """Holds the current config and its generator (reconfiguring reseeds), and the failing evictions."""

    config: FaultConfig = field(default_factory=FaultConfig)
    eviction_failures: tuple[EvictionFailure, ...] = ()
    _random: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.config.seed)  # noqa: S311 - seeded so runs replay; not security

    def configure(self, config: FaultConfig) -> None:
        self.config = config
        self._random = random.Random(config.seed)  # noqa: S311 - seeded so runs replay; not security

    def eligible(self, verb: str, resource: str) -> bool:
        cfg = self.config
        if cfg.error_rate <= 0:
            return False
        if cfg.verbs is not None and verb not in cfg.verbs:
            return False
        return cfg.resources is None or resource in cfg.resources

    def decide(self, verb: str, resource: str) -> FaultKind | None:
        if not self.eligible(verb, resource):
            return None
        if self._random.random() >= self.config.error_rate:
            return None
        return self._random.choice(self.config.kinds)

    def fail_evictions(self, failures: Iterable[EvictionFailure]) -> None:
        """Replace the failing evictions (an empty list clears them); the fault config is left alone."""
        self.eviction_failures = tuple(failures)

    def eviction_failure(self, namespace: str, name: str) -> ApiError | None:
        """The error this eviction must fail with, if one is configured (the first match wins)."""
        for failure in self.eviction_failures:
            if failure.matches(namespace, name):
                return failure.error(namespace, name)
        return None
