#!/usr/bin/env python3
"""Walks one XID 79 alert from the HTTP handler to the node PATCH and counts its hops (issue 13's figure).

Run it from a checkout whose code it measures, with that checkout on PYTHONPATH and the project's venv:

    PYTHONPATH=$PWD .venv/bin/python scripts/alert-walk.py              # the figures
    PYTHONPATH=$PWD .venv/bin/python scripts/alert-walk.py --show       # and the walk, one line a stay
    PYTHONPATH=$PWD .venv/bin/python scripts/alert-walk.py --json       # machine-readable
    PYTHONPATH=/path/to/old/checkout .venv/bin/python scripts/alert-walk.py   # another code base

It imports `app` and `tests.integration.remediation_world` from PYTHONPATH, not from the script's
checkout, so one copy of the script measures any commit that has that harness (d32d312 and later).

What runs: exactly what `test_fatal_xid_quarantines_in_one_read_one_write_evicts_and_restarts_the_gang`
(tests/integration/test_remediation.py) does: `open_world` (the real aiohttp app and `KubeClient` against
the simulated API server, background reconciliation an hour away, the risk model off as tests/conftest.py
sets it), one Alertmanager webhook with `xid=79` (GPU fallen off the bus) for gpu-00's GPU 3, and a wait
for the cordon.

What is counted: every *call* into a Python function whose module is under `app.` but not `app.sim` (the
simulated cluster is not Sickbay), as `sys.setprofile` sees it, from the moment the `_alerts` route
handler is entered until the node PATCH carrying the taint leaves: the first `call_api` of the official
client made while a `patch_node` whose `NodePatch` has taints is under way. The choices that make this a
count of calls, on this alert's path only, and the same on every run:

- A coroutine resuming after an `await` is reported as a "call" by the profiler; only a frame's first
  entry (its `RESUME 0`) is counted. Comprehension frames belong to the function that holds them, and
  functions with no source file (a dataclass's generated `__init__`, `__eq__`) are not counted.
- Only frames of the tasks on the alert's path are kept: the request's task while inside the handler, the
  consumer task that issues the PATCH (the first of its ancestors that already ran before the alert: the
  `pipeline` consumer) from the start of its pass over the inbox that took this row (the outermost of its
  calls still under way at the PATCH that began after the handler was entered; the tail of an earlier
  pass, woken by a poll as the row was written, is not this alert's), and every task either of them starts
  meanwhile (`gather` children). The scheduler's jobs, the reconcile and recheck loops, the leader's
  renewals, the inbox's writer task (it batches every writer's rows) and the simulator's tasks are left
  out. Tasks are told apart by a task factory that records each task's parent; only the event loop's
  thread is profiled (aiosqlite's thread runs SQLite, no Sickbay code).
- The walk is ordered as the code reads, not as the loop happened to interleave it: a started task's calls
  come where its parent started it (two `gather` children one after the other), and the consumer's calls
  after the handler's. So the figures do not depend on which response the simulator sent first; `--runs 3`
  checks that three fresh worlds give the same walk.

Figures, over the "stays" (maximal runs of consecutive calls in one module):
- stays: module changes + 1; modules: distinct modules visited;
- climbs back up: a stay followed by one in a higher layer, by the `layers` contract of the `.importlinter`
  beside the imported `app` (a module's layer is its top package under `app`; `a | b` share a layer; a
  package the contract does not list is reported as unranked and its transitions are not compared). Most
  are returns: a call down and its return count a descent and a climb;
- act -> decide -> act: stays in `app.decide` entered by a call from `app.act` code (the nearest Sickbay
  frame below the call), each one a trip from act into decide and back: act still deciding;
- also: calls (counted calls), descents, calls up (a call into a higher layer than its caller's: a
  callback or an injected port), the same stays and climbs over top packages, and the walk without the
  bottom layer (domain value accessors, name checks), nearer to what a reader stepping through the code
  at the level of its decisions would count.

Standard library only, besides the code under measurement and its test harness.
"""

from __future__ import annotations

import argparse
import asyncio
import configparser
import contextlib
import dis
import itertools
import json
import os
import sys
import tempfile
from collections.abc import Coroutine, Iterator
from contextvars import Context
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import app  # the code under measurement, from PYTHONPATH
from tests.integration.remediation_world import eventually, open_world

START_FUNCTION = "_alerts"  # the route handler of POST /api/v1/alerts, in both code bases
LEAVING = "call_api"  # the official client's send: the request leaves Sickbay here
RESUME = dis.opmap["RESUME"]
YIELD_VALUE = dis.opmap["YIELD_VALUE"]
INLINE = {"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"}


def is_sickbay(module: str) -> bool:
    return module.startswith("app.") and module != "app.sim" and not module.startswith("app.sim.")


def first_entry(frame: FrameType) -> bool:
    """True on a frame's first entry, false when a coroutine or generator resumes (RESUME's arg > 0)."""
    code = frame.f_code.co_code
    at = frame.f_lasti
    return at >= 0 and code[at] == RESUME and code[at + 1] == 0


@dataclass(frozen=True)
class Call:
    module: str
    function: str
    caller: str | None  # the module of the nearest Sickbay frame below it on the stack, if any


def caller_of(frame: FrameType) -> str | None:
    below = frame.f_back
    while below is not None:
        module = below.f_globals.get("__name__", "")
        if is_sickbay(module):
            return str(module)
        below = below.f_back
    return None


@dataclass
class Started:
    parent: asyncio.Task[Any] | None
    at: int  # the event count when it was started: its calls go there in its parent's walk
    during: bool  # started after the handler was entered


@dataclass
class Recorder:
    """The profiler hook and the task factory: raw call events per task, cut down later to the path."""

    seq: int = 0
    started_at: int | None = None
    stopped_at: int | None = None
    handler: FrameType | None = None
    handler_task: asyncio.Task[Any] | None = None
    handler_done_at: int | None = None
    stop_task: asyncio.Task[Any] | None = None
    consumer: asyncio.Task[Any] | None = None
    consumer_from: int = 0  # where the consumer's part starts: its pass over this alert's row
    entered: dict[int, int] = field(default_factory=dict)  # id of a live frame -> the seq of its entry
    calls: dict[asyncio.Task[Any] | None, list[tuple[int, Call]]] = field(default_factory=dict)
    tasks: dict[asyncio.Task[Any], Started] = field(default_factory=dict)
    patching: set[asyncio.Task[Any]] = field(default_factory=set)

    def task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], context: Context | None = None
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, context=context)
        self.tasks[task] = Started(asyncio.current_task(loop), self.seq, self.started_at is not None)
        return task

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if self.stopped_at is not None:
            return
        if event == "return":
            if frame is self.handler and frame.f_code.co_code[frame.f_lasti] != YIELD_VALUE:
                self.handler_done_at = self.seq
            return
        if event != "call":
            return
        code = frame.f_code
        module = frame.f_globals.get("__name__", "")
        if not is_sickbay(module):
            if code.co_name == LEAVING and self.patching and asyncio.current_task() in self.patching:
                self.stopped_at = self.seq
                self.stop_task = asyncio.current_task()
                self._find_consumer(frame)
            return
        if not first_entry(frame) or code.co_filename.startswith("<"):
            return
        if self.started_at is None:
            if code.co_name != START_FUNCTION:
                return
            self.started_at = self.seq
            self.handler = frame
            self.handler_task = asyncio.current_task()
        task = asyncio.current_task()
        tainting = code.co_name == "patch_node" and module.startswith("app.kube")
        if tainting and task is not None and getattr(frame.f_locals.get("patch"), "taints", None):
            self.patching.add(task)
        if code.co_name in INLINE:
            return
        self.seq += 1
        self.entered[id(frame)] = self.seq
        self.calls.setdefault(task, []).append((self.seq, Call(module, code.co_qualname, caller_of(frame))))

    def _find_consumer(self, leaving: FrameType) -> None:
        """The task the alert's processing runs in, and the call of it that processes this alert.

        The consumer is the PATCH's task or, when that was started meanwhile (a `gather` child), the first
        of its ancestors that was already running before the alert. Its part of the walk starts at the
        outermost call still under way that was entered after the handler: its pass over the inbox that
        took this row. The tail of an earlier pass (a poll that woke it as the row was being written) is
        not this alert's and would make the figures depend on timing."""
        consumer = self.stop_task
        while (info := self.tasks.get(consumer)) and info.during and info.parent is not None:  # type: ignore[arg-type]
            consumer = info.parent
        self.consumer = consumer
        frames: list[FrameType] = []
        if consumer is self.stop_task:
            below: FrameType | None = leaving
            while below is not None:
                frames.append(below)
                below = below.f_back
        elif consumer is not None:
            awaited: Any = consumer.get_coro()
            while (frame := getattr(awaited, "cr_frame", None)) is not None:
                frames.append(frame)
                awaited = awaited.cr_await
        entries = [self.entered[id(f)] for f in frames if id(f) in self.entered]
        self.consumer_from = min(entries, default=0)

    def walk(self) -> list[Call]:
        """Each counted call on the alert's path, in the order the code reads."""
        if self.started_at is None or self.stopped_at is None or self.stop_task is None:
            raise RuntimeError("the alert's walk was not seen from handler to PATCH")
        children: dict[asyncio.Task[Any] | None, list[asyncio.Task[Any]]] = {}
        for task, info in self.tasks.items():
            if info.during:
                children.setdefault(info.parent, []).append(task)

        def of(task: asyncio.Task[Any] | None, *, since: int = 0, until: int) -> Iterator[Call]:
            kids = sorted(
                (t for t in children.get(task, ()) if self.tasks[t].at >= since - 1),
                key=lambda t: self.tasks[t].at,
            )
            for seq, call in self.calls.get(task, ()):
                while kids and self.tasks[kids[0]].at < seq:
                    yield from of(kids.pop(0), until=until)
                if since <= seq <= until:
                    yield call
            for kid in kids:
                yield from of(kid, until=until)

        handler_until = min(self.handler_done_at or self.stopped_at, self.stopped_at)
        path = list(of(self.handler_task, until=handler_until))
        if self.consumer is not self.handler_task:
            path += of(self.consumer, since=self.consumer_from, until=self.stopped_at)
        return path


def layer_order(importlinter: Path) -> dict[str, int]:
    """Top package -> its rank in the `layers` contract (0 is the top)."""
    parser = configparser.ConfigParser()
    parser.read(importlinter)
    lines = parser["importlinter:contract:layers"]["layers"].splitlines()
    ranks: dict[str, int] = {}
    for line in (raw.strip() for raw in lines):
        if line and not line.startswith("#"):
            rank = len(set(ranks.values()))
            ranks.update({name.strip(): rank for name in line.split("|")})
    return ranks


def top_package(module: str) -> str:
    return ".".join(module.split(".")[:2])


@dataclass(frozen=True)
class Stay:
    module: str
    functions: tuple[str, ...]
    entered_from: str | None  # the caller's module of its first call (its own module after a return)


def stays_of(path: list[Call]) -> list[Stay]:
    stays: list[Stay] = []
    for call in path:
        if stays and stays[-1].module == call.module:
            stays[-1] = Stay(call.module, (*stays[-1].functions, call.function), stays[-1].entered_from)
        else:
            stays.append(Stay(call.module, (call.function,), call.caller))
    return stays


def climbs_of(sequence: list[str], ranks: dict[str, int]) -> tuple[int, int, set[str]]:
    """(climbs, descents, unranked packages) over consecutive entries of `sequence` (module names)."""
    climbs = descents = 0
    unranked: set[str] = set()
    for here, there in itertools.pairwise(sequence):
        a, b = ranks.get(top_package(here)), ranks.get(top_package(there))
        unranked |= {top_package(m) for m, r in ((here, a), (there, b)) if r is None}
        if a is not None and b is not None:
            climbs += b < a
            descents += b > a
    return climbs, descents, unranked


def collapsed(names: list[str]) -> list[str]:
    return [name for i, name in enumerate(names) if i == 0 or names[i - 1] != name]


def figures(path: list[Call], ranks: dict[str, int]) -> dict[str, Any]:
    stays = stays_of(path)
    climbs, descents, unranked = climbs_of([s.module for s in stays], ranks)
    packages = collapsed([top_package(s.module) for s in stays])
    package_climbs, _, _ = climbs_of(packages, ranks)
    # The ping-pong: decide code entered from act code (the "act -> decide -> act"): act deciding.
    ping_pong = sum(
        1
        for s in stays
        if top_package(s.module) == "app.decide" and top_package(s.entered_from or "") == "app.act"
    )
    # A call into a higher layer than its caller's: a callback or an injected port, never an import.
    calls_up = sum(
        1
        for c in path
        if c.caller is not None
        and (a := ranks.get(top_package(c.caller))) is not None
        and (b := ranks.get(top_package(c.module))) is not None
        and b < a
    )
    bottom = max(ranks.values())
    # The same walk without the bottom layer's value helpers (domain accessors, name checks): the figures
    # a reader stepping through the code at the level of its decisions would count.
    upper = collapsed([s.module for s in stays if ranks.get(top_package(s.module)) != bottom])
    upper_climbs, _, _ = climbs_of(upper, ranks)
    return {
        "calls": len(path),
        "stays": len(stays),
        "modules": len({s.module for s in stays}),
        "climbs": climbs,
        "descents": descents,
        "act_decide_act": ping_pong,
        "calls_up": calls_up,
        "package_stays": len(packages),
        "packages": len(set(packages)),
        "package_climbs": package_climbs,
        "without_bottom_layer": {"stays": len(upper), "modules": len(set(upper)), "climbs": upper_climbs},
        "unranked": sorted(unranked),
        "package_walk": packages,
        "walk": [{"module": s.module, "functions": list(s.functions), "from": s.entered_from} for s in stays],
    }


def show(result: dict[str, Any], ranks: dict[str, int]) -> str:
    lines = []
    previous: int | None = None
    for number, stay in enumerate(result["walk"], 1):
        rank = ranks.get(top_package(stay["module"]))
        mark = "^" if previous is not None and rank is not None and rank < previous else " "
        if top_package(stay["module"]) == "app.decide" and top_package(stay["from"] or "") == "app.act":
            mark = "!"
        functions = stay["functions"]
        names = ", ".join(dict.fromkeys(f.rsplit(".", 1)[-1] for f in functions))
        lines.append(f"{number:3d} {mark} {stay['module']:<34} {len(functions):3d}  {names}")
        previous = rank if rank is not None else previous
    lines.append("    (^ a climb back up, ! decide entered from act; the number: calls counted in the stay)")
    lines.append("packages: " + " > ".join(p.removeprefix("app.") for p in result["package_walk"]))
    return "\n".join(lines)


async def walk_one_alert(tmp: Path) -> list[Call]:
    recorder = Recorder()
    loop = asyncio.get_running_loop()
    previous_factory = loop.get_task_factory()
    loop.set_task_factory(recorder.task_factory)  # type: ignore[arg-type]
    try:
        async with open_world(tmp) as world:

            async def cordoned() -> bool:
                return bool((await world.node("gpu-00")).spec.unschedulable)

            world.spy.calls.clear()
            sys.setprofile(recorder.profile)
            try:
                await world.post_alert(node="gpu-00", xid="79", gpu="3")
                await eventually(cordoned, what="gpu-00 cordoned")
            finally:
                sys.setprofile(None)
    finally:
        loop.set_task_factory(previous_factory)
    return recorder.walk()


@contextlib.contextmanager
def quiet_prediction() -> Iterator[None]:
    """As tests/conftest.py: the shipped risk model stays unloaded (an XID alert does not reach it)."""
    before = os.environ.get("SICKBAY_PREDICTION__ENABLED")
    os.environ["SICKBAY_PREDICTION__ENABLED"] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SICKBAY_PREDICTION__ENABLED", None)
        else:
            os.environ["SICKBAY_PREDICTION__ENABLED"] = before


def run_walk(tmp: Path) -> list[Call]:
    """One alert's walk in a fresh world under `tmp`, on an event loop of its own."""
    return asyncio.run(walk_one_alert(tmp))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--show", action="store_true", help="print the walk, one line per stay")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--runs", type=int, default=1, help="walk this many fresh worlds; exit 1 if they differ"
    )
    args = parser.parse_args()
    root = Path(app.__file__).resolve().parents[1]
    ranks = layer_order(root / ".importlinter")
    results = []
    with quiet_prediction():
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="alert-walk-") as tmp:
                results.append(figures(run_walk(Path(tmp)), ranks))
    result = {"code": str(root), **results[0]}
    same = all(r["walk"] == results[0]["walk"] for r in results)
    if args.json:
        print(json.dumps({**result, "runs": args.runs, "runs_agree": same}, indent=1))
    else:
        print(f"code: {root}  ({args.runs} run{'s' * (args.runs != 1)}, {'same' if same else 'DIFFERENT'})")
        upper = result["without_bottom_layer"]
        print(
            f"stays {result['stays']}, modules {result['modules']}, climbs back up {result['climbs']}, "
            f"act -> decide -> act {result['act_decide_act']}\n"
            f"calls {result['calls']}, descents {result['descents']}, calls up (callbacks) {result['calls_up']}; "
            f"packages: {result['package_stays']} stays in {result['packages']}, {result['package_climbs']} climbs; "
            f"without the bottom layer: {upper['stays']} stays in {upper['modules']} modules, "
            f"{upper['climbs']} climbs"
        )
        if result["unranked"]:
            print("not in the layers contract: " + ", ".join(result["unranked"]))
        if args.show:
            print(show(result, ranks))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
