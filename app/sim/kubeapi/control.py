"""The simulator's own endpoints under /_sim: fault injection, counters, extra seed objects.

Tests and benchmarks steer a running simulator through these without restarting it. They are outside the
Kubernetes URL space, need no token, are never counted and never faulted.

    GET/POST/DELETE /_sim/faults   read, replace or clear the FaultConfig (JSON, see faults.FaultConfig)
    GET/POST/DELETE /_sim/eviction-failures
                                   read, replace or clear the pods whose evictions fail (a JSON list of
                                   faults.EvictionFailure: namespace, name, code 400/403/500, ...)
    GET/DELETE      /_sim/counters read or reset the request counters
    POST            /_sim/objects  load more objects (a seed document, JSON or YAML)
    POST            /_sim/tokens   register tokens for TokenReview: a JSON list of {token, username,
                                   groups, extra, audiences, uid} (see reviews.Identity)
    POST            /_sim/grants   add SubjectAccessReview grants: a JSON list of {subject, verb, group,
                                   resource, name} (see reviews.Grant)
    GET/POST/DELETE /_sim/job-outcomes
                                   read, add to or clear how the next Jobs pinned to a node end: POST
                                   {"outcomes": [{node, outcome: succeed|fail|hang}], "run_s": 0.2}
                                   (see jobs.JobController; `run_s` optional)
"""

from __future__ import annotations

import json

import yaml
from aiohttp import web

from app.sim.kubeapi import seed
from app.sim.kubeapi.errors import ApiError
from app.sim.kubeapi.faults import EvictionFailure, FaultConfig
from app.sim.kubeapi.handlers import error_response, json_response
from app.sim.kubeapi.jobs import OUTCOMES
from app.sim.kubeapi.reviews import API_AUDIENCE, Grant, Identity
from app.sim.kubeapi.state import STATE


async def get_faults(request: web.Request) -> web.Response:
    return json_response(request.app[STATE].faults.config.to_json())


async def set_faults(request: web.Request) -> web.Response:
    try:
        data = json.loads(await request.read() or b"{}")
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        config = FaultConfig.from_json(data)
    except (ValueError, TypeError) as error:
        return error_response(ApiError(400, "BadRequest", message=f"invalid fault config: {error}"))
    request.app[STATE].faults.configure(config)
    return json_response(config.to_json())


async def clear_faults(request: web.Request) -> web.Response:
    request.app[STATE].faults.configure(FaultConfig())
    return json_response(FaultConfig().to_json())


async def get_eviction_failures(request: web.Request) -> web.Response:
    return json_response([f.to_json() for f in request.app[STATE].faults.eviction_failures])


async def set_eviction_failures(request: web.Request) -> web.Response:
    try:
        data = json.loads(await request.read() or b"[]")
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise ValueError("expected a JSON list of objects")
        failures = [EvictionFailure.from_json(item) for item in data]
    except (ValueError, TypeError) as error:
        return error_response(ApiError(400, "BadRequest", message=f"invalid eviction failures: {error}"))
    request.app[STATE].faults.fail_evictions(failures)
    return json_response([f.to_json() for f in failures])


async def clear_eviction_failures(request: web.Request) -> web.Response:
    request.app[STATE].faults.fail_evictions(())
    return json_response([])


async def get_counters(request: web.Request) -> web.Response:
    return json_response(request.app[STATE].counters.snapshot())


async def reset_counters(request: web.Request) -> web.Response:
    counters = request.app[STATE].counters
    counters.reset()
    return json_response(counters.snapshot())


async def load_objects(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        document = yaml.safe_load(await request.read())
        objects = seed.expand_seed(document or {}, store=state.registry.store)
        loaded = seed.load_objects(state.registry, objects)
    except seed.SeedError as error:
        return error_response(ApiError(400, "BadRequest", message=str(error)))
    except ApiError as error:
        return error_response(error)
    except yaml.YAMLError as error:
        return error_response(ApiError(400, "BadRequest", message=f"not YAML or JSON: {error}"))
    return json_response({"loaded": loaded})


async def register_tokens(request: web.Request) -> web.Response:
    try:
        data = json.loads(await request.read() or b"[]")
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise ValueError("expected a JSON list of objects")
        identities = [
            (
                str(item["token"]),
                Identity(
                    username=str(item["username"]),
                    uid=str(item.get("uid") or ""),
                    groups=tuple(str(g) for g in item.get("groups") or ()),
                    extra={str(k): [str(x) for x in v] for k, v in (item.get("extra") or {}).items()},
                    audiences=tuple(str(a) for a in item.get("audiences") or (API_AUDIENCE,)),
                ),
            )
            for item in data
        ]
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        return error_response(ApiError(400, "BadRequest", message=f"invalid tokens: {error!r}"))
    for token, identity in identities:
        request.app[STATE].reviews.register_token(token, identity)
    return json_response({"registered": len(identities)})


async def add_grants(request: web.Request) -> web.Response:
    try:
        data = json.loads(await request.read() or b"[]")
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise ValueError("expected a JSON list of objects")
        grants = [Grant(**{k: str(v) for k, v in item.items()}) for item in data]
    except (ValueError, TypeError) as error:
        return error_response(ApiError(400, "BadRequest", message=f"invalid grants: {error}"))
    for grant in grants:
        request.app[STATE].reviews.grant(grant)
    return json_response({"granted": len(grants)})


async def get_job_outcomes(request: web.Request) -> web.Response:
    jobs = request.app[STATE].registry.jobs
    queued = {node: list(outcomes) for node, outcomes in jobs.outcomes.items() if outcomes}
    return json_response({"outcomes": queued, "run_s": jobs.run_s})


async def add_job_outcomes(request: web.Request) -> web.Response:
    jobs = request.app[STATE].registry.jobs
    try:
        data = json.loads(await request.read() or b"{}")
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        run_s = data.get("run_s", jobs.run_s)
        if not isinstance(run_s, int | float) or run_s < 0:
            raise ValueError(f"run_s must be a non-negative number, got {run_s!r}")
        wanted = [(str(item["node"]), item["outcome"]) for item in data.get("outcomes") or []]
        for _, outcome in wanted:
            if outcome not in OUTCOMES:
                raise ValueError(f"unknown outcome {outcome!r}")
    except (ValueError, TypeError, KeyError) as error:
        return error_response(ApiError(400, "BadRequest", message=f"invalid job outcomes: {error}"))
    jobs.run_s = float(run_s)
    for node, outcome in wanted:
        jobs.queue(node, outcome)
    return await get_job_outcomes(request)


async def clear_job_outcomes(request: web.Request) -> web.Response:
    request.app[STATE].registry.jobs.clear()
    return await get_job_outcomes(request)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/_sim/faults", get_faults)
    app.router.add_post("/_sim/faults", set_faults)
    app.router.add_delete("/_sim/faults", clear_faults)
    app.router.add_get("/_sim/eviction-failures", get_eviction_failures)
    app.router.add_post("/_sim/eviction-failures", set_eviction_failures)
    app.router.add_delete("/_sim/eviction-failures", clear_eviction_failures)
    app.router.add_get("/_sim/counters", get_counters)
    app.router.add_delete("/_sim/counters", reset_counters)
    app.router.add_post("/_sim/objects", load_objects)
    app.router.add_post("/_sim/tokens", register_tokens)
    app.router.add_post("/_sim/grants", add_grants)
    app.router.add_get("/_sim/job-outcomes", get_job_outcomes)
    app.router.add_post("/_sim/job-outcomes", add_job_outcomes)
    app.router.add_delete("/_sim/job-outcomes", clear_job_outcomes)
