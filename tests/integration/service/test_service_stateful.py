"""The API fuzzed statefully by schemathesis on a real server: its state machine follows
the OpenAPI document's links, so the id a response names is used by the next call (a run
started, then read, signalled, cancelled, audited; a key issued, then revoked; a subject's
consent recorded, then read; a webhook secret set, then used). No call makes a server
error, and every response matches the schema documented for its status. The calls did
chain: the test fails unless calls that followed a link carried ids earlier responses
named. The live tail is left out: a stream of a waiting run does not end by itself."""

from __future__ import annotations

from collections import Counter
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.errors import FlakyStrategyDefinition
from hypothesis.stateful import get_state_machine_test
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from fakes.service_world import World
from underway.apikeys import issue_key

ROLE = {"/v1/approvals/{run_id}/decision": "approver", "/v1/intake/{source}": "intake"}
IDS = ("run_id", "key_id", "approver_id", "source", "subject", "next_cursor")
SCENARIOS = 25
STEPS = 25
RUNS = 8
"""Runs of the state machine at most: it stops once it made enough calls and followed
each of :data:`LINKED` to an answer (the draws are random, and more operations make any
one chain rarer)."""
LINKED = frozenset({"run_id", "key_id", "subject"})
"""The values the document's links must be seen to carry from one answer to a call that
succeeds."""


def covered(chained: Counter[tuple[str, int]]) -> set[str]:
    """The linked values that some call carried to a 2xx answer."""
    return {name for name, status in chained if 200 <= status < 300}


def named(response: Any) -> set[str]:
    """The ids a 2xx JSON ``response`` names at its top level."""
    if not 200 <= response.status_code < 300 or "json" not in str(
            response.headers.get("content-type")):
        return set()
    body = response.json()
    if not isinstance(body, dict):
        return set()
    return {str(body[name]) for name in IDS if body.get(name) is not None}


def test_linked_calls_make_no_server_error_and_match_their_schemas(world: World) -> None:
    schema = schemathesis.openapi.from_dict(world.http.get("/openapi.json").json()).exclude(
        path_regex=r"/stream$")
    seen: set[str] = set()
    chained: Counter[tuple[str, int]] = Counter()
    calls: list[int] = []
    failures: list[str] = []

    class Machine(schema.as_state_machine()):
        def setup(self) -> None:
            # Each scenario in a tenant of its own: what earlier ones stored does not change
            # its answers, so a replayed scenario mostly draws the same next steps.
            self.tenant = f"fuzz-{len(world.token)}"
            world.token[self.tenant] = {
                role: issue_key(world.store, tenant_id=self.tenant, role=role, name=role,
                                now=world.clock.now()).token
                for role in ("admin", *ROLE.values())}

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            role = ROLE.get(case.operation.path, "admin")
            return {"base_url": world.server.url, "headers": world.headers(self.tenant, role)}

        def step(self, input: Any) -> Any:
            output = super().step(input)
            status = output.response.status_code
            calls.append(status)
            # Only the document's links count, not the ones schemathesis guesses itself.
            link = input.transition
            if link is not None and not link.is_inferred:
                filled = {name for params in link.parameters.values() for name in params}
                case = input.case
                for name, value in {**(case.path_parameters or {}),
                                    **(case.query or {})}.items():
                    if name in filled and isinstance(value, str) and value in seen:
                        chained[(name, status)] += 1
            seen.update(named(output.response))
            return output

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None,
                              **kwargs: Any) -> None:
            try:
                case.validate_response(response, checks=[
                    not_a_server_error, response_schema_conformance, content_type_conformance,
                ], transport_kwargs=kwargs)
            except Exception as exc:
                failures.append(f"{case.operation.label}: {exc}")
                raise

    for attempt in range(RUNS):
        # A seed of its own for each run: under a derandomized profile (Hypothesis loads
        # one by itself on a CI machine) every run would otherwise draw the same scenarios,
        # and a run that followed no link to an answer would be repeated, not varied.
        machine = seed(attempt)(get_state_machine_test(Machine, settings=settings(
            max_examples=SCENARIOS, stateful_step_count=STEPS, deadline=None,
            database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))))
        try:
            machine()
        except FlakyStrategyDefinition:
            # A scenario Hypothesis replayed drew other steps than the first time (a real
            # server's answers are not a pure function of the calls): that run ends, as in
            # schemathesis's own runner, and another starts. A failed check is recorded
            # in failures before any replay, so none is lost.
            assert not failures, failures
            continue
        if len(calls) >= SCENARIOS * 5 and covered(chained) >= LINKED:
            break
    assert not failures, failures
    assert len(calls) >= SCENARIOS * 5
    assert sum(chained.values()) >= 10, chained
    assert covered(chained) >= LINKED, chained
