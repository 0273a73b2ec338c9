"""Consent at call time: a rule ``require_consent = "marketing"`` lets a tool run only while
the run's data subject consents to marketing, read from the consent store at each call —
so a withdrawal after the run started stops its next call, journaled with the rule and the
reason, and the tool never runs. Another purpose's consent is another matter. On memory,
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.errors import ToolCallError
from underway.guard.policy import Policy, Rule
from underway.store.base import Store

SENT: list[tuple[str, str]] = []
"""Every execution of the tools below: (tool, to)."""


@uw.tool(idempotent=True)
async def send_offer(args: Any) -> Any:
    SENT.append(("send_offer", args["to"]))
    return {"sent": True}


@uw.tool(idempotent=True)
async def send_notice(args: Any) -> Any:
    SENT.append(("send_notice", args["to"]))
    return {"sent": True}


class Outcomes(BaseModel):
    offers: list[str] = []
    notices: list[str] = []


class To(BaseModel):
    to: str


flow: uw.Flow[Outcomes, To] = uw.Flow("campaign", state=Outcomes, input=To,
                                      tools=[send_offer, send_notice], signals=["next"])


async def attempt(ctx: uw.RunContext[Outcomes, To], tool: uw.Tool, into: list[str]) -> None:
    try:
        await ctx.call(tool, {"to": ctx.input.to})
        into.append("sent")
    except ToolCallError as exc:
        into.append(f"refused: {exc.error_type}")


@flow.step
async def first(ctx: uw.RunContext[Outcomes, To]) -> uw.flow.Next:
    await attempt(ctx, send_offer, ctx.state.offers)
    await attempt(ctx, send_notice, ctx.state.notices)
    return ctx.wait("next", then=second)


@flow.step
async def second(ctx: uw.RunContext[Outcomes, To]) -> uw.flow.Next:
    await attempt(ctx, send_offer, ctx.state.offers)
    await attempt(ctx, send_notice, ctx.state.notices)
    return ctx.done(None)


POLICY = Policy("consent-v1", [
    Rule("marketing-needs-consent", tools=["send_offer"], require_consent="marketing",
         outcome="deny", reason="offers need marketing consent"),
    Rule("notices-need-service-consent", tools=["send_notice"], require_consent="service",
         outcome="deny"),
])


@pytest.fixture(params=["memory", "sqlite_url",
                        pytest.param("pg_url", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    url = "memory://" if request.param == "memory" else request.getfixturevalue(request.param)
    s = uw.connect(url)
    SENT.clear()
    yield s
    s.close()


def drive(engine: uw.Engine) -> None:
    asyncio.run(uw.Runner(engine).run_until_idle())


def decisions(engine: uw.Engine, run_id: str) -> list[tuple[str, str, str | None, str]]:
    return [(r.event.tool, r.event.decision, r.event.rule_id, r.event.reason)
            for r in engine.journal.history("acme", run_id)
            if isinstance(r.event, ev.PolicyDecided)]


def test_granted_runs_and_a_withdrawal_mid_run_stops_the_next_call(store: Store) -> None:
    engine = uw.Engine(store, flows=[flow], policy=POLICY)
    client = uw.Client(store)
    client.grant_consent("cust-42", "marketing", by="crm", reference="CM-1", tenant_id="acme")
    client.grant_consent("cust-42", "service", by="crm", tenant_id="acme")
    run_id, _ = client.start("campaign", {"to": "cust-42"}, tenant_id="acme",
                             subject="cust-42", purpose="marketing", consent="CM-1")
    drive(engine)
    assert engine.state(run_id, tenant_id="acme").status == "waiting"
    assert SENT == [("send_offer", "cust-42"), ("send_notice", "cust-42")]

    client.withdraw_consent("cust-42", "marketing", by="cust-42 via app", tenant_id="acme")
    client.signal(run_id, "next", tenant_id="acme")
    drive(engine)

    s = engine.state(run_id, tenant_id="acme")
    assert s.status == "completed"
    assert s.state["offers"] == ["sent", "refused: PolicyDenied"]
    assert s.state["notices"] == ["sent", "sent"], "consent to another purpose still holds"
    assert SENT == [("send_offer", "cust-42"), ("send_notice", "cust-42"),
                    ("send_notice", "cust-42")], "the denied offer never ran"
    found = decisions(engine, run_id)
    assert [(t, d, r) for t, d, r, _ in found] == [
        ("send_offer", "allow", None), ("send_notice", "allow", None),
        ("send_offer", "deny", "marketing-needs-consent"), ("send_notice", "allow", None),
    ]
    reason = found[2][3]
    assert reason.startswith("offers need marketing consent: subject 'cust-42' withdrew "
                             "consent to 'marketing' at ")
    assert "recorded by cust-42 via app" in reason
    [refused] = [r.event for r in engine.journal.history("acme", run_id)
                 if isinstance(r.event, ev.ToolRefused)]
    assert (refused.tool, refused.cause) == ("send_offer", "policy_denied")
    assert refused.reason == reason
    [started] = [r.event for r in engine.journal.history("acme", run_id)
                 if isinstance(r.event, ev.RunStarted)]
    assert (started.subject, started.purpose, started.consent) == (
        "cust-42", "marketing", "CM-1")


def test_without_consent_recorded_the_call_is_denied(store: Store) -> None:
    engine = uw.Engine(store, flows=[flow], policy=POLICY)
    client = uw.Client(store)
    client.grant_consent("cust-7", "service", by="crm", tenant_id="acme")
    client.grant_consent("cust-9", "marketing", by="crm", tenant_id="acme")
    client.grant_consent("cust-7", "marketing", by="crm", tenant_id="globex")
    run_id, _ = client.start("campaign", {"to": "cust-7"}, tenant_id="acme",
                             subject="cust-7")
    drive(engine)
    s = engine.state(run_id, tenant_id="acme")
    assert (s.state["offers"], s.state["notices"]) == (["refused: PolicyDenied"], ["sent"])
    assert SENT == [("send_notice", "cust-7")]
    [denied] = [d for d in decisions(engine, run_id) if d[1] == "deny"]
    assert denied == ("send_offer", "deny", "marketing-needs-consent",
                      "offers need marketing consent: subject 'cust-7' has not consented "
                      "to 'marketing'")


def test_a_run_without_a_subject_has_nobody_s_consent(store: Store) -> None:
    engine = uw.Engine(store, flows=[flow], policy=POLICY)
    run_id, _ = engine.start(flow, {"to": "someone"}, tenant_id="acme")
    drive(engine)
    s = engine.state(run_id, tenant_id="acme")
    assert s.state["offers"] == s.state["notices"] == ["refused: PolicyDenied"]
    assert SENT == []
    reasons = {r for _, d, _, r in decisions(engine, run_id) if d == "deny"}
    assert reasons == {
        "offers need marketing consent: the run names no data subject, so nobody "
        "consented to 'marketing'",
        "rule 'notices-need-service-consent' requires consent to 'service': the run names "
        "no data subject, so nobody consented to 'service'",
    }


def test_consent_granted_again_lets_the_next_call_run(store: Store) -> None:
    engine = uw.Engine(store, flows=[flow], policy=POLICY)
    client = uw.Client(store)
    client.withdraw_consent("cust-1", "marketing", by="crm", tenant_id="acme")
    client.grant_consent("cust-1", "service", by="crm", tenant_id="acme")
    run_id, _ = client.start("campaign", {"to": "cust-1"}, tenant_id="acme", subject="cust-1")
    drive(engine)
    client.grant_consent("cust-1", "marketing", by="crm", reference="CM-2", tenant_id="acme")
    client.signal(run_id, "next", tenant_id="acme")
    drive(engine)
    s = engine.state(run_id, tenant_id="acme")
    assert s.state["offers"] == ["refused: PolicyDenied", "sent"]
    assert [h.state for h in client.consent_history("cust-1", purpose="marketing",
                                                    tenant_id="acme")] == [
        "withdrawn", "granted"]


class Nothing(BaseModel):
    pass


child: uw.Flow[Nothing, Any] = uw.Flow("child", state=Nothing, tools=[send_offer])


@child.step
async def child_go(ctx: uw.RunContext[Nothing, Any]) -> uw.flow.Next:
    await ctx.call(send_offer, {"to": "child"})
    return ctx.done(None)


parent: uw.Flow[Nothing, Any] = uw.Flow("parent", state=Nothing)


@parent.step
async def parent_go(ctx: uw.RunContext[Nothing, Any]) -> uw.flow.Next:
    outcome = await ctx.wait_for(await ctx.start(child, None, key="c"))
    return ctx.done(outcome.status)


def test_a_child_run_inherits_subject_purpose_and_consent(store: Store) -> None:
    engine = uw.Engine(store, flows=[parent, child], policy=POLICY)
    engine.client.grant_consent("cust-5", "marketing", by="crm", tenant_id="acme")
    run_id, _ = engine.start(parent, None, tenant_id="acme", subject="cust-5",
                             purpose="marketing", consent="CM-5")
    drive(engine)
    assert engine.state(run_id, tenant_id="acme").result == "completed"
    [kid] = engine.client.children(run_id, tenant_id="acme")
    row = store.get_run("acme", kid.run_id)
    assert row is not None and (row.subject, row.purpose) == ("cust-5", "marketing")
    s = engine.state(kid.run_id, tenant_id="acme")
    assert (s.subject, s.purpose, s.consent) == ("cust-5", "marketing", "CM-5")
    assert SENT == [("send_offer", "child")]
    assert {r.run_id for r in store.runs_of_subject("acme", "cust-5")} == {run_id, kid.run_id}
