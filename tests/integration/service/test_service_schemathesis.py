"""The API against its own OpenAPI document, fuzzed by schemathesis on a real server with
valid keys (an admin key; an approver's for decisions, an intake key for webhooks): no
request makes a server error, and every response matches the schema documented for its
status. The live tail is left out: a stream of a waiting run does not end by itself (its
own test drives it to the end)."""

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
ROLE = {"/v1/approvals/{run_id}/decision": "approver", "/v1/intake/{source}": "intake"}


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


def test_no_server_errors_and_every_response_matches_its_schema(world: World) -> None:
    run_id = world.start()
    world.start("refunds", "INV-2")
    schema = schemathesis.openapi.from_dict(world.http.get("/openapi.json").json())
    tested, calls = 0, []
    for result in schema.get_all_operations():
        op = result.ok()
        if op.path.endswith("/events/stream"):
            continue
        fuzz(world, op, ROLE.get(op.path, "admin"), run_id, calls)
        tested += 1
    assert tested >= 25
    assert len(calls) >= tested * 3 and any(200 <= c < 300 for c in calls)
