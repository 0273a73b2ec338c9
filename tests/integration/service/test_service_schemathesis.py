"""The API against its own OpenAPI document, fuzzed by schemathesis on a real server with
valid keys (an admin key; an approver's for decisions, an intake key for webhooks): no
request makes a server error, and every response matches the schema documented for its
status. Then again with a NUL (in every string parameter and the body) or a lone surrogate
(in the body, the only place one can travel): each is a 4xx problem, never a 5xx. The live
tail is left out: a stream of a waiting run does not end by itself (its own test drives it
to the end)."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from fakes.service_world import World

EXAMPLES = 12
ROLE = {"/v1/approvals/{run_id}/decision": "approver", "/v1/intake/{source}": "intake",
        **{f"/v1/runs/bulk/{a}": "approver" for a in ("settle", "answer", "approve", "reject")}}


def fuzz(world: World, op: Any, role: str, run_id: str, calls: list[int]) -> None:
    """Send ``EXAMPLES`` generated requests to ``op`` with a key of ``role``; a ``run_id``
    in the path is the real run or a missing one."""
    headers = world.headers(role=role)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(), known=st.sampled_from([run_id, "nope"]))
    def run(case: Any, known: str) -> None:
        if case.path_parameters and "run_id" in case.path_parameters:
            case.path_parameters["run_id"] = known
        response = case.call(base_url=world.server.url, headers=headers)
        calls.append(response.status_code)
        case.validate_response(response, checks=[
            not_a_server_error, response_schema_conformance, content_type_conformance,
        ])

    run()


def spoil(case: Any, bad: str) -> bool:
    """Put ``bad`` at the end of every string of ``case``'s path, query and JSON body (a
    surrogate only in the body: a URL cannot carry one); whether anything changed."""
    changed = False
    for params in (case.path_parameters, case.query):
        for name, value in list((params or {}).items()):
            if isinstance(value, str) and bad == "\x00":
                params[name], changed = value + bad, True
            elif isinstance(value, list) and bad == "\x00":
                params[name] = [v + bad if isinstance(v, str) else v for v in value]
                changed = changed or any(isinstance(v, str) for v in value)
    if isinstance(case.body, dict):
        for name, value in list(case.body.items()):
            if isinstance(value, str):
                case.body[name], changed = value + bad, True
    return changed


def fuzz_spoiled(world: World, op: Any, role: str, run_id: str, calls: list[int]) -> None:
    """A few generated requests to ``op``, each spoiled by :func:`spoil`: a 4xx problem."""
    headers = world.headers(role=role)

    @settings(max_examples=3, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(), bad=st.sampled_from(["\x00", "\ud800"]))
    def run(case: Any, bad: str) -> None:
        if case.path_parameters and "run_id" in case.path_parameters:
            case.path_parameters["run_id"] = run_id
        if not spoil(case, bad):
            return
        response = case.call(base_url=world.server.url, headers=headers)
        calls.append(response.status_code)
        assert 400 <= response.status_code < 500, (case.path, response.text)
        assert "application/problem+json" in str(response.headers["content-type"])

    run()


def test_no_server_errors_and_every_response_matches_its_schema(world: World) -> None:
    run_id = world.start()
    world.start("refunds", "INV-2")
    schema = schemathesis.openapi.from_dict(world.http.get("/openapi.json").json())
    tested, calls = 0, []
    for result in schema.get_all_operations():
        op = result.ok()
        if op.path.endswith("/stream"):
            continue
        fuzz(world, op, ROLE.get(op.path, "admin"), run_id, calls)
        tested += 1
    assert tested >= 25
    assert len(calls) >= tested * 3 and any(200 <= c < 300 for c in calls)


def test_nul_and_lone_surrogates_in_generated_requests_are_4xx(world: World) -> None:
    run_id = world.start()
    schema = schemathesis.openapi.from_dict(world.http.get("/openapi.json").json())
    calls: list[int] = []
    for result in schema.get_all_operations():
        op = result.ok()
        if not op.path.endswith("/stream"):
            fuzz_spoiled(world, op, ROLE.get(op.path, "admin"), run_id, calls)
    assert len(calls) >= 30
