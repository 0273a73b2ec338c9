"""Redaction hides exactly what is declared, and nothing more.

A refund tool declares its ``card`` argument sensitive. Before its one valid call, the
step makes the three calls that fail validation in ways whose errors quote more than the
card: the card is missing (pydantic's error quotes the whole arguments as its input), the
card's number is missing (the input is the card), and the card is the wrong type (the
input is the card's value). The valid call is held for a finance approver, who must see
the invoice id and the amount to decide.

Every surface must show the invoice id and the amount and never the card. That covers the
events through the API (as a viewer and as an approver), the approval request, the CLI's
``runs events`` and ``approvals show``, the notice a webhook receives, and the tool
error's text the step saw. The cause was one rule in :mod:`underway.redaction`: an error
about a hidden field hid its whole ``input``, and learned every value in it, even when
the input was the object lacking the field rather than the field's value. On SQLite and
PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from fakes.receivers import Endpoint
from fakes.sensitive_world import wait_for
from fakes.service_world import World
from underway import ToolCallError
from underway.cli import app as cli
from underway.guard.approvals import sign_decision
from underway.guard.approvals.notify import WebhookNotifier
from underway.guard.policy import policy_from_dict
from underway.redaction import REDACTED, Redactor

INVOICE = "INV-REDACT-7731"
AMOUNT = 91234
CARD = "4111-2222-3333-4444"
HOLDER = "Meera Iyer-canary"
WRONG = "card-as-text-9f3e"
CANARIES = (CARD, HOLDER, WRONG)


class Card(BaseModel):
    number: str
    holder: str


class Refund(BaseModel):
    invoice_id: str
    amount: int
    card: Card


@uw.tool(mutating=True, sensitive=("card",))
async def issue_refund(args: Refund) -> dict[str, Any]:
    """Refund an invoice to a card."""
    return {"refund_id": "rf-1", "invoice_id": args.invoice_id}


POLICY = policy_from_dict({"version": "v1", "rules": [
    {"id": "refunds", "tools": ["issue_refund"], "outcome": "require_approval",
     "approver_role": "finance", "expires_in": 3600},
]})

class Nothing(BaseModel):
    pass


flow: uw.Flow[Nothing, Any] = uw.Flow("refund_exact", state=Nothing, policy=POLICY,
                                      tools=[issue_refund])


@flow.step
async def refund(ctx: uw.RunContext[Nothing, Any]) -> Any:
    base = {"invoice_id": INVOICE, "amount": AMOUNT}
    errors = []
    for wrong in ({}, {"card": {"holder": HOLDER}}, {"card": WRONG}):
        try:
            await ctx.call(issue_refund, {**base, **wrong})
        except ToolCallError as exc:
            errors.append(exc.message)
    done = await ctx.call(issue_refund, {**base, "card": {"number": CARD, "holder": HOLDER}})
    return ctx.done({"errors": errors, "refund": done})


def leaks(text: str) -> list[str]:
    return [c for c in CANARIES if c in text]


@pytest.fixture
def world(db_url: str) -> Iterator[tuple[World, Endpoint, str]]:
    w = World(db_url)
    hook = Endpoint()
    w.engine = uw.Engine(w.worker_store, flows=[flow], clock=w.clock,
                         notifier=WebhookNotifier(hook.url))
    r = w.call("POST", "/v1/runs", role="operator", json={"flow": "refund_exact", "input": {}})
    assert r.status_code == 201, r.text
    run_id = str(r.json()["run_id"])
    w.drive()
    wait_for(lambda: hook.received, "the approval notice")
    yield w, hook, run_id
    hook.close()
    w.close()


def test_every_surface_shows_the_invoice_and_hides_only_the_card(
    world: tuple[World, Endpoint, str],
) -> None:
    w, hook, run_id = world
    events = w.call("GET", f"/v1/runs/{run_id}/events", role="viewer")
    assert events.status_code == 200
    assert leaks(events.text) == []
    failed = [e["data"] for e in events.json() if e["type"] == "SchemaValidationFailed"]
    assert len(failed) == 3
    # The missing card's error quotes the arguments that lack it: shown, as they hold no
    # card. The other two quote only the card (or its part), which stays hidden.
    quoted = [json.dumps(data["errors"]) for data in failed]
    assert INVOICE in quoted[0] and str(AMOUNT) in quoted[0], quoted[0]
    assert all(REDACTED in q for q in quoted[1:]), quoted
    asked = next(e["data"] for e in events.json() if e["type"] == "ApprovalRequested")
    assert asked["args"] == {"invoice_id": INVOICE, "amount": AMOUNT, "card": REDACTED}
    detail = w.call("GET", f"/v1/approvals/{run_id}", role="approver")
    assert detail.status_code == 200 and leaks(detail.text) == []
    assert detail.json()["args"]["invoice_id"] == INVOICE
    for args in (["runs", "events", run_id], ["approvals", "show", run_id]):
        out = CliRunner().invoke(cli, [*args, "--tenant", "acme", "--db", w.store_url])
        assert out.exit_code == 0, out.output
        assert INVOICE in out.stdout and leaks(out.stdout) == [], args
    [(_, body)] = hook.received
    notice = json.loads(body)
    assert notice["args"]["invoice_id"] == INVOICE and notice["args"]["card"] == REDACTED


def test_the_errors_the_step_saw_name_the_place_never_the_card(
    world: tuple[World, Endpoint, str],
) -> None:
    w, _, run_id = world
    key = w.approver("acme", "fin", "finance")
    [pending] = w.client_pending(run_id)
    decision = sign_decision(
        key, request_id=pending["request_id"], run_id=run_id, tenant_id="acme",
        tool="issue_refund", args_hash=pending["args_hash"], decision="approve",
        expires_at=pending["expires_at"], approver_id="fin",
    ).model_dump(mode="json")
    r = w.call("POST", f"/v1/approvals/{run_id}/decision", role="approver", json=decision)
    assert r.status_code == 202, r.text
    w.drive()
    state = w.engine.client.state(run_id, tenant_id="acme")
    assert state.status == "completed", state.error
    # The step ran again after the approval: its failed calls were read back from the
    # journal, with the same text the worker raised (one function gives both).
    errors = state.result["errors"]
    assert [e.split(": ", 2)[1] for e in errors] == ["card", "card.number", "card"], errors
    assert [leaks(e) for e in errors] == [[], [], []]


def test_a_redactor_learns_no_value_from_an_error_about_a_missing_field() -> None:
    """The unit of the rule: a ``missing`` error's input is the object that lacks the field;
    any other error's input is the field's value."""
    missing = {"type": "missing", "loc": ["card"], "msg": "Field required",
               "input": {"invoice_id": INVOICE, "amount": AMOUNT}}
    nested = {"type": "missing", "loc": ["card", "number"], "msg": "Field required",
              "input": {"holder": HOLDER}}
    wrong = {"type": "model_type", "loc": ["card"], "msg": "Input should be an object",
             "input": WRONG}
    r = Redactor()
    r.learn_names(issue_refund.hidden)
    r.learn_values({"errors": [missing, nested, wrong]})
    shown = r.json({"errors": [missing, nested, wrong], "note": f"{INVOICE} {HOLDER} {WRONG}"})
    assert shown["errors"][0]["input"] == {"invoice_id": INVOICE, "amount": AMOUNT}
    assert shown["errors"][1]["input"] == REDACTED
    assert shown["errors"][2]["input"] == REDACTED
    assert shown["note"] == f"{INVOICE} {REDACTED} {REDACTED}"
