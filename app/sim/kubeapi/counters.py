"""Request counters, so a test can assert what a client actually sent ("one read and one write").

Counted per verb and resource (`nodes`, `nodes/status`, `pods/eviction`) as requests arrive, whatever
their outcome, plus response codes, eviction outcomes, injected faults and the bytes of response bodies
(a watch's as its stream ends). Discovery and the /_sim
control endpoints are not counted. Plain data: the server owns one instance.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from app.sim.kubeapi.resources import JsonObj

READ_VERBS = frozenset({"get", "list", "watch"})


@dataclass
class Counters:
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    responses: Counter[int] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    evictions: Counter[str] = field(default_factory=Counter)  # "evicted" / "refused" / "failed"
    # Response body bytes per (verb, resource): what a list or a watch stream cost the wire.
    bytes_sent: Counter[tuple[str, str]] = field(default_factory=Counter)

    def record_request(self, verb: str, resource: str) -> None:
        self.requests[(verb, resource)] += 1

    def record_bytes(self, verb: str, resource: str, count: int) -> None:
        self.bytes_sent[(verb, resource)] += count

    def record_response(self, code: int) -> None:
        self.responses[code] += 1

    def record_fault(self, kind: str) -> None:
        self.faults[kind] += 1

    def record_eviction(self, outcome: str) -> None:
        self.evictions[outcome] += 1

    def reset(self) -> None:
        for counter in (self.requests, self.responses, self.faults, self.evictions, self.bytes_sent):
            counter.clear()

    def snapshot(self) -> JsonObj:
        by_verb: dict[str, dict[str, int]] = {}
        for (verb, resource), count in sorted(self.requests.items()):
            by_verb.setdefault(verb, {})[resource] = count
        sent: dict[str, dict[str, int]] = {}
        for (verb, resource), count in sorted(self.bytes_sent.items()):
            sent.setdefault(verb, {})[resource] = count
        reads = sum(n for (verb, _), n in self.requests.items() if verb in READ_VERBS)
        return {
            "requests": by_verb,
            "reads": reads,
            "writes": sum(self.requests.values()) - reads,
            "responses": {str(code): n for code, n in sorted(self.responses.items())},
            "faults": dict(sorted(self.faults.items())),
            "evictions": dict(sorted(self.evictions.items())),
            "bytes": sent,
        }
