"""Redaction (:mod:`underway.redaction`): what a viewer may not see, decided in one place.
The rules on JSON and text; what tools declare and the engine journals with each event
that carries their arguments or results; errors scrubbed when journaled; an agent's run
hidden even as its events arrive one by one (a live tail); log lines filtered."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

import underway as uw
from fakes.sensitive_flows import (
    BAD_PAN,
    CANARIES,
    PAN,
    PHONE,
    TOKEN,
    kyc,
    leaks,
    lookup_customer,
)
from underway import events as ev
from underway.agent import Agent
from underway.models.types import ModelRequest
from underway.redaction import (
    REDACTED,
    Hidden,
    RedactingFilter,
    Redactor,
    RunRedactors,
    redacting_logs,
    scrub,
)
from underway.runner import Runner
from underway.testing import RuleModel, memory_engine, say

HIDDEN = Hidden(frozenset({"pan", "phone"}), frozenset({"api_token"}))


def learned(*values: Any, reveal: bool = False) -> Redactor:
    red = Redactor(reveal=reveal, hidden=HIDDEN)
    for v in values:
        red.learn_values(v)
    return red


def test_a_hidden_field_keeps_its_place_at_any_depth() -> None:
    red = Redactor(hidden=HIDDEN)
    value = {"customer": {"pan": PAN, "contacts": [{"phone": PHONE, "kind": "mobile"}]},
             "api_token": TOKEN, "n": 3}
    assert red.json(value) == {
        "customer": {"pan": REDACTED, "contacts": [{"phone": REDACTED, "kind": "mobile"}]},
        "api_token": REDACTED, "n": 3}


def test_reveal_shows_sensitive_fields_never_secrets() -> None:
    red = learned({"pan": PAN, "api_token": TOKEN}, reveal=True)
    assert red.json({"pan": PAN, "api_token": TOKEN}) == {"pan": PAN, "api_token": REDACTED}
    assert red.text(f"token {TOKEN} for {PAN}") == f"token {REDACTED} for {PAN}"
    assert red.names == frozenset({"api_token"})


def test_a_learned_value_is_hidden_wherever_it_went() -> None:
    red = learned({"pan": PAN, "phone": 919876543210})
    assert red.text(f"PAN {PAN} failed") == f"PAN {REDACTED} failed"
    assert red.json({"copied": PAN, "number": 919876543210, "again": "call 919876543210"}) == {
        "copied": REDACTED, "number": REDACTED, "again": f"call {REDACTED}"}


def test_short_values_are_hidden_only_under_their_names() -> None:
    red = learned({"pan": "no", "phone": 42})
    assert red.json({"answer": "no", "n": 42, "pan": "no"}) == {
        "answer": "no", "n": 42, "pan": REDACTED}


def test_a_patch_through_a_hidden_field_hides_its_value() -> None:
    red = Redactor(hidden=HIDDEN)
    patch = [{"op": "replace", "path": "/customer/phone", "value": "+91 1111"},
             {"op": "add", "path": "/note", "value": "fine"},
             {"op": "add", "path": "/pan~1hist/0", "value": "x"}]
    assert red.json(patch) == [
        {"op": "replace", "path": "/customer/phone", "value": REDACTED},
        {"op": "add", "path": "/note", "value": "fine"},
        {"op": "add", "path": "/pan~1hist/0", "value": "x"}]


def test_a_validation_error_about_a_hidden_field_hides_its_input() -> None:
    red = Redactor(hidden=HIDDEN)
    errors = [{"loc": ["pan"], "input": BAD_PAN, "msg": "bad"},
              {"loc": ["customer"], "input": "C1", "msg": "bad"}]
    assert red.json(errors) == [{"loc": ["pan"], "input": REDACTED, "msg": "bad"},
                                {"loc": ["customer"], "input": "C1", "msg": "bad"}]
    red.learn_values(errors)
    assert red.text(f"input_value='{BAD_PAN}'") == f"input_value='{REDACTED}'"


def test_json_written_in_a_string_is_redacted_inside() -> None:
    red = Redactor(hidden=HIDDEN)
    arguments = json.dumps({"pan": PAN, "customer": "C1"})
    assert json.loads(str(red.json(arguments))) == {"pan": REDACTED, "customer": "C1"}
    assert red.text("[not json") == "[not json"


def test_an_event_keeps_its_facts_and_its_type() -> None:
    started = ev.ToolStarted(key="k", tool="send_sms", index=7, args={"phone": PHONE},
                             args_hash="h", **HIDDEN.declared())
    red = Redactor().learn(started)
    shown = red.event(started)
    assert isinstance(shown, ev.ToolStarted) and shown.index == 7
    assert shown.args == {"phone": REDACTED} and started.args == {"phone": PHONE}
    assert shown.sensitive_fields == ["pan", "phone"] and shown.secret_fields == ["api_token"]
    plain = ev.StepStarted(step="go", attempt=1)
    assert red.event(plain) is plain
    assert Redactor().event(started) is started  # nothing learned, nothing hidden


def test_scrub_removes_what_hidden_fields_hold_from_text() -> None:
    assert scrub(f"no such PAN {PAN}", HIDDEN, {"pan": PAN, "x": "no"}) == \
        f"no such PAN {REDACTED}"
    assert scrub(f"no such PAN {PAN}", Hidden(), {"pan": PAN}) == f"no such PAN {PAN}"


class Inner(BaseModel):
    key: SecretStr


class Args(BaseModel):
    phone: str
    inner: Inner
    token: SecretStr | None = None


@uw.tool(sensitive=("phone",))
async def call(args: Args) -> dict[str, Any]:
    """Call someone."""
    return {}


def test_a_tool_hides_its_sensitive_fields_and_its_secret_typed_ones() -> None:
    assert call.hidden == Hidden(frozenset({"phone"}), frozenset({"key", "token"}))
    assert call.never_traced == {"phone", "key", "token"}
    assert not Hidden() and Hidden.of(object()) == Hidden()


def run_kyc() -> tuple[uw.Engine, str]:
    engine, _ = memory_engine([kyc])
    run_id, _ = engine.start(kyc, {"customer": "C1"})
    asyncio.run(Runner(engine).run_until_idle())
    return engine, run_id


def test_the_engine_journals_what_each_tool_hides_and_scrubs_errors() -> None:
    engine, run_id = run_kyc()
    found = [r.event for r in engine.journal.history("default", run_id)]
    succeeded = next(e for e in found if isinstance(e, ev.ToolSucceeded))
    assert succeeded.sensitive_fields == ["pan", "phone"] and succeeded.secret_fields is None
    asked = next(e for e in found if isinstance(e, ev.ApprovalRequested))
    assert (asked.sensitive_fields, asked.secret_fields) == (["phone"], ["api_token"])
    assert asked.args["phone"] == PHONE  # the journal keeps the values
    failed = next(e for e in found if isinstance(e, ev.ToolFailed))
    assert failed.message == f"PAN {REDACTED} failed the checksum"
    invalid = next(e for e in found if isinstance(e, ev.SchemaValidationFailed))
    assert invalid.sensitive_fields == ["pan", "phone"]
    state = engine.state(run_id).state
    # The schema error names the field and what is wrong with it, never the input.
    assert BAD_PAN not in state["invalid"] and "pan: String should match" in state["invalid"]
    # The engine learned what its log lines must not show.
    assert set(leaks(engine.redactor.text(" ".join(CANARIES)))) == set()


class Quiet(BaseModel):
    pass


quoting: uw.Flow[Quiet, Any] = uw.Flow("quoting", state=Quiet, tools=[lookup_customer])


@quoting.step
async def quote_it(ctx: uw.RunContext[Quiet, Any]) -> Any:
    found = await ctx.call(lookup_customer, {"customer": "C1", "pan": PAN})
    raise RuntimeError(f"cannot text {found.phone}")


def test_a_dead_letter_reason_never_quotes_a_hidden_value() -> None:
    engine, _ = memory_engine([quoting])
    run_id, _ = engine.start(quoting, {})
    asyncio.run(Runner(engine).run_until_idle())
    s = engine.state(run_id)
    assert s.status == "dead" and s.error == f"RuntimeError: cannot text {REDACTED}"


def test_a_pending_request_hides_what_its_tool_hides() -> None:
    engine, run_id = run_kyc()
    request = engine.client.pending_request(run_id)
    assert request is not None and request.sensitive_fields == ("phone",)
    shown = uw.client.redact_request(request)
    assert shown.args == {"phone": REDACTED, "message": "KYC done", "api_token": REDACTED}
    whole = uw.client.redact_request(request, redactor=engine.client.redactor(run_id))
    assert whole.evidence == {"pan": REDACTED, "why": "KYC complete"}
    revealed = uw.client.redact_request(request, reveal=True)
    assert revealed.args == {"phone": PHONE, "message": "KYC done", "api_token": REDACTED}


class Who(BaseModel):
    pan: str


@uw.tool(read_only=True, sensitive=("pan", "phone"))
async def find_phone(args: Who) -> dict[str, Any]:
    """Find a customer's phone number by PAN."""
    return {"phone": PHONE}


def test_an_agents_run_is_hidden_even_event_by_event() -> None:
    def brain(req: ModelRequest) -> Any:
        told = [m.content for m in req.messages if m.role == "tool"]
        if told:
            return say(f"Found {PHONE}.", ("finish", {"result": {"phone": PHONE}}))
        return say(None, ("find_phone", {"pan": PAN}))

    agent = Agent("finder", model=RuleModel(brain), tools=[find_phone], plan=False)
    engine, _ = memory_engine([agent.flow])
    run_id, _ = engine.start(agent.flow, {"goal": "find the customer's phone"})
    asyncio.run(Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "completed"
    history = [r.event for r in engine.journal.history("default", run_id)]
    assert set(leaks(json.dumps([e.model_dump(mode="json") for e in history]))) == {PAN, PHONE}
    selected = next(e for e in history if isinstance(e, ev.ToolSelected))
    assert selected.sensitive_fields == ["pan", "phone"]
    responded = next(e for e in history if isinstance(e, ev.ModelResponded))
    assert responded.sensitive_fields == ["pan", "phone"]
    # As a live tail sees them: each event redacted once learned, before the next arrives.
    tail = Redactor()
    for event in history:
        tail.learn(event)
        shown = json.dumps(tail.event(event).model_dump(mode="json"))
        assert leaks(shown) == [], type(event).__name__


def test_log_lines_pass_through_the_redactor(caplog: pytest.LogCaptureFixture) -> None:
    red = learned({"pan": PAN})
    log = logging.getLogger("underway.worker")
    with caplog.at_level(logging.INFO, logger="underway.worker"), redacting_logs(red):
        log.info("run failed: PAN %s is wrong", PAN)
        try:
            raise ValueError(f"bad {PAN}")
        except ValueError:
            log.exception("step failed")
    log.info("after: %s", PAN)
    first, second = caplog.records[:2]
    assert first.getMessage() == f"run failed: PAN {REDACTED} is wrong"
    assert second.exc_text is not None and PAN not in second.exc_text
    assert REDACTED in second.exc_text
    assert not any(isinstance(f, RedactingFilter) for f in log.filters)


def test_a_run_shown_again_is_learned_from_its_new_events_only() -> None:
    learned_from: list[int] = []
    journal: list[tuple[int, ev.Event]] = [(1, ev.StepStarted(step="go", attempt=1))]

    def events_after(seq: int) -> list[tuple[int, ev.Event]]:
        learned_from.append(seq)
        return [(n, e) for n, e in journal if n > seq]

    runs = RunRedactors(size=1)
    first = runs.redactor("r1", False, events_after)
    assert not first.hides
    journal.append((2, ev.ToolSucceeded(key="k", tool="t", index=0, args_hash="h",
                                        result={"phone": PHONE}, **HIDDEN.declared())))
    second = runs.redactor("r1", False, events_after)
    assert second.json({"to": PHONE}) == {"to": REDACTED} and learned_from == [0, 1]
    first.learn_names(Hidden(frozenset({"other"})))  # a copy: the cache is not taught
    assert "other" not in runs.redactor("r1", False, events_after).names
    assert runs.redactor("r1", True, events_after).json({"to": PHONE}) == {"to": PHONE}
    assert learned_from == [0, 1, 2, 0]
    runs.redactor("r2", False, lambda seq: [])  # the cache holds one run: r1 is forgotten
    runs.redactor("r1", False, events_after)
    assert learned_from[-1] == 0
