"""The approval a person decides on reads like the decision, on SQLite and PostgreSQL:
a one-line summary from the tool's template or the step, the money in the currency's
locale with the account it leaves, evidence and risks first, and what each run waits on in
words, through the HTTP API, the CLI and the console's server-rendered pages. Deciding and
answering from Python (``Client.decide``, ``Client.answer``) reach the same runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

import underway as uw
from fakes.console_browser import sign_in
from fakes.procurement_flows import FLOWS as DESK
from fakes.service_world import FLOWS, World
from underway.cli import app as cli_app
from underway.errors import ConfigurationError

ORDER = {"po": "PO-7", "supplier": {"name": "Shakti Steel"}, "amount": "232000.00",
         "currency": "INR", "from_account": "HDFC-OPS-0042"}
SUMMARY = "Pay ₹2,32,000.00 to Shakti Steel for PO-7"
MOVES = "moves ₹2,32,000.00 out of HDFC-OPS-0042"


@pytest.fixture
def desk(db_url: str) -> Iterator[World]:
    w = World(db_url)
    w.engine = uw.Engine(w.worker_store, flows=[*FLOWS, *DESK], clock=w.clock)
    yield w
    w.close()


def start(world: World, flow: str, data: dict[str, Any]) -> str:
    r = world.call("POST", "/v1/runs", role="operator", json={"flow": flow, "input": data})
    assert r.status_code == 201, r.text
    world.drive()
    return str(r.json()["run_id"])


def cli(world: World, *args: str) -> str:
    result = CliRunner().invoke(cli_app, [*args, "--tenant", "acme", "--db", world.store_url])
    assert result.exit_code == 0, result.stdout + result.stderr
    return result.stdout


def test_a_held_payment_reads_like_the_decision_everywhere(desk: World) -> None:
    world = desk
    paid = start(world, "procure", ORDER)
    dollars = start(world, "procure", {**ORDER, "po": "PO-8", "amount": "1234.5",
                                       "currency": "USD", "from_account": "CITI-US-9"})
    renew = start(world, "lease", {"site": "3 Park Street"})

    # The API: the request's summary and money, and the run's waiting in words.
    r = world.call("GET", f"/v1/approvals/{paid}", role="viewer").json()
    assert (r["summary"], r["moves"]) == (SUMMARY, MOVES)
    assert r["money"]["currency"] == "INR" and r["money"]["direction"] == "out"
    assert Decimal(r["money"]["amount"]) == Decimal("232000")
    assert r["money"]["account"] == "HDFC-OPS-0042"
    r = world.call("GET", f"/v1/approvals/{dollars}", role="viewer").json()
    assert (r["summary"], r["moves"]) == ("Pay $1,234.50 to Shakti Steel for PO-8",
                                          "moves $1,234.50 out of CITI-US-9")
    # The step's own summary wins over the tool's (none here), on one line.
    r = world.call("GET", f"/v1/approvals/{renew}", role="viewer").json()
    assert r["summary"] == "Renew the lease of 3 Park Street for three years"
    assert r["moves"] is None and r["money"] is None
    listed = {p["run_id"]: p["summary"]
              for p in world.call("GET", "/v1/approvals", role="viewer").json()}
    assert listed[paid] == SUMMARY
    run = world.call("GET", f"/v1/runs/{paid}", role="viewer").json()
    assert run["waiting_signal"] == "underway.approval"  # the machine's name stays
    assert run["waiting"] == run["waiting_on"]["text"] == "approval by procurement"
    assert run["waiting_on"]["request"]["summary"] == SUMMARY
    page = world.call("GET", "/v1/runs", role="viewer").json()["runs"]
    assert {p["run_id"]: p["waiting"] for p in page}[paid] == "approval by procurement"

    # The CLI: approvals ls and show, runs ls.
    out = cli(world, "approvals", "ls")
    [line] = [x for x in out.splitlines() if x.startswith(paid)]
    assert SUMMARY in line and MOVES in line and "procurement" in line
    out = cli(world, "approvals", "show", paid)
    assert out.splitlines()[:2] == [f"summary:       {SUMMARY}", f"money:         {MOVES}"]
    assert out.index("goods_received") < out.index("a payment cannot be recalled") \
        < out.index("call tool 'pay_supplier'")
    listed_json = json.loads(cli(world, "approvals", "ls", "--json"))
    assert {p["run_id"]: p["moves"] for p in listed_json}[dollars] \
        == "moves $1,234.50 out of CITI-US-9"
    out = cli(world, "runs", "ls", "--wide")
    [line] = [x for x in out.splitlines() if x.startswith(paid)]
    assert "waiting on approval by procurement" in line
    assert "status   waiting - on approval by procurement" in cli(world, "runs", "show", paid)

    # The console: the inbox row, the request page (evidence and risks first), the runs.
    with sign_in(world, role="approver") as browser:
        inbox = browser.get("/approvals").text
        row = inbox.split(f'<tr data-run="{paid}">', 1)[1].split("</tr>", 1)[0]
        assert SUMMARY in row and MOVES in row and "procurement" in row
        page = browser.get(f"/approvals/{paid}").text
        runs = browser.get("/runs").text
        run_page = browser.get(f"/runs/{paid}").text
    assert f'<span id="summary">{SUMMARY}</span>' in page
    assert f'<p class="moves" id="moves">This call {MOVES}.</p>' in page
    assert page.index('id="evidence"') < page.index('id="risks"') \
        < page.index('id="policy-rule"') < page.index('id="args"')
    assert "on approval by procurement" in runs
    assert f"approval by procurement: {SUMMARY}" in " ".join(run_page.split())


def test_a_summary_quoting_a_sensitive_argument_is_redacted_like_it(desk: World) -> None:
    world = desk
    run_id = start(world, "expenses", {"payee": "Meera Krishnan", "amount": "4500"})
    hidden = world.call("GET", f"/v1/approvals/{run_id}", role="viewer").json()
    assert hidden["summary"] == "Reimburse [redacted] ₹4,500.00"
    assert hidden["args"]["payee"] == "[redacted]" and hidden["moves"] == "pays out ₹4,500.00"
    shown = world.call("GET", f"/v1/approvals/{run_id}", role="approver",
                       params={"reveal": "true"}).json()
    assert shown["summary"] == "Reimburse Meera Krishnan ₹4,500.00"
    with sign_in(world, role="viewer") as browser:
        inbox = browser.get("/approvals").text
    assert "Meera" not in inbox and "Reimburse [redacted] ₹4,500.00" in inbox
    assert "Meera" not in cli(world, "approvals", "ls")


def test_deciding_and_answering_from_python(desk: World) -> None:
    world = desk
    key = world.approver("acme", "pat", "procurement")
    client = uw.Client(world.store, clock=world.clock)
    paid = start(world, "procure", ORDER)
    asked = start(world, "restock", {"sku": "STEEL-8"})
    assert client.waiting_on(client.get_run(asked, tenant_id="acme")) \
        == "an answer from procurement"
    question = world.call("GET", f"/v1/approvals/{asked}", role="viewer").json()
    assert (question["kind"], question["summary"], question["moves"]) == (
        "question", "Which warehouse restocks STEEL-8?", None)

    # The wrong kind, or a key not registered for the approver, is refused up front.
    with pytest.raises(ConfigurationError, match="waits for an approval, not an answer"):
        client.answer(paid, "B", key=key, approver_id="pat", tenant_id="acme")
    with pytest.raises(ConfigurationError, match="waits for an answer, not an approval"):
        client.decide(asked, "approve", key=key, approver_id="pat", tenant_id="acme")
    with pytest.raises(ConfigurationError, match="not the one registered for approver 'pat'"):
        client.decide(paid, "approve", key=Ed25519PrivateKey.generate(), approver_id="pat",
                      tenant_id="acme")
    assert world.store.pending_signals("acme", paid) == []

    decision = client.decide(paid[:8], "approve", key=key, approver_id="pat",
                             comment="goods received", tenant_id="acme")
    answer = client.answer(asked, {"warehouse": "B"}, key=key, approver_id="pat",
                           tenant_id="acme")
    assert (decision.decision, answer.decision) == ("approve", "answer")
    world.drive()
    assert client.get_run(paid, tenant_id="acme").status == "completed"
    done = client.state(asked, tenant_id="acme")
    assert done.status == "completed" and done.result == {"warehouse": {"warehouse": "B"}}
    [granted] = [e.event for e in client.history(paid, tenant_id="acme")
                 if isinstance(e.event, uw.events.ApprovalGranted)]
    assert granted.decision == decision.model_dump(mode="json")
    assert client.waiting_on(client.get_run(paid, tenant_id="acme")) is None
