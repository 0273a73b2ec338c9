"""Run labels end to end on SQLite and PostgreSQL: set at start and by the flow
(``ctx.label``), journaled, and the index always what the journal says; passed to a child
and a fork as they stood; given again by a replay; mapped from an intake event; hidden
where sensitive; gone after an erasure; and refused, naming the label, on bad input."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from insider import insider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.clock import ManualClock
from underway.errors import InvalidInput
from underway.flow import Next
from underway.journal.projection import stored_labels
from underway.journal.state import RunState, fold
from underway.lineage import Lineage
from underway.ops.audit import verify
from underway.ops.replay import replay_run
from underway.privacy.erasure import erase_subject
from underway.redaction import REDACTED, Redactor
from underway.runner import Runner
from underway.scheduling.intake import IntakeError, IntakeEvent, Routes, StartFlow, intake
from underway.telemetry import Tracing

TENANT = "acme"


class Order(BaseModel):
    sku: str = "A-7"
    qty: int = 1
    child: str = ""
    bad: str = ""


class Seen(BaseModel):
    child: str = ""


def flows() -> list[uw.Flow[Any, Any]]:
    order: uw.Flow[Seen, Order] = uw.Flow("order", state=Seen, input=Order)
    leaf: uw.Flow[Seen, Order] = uw.Flow("leaf", state=Seen, input=Order)

    @order.step(start=True)
    async def pick(ctx: uw.RunContext[Seen, Order]) -> Next:
        if ctx.input.bad:
            ctx.label(**{ctx.input.bad: 1})
        ctx.label(stage="picked", qty=ctx.input.qty)
        # The same value again journals nothing.
        ctx.label(stage="picked")
        return ctx.goto(pack)

    @order.step
    async def pack(ctx: uw.RunContext[Seen, Order]) -> Next:
        ctx.label(stage="packed", weight=2.5, fragile=True)
        ctx.label(patient="Asha Rao", sensitive=True)
        if ctx.input.child:
            lineage = Lineage(labels={"sku": "B-1"}) if ctx.input.child == "other" else None
            ctx.state.child = await ctx.start(leaf, {"qty": 9}, lineage=lineage)
            await ctx.wait_for(ctx.state.child)
        return ctx.done({})

    @leaf.step(start=True)
    async def ship(ctx: uw.RunContext[Seen, Order]) -> Next:
        ctx.label(leg="child")
        return ctx.done({})

    return [order, leaf]


class App:
    def __init__(self, url: str) -> None:
        self.flows = flows()
        self.store = uw.connect(url)
        self.engine = uw.Engine(self.store, flows=self.flows, clock=ManualClock(1.7e9))
        self.client = uw.Client(self.store)

    def start(self, **input: Any) -> str:
        run_id, _ = self.engine.start("order", input, tenant_id=TENANT,
                                      labels={"sku": input.get("sku", "A-7"), "region": "south"},
                                      subject="cust-1")
        asyncio.run(Runner(self.engine).run_until_idle())
        return run_id

    def labels(self, run_id: str, reveal: bool = True) -> dict[str, Any]:
        return self.client.run_labels([run_id], tenant_id=TENANT, reveal=reveal).get(run_id, {})

    def state(self, run_id: str) -> RunState:
        return self.engine.state(run_id, tenant_id=TENANT)

    def found(self, **labels: Any) -> list[str]:
        return sorted(r.run_id for r in self.client.list_runs(tenant_id=TENANT,
                                                              labels=labels).runs)


@pytest.fixture
def app(db_url: str) -> App:
    return App(db_url)


FINAL = {"sku": "A-7", "region": "south", "stage": "packed", "qty": 1, "weight": 2.5,
         "fragile": True, "patient": "Asha Rao"}


def test_the_index_is_what_the_journal_says(app: App) -> None:
    run_id = app.start()
    assert app.labels(run_id) == FINAL
    assert [type(app.labels(run_id)[k]) for k in ("qty", "weight", "fragile")] == [
        int, float, bool]
    # Folding the journal again gives the very rows the index holds.
    events = app.engine.journal.history(TENANT, run_id)
    rebuilt = fold(events, start=RunState(tenant_id=TENANT, run_id=run_id))
    assert stored_labels(rebuilt.lineage_record) == \
        app.store.run_labels(TENANT, [run_id])[run_id]
    labeled = [r.event for r in events if isinstance(r.event, ev.RunLabeled)]
    # ctx.label(stage="picked") twice journaled once.
    assert [e.labels for e in labeled] == [
        {"qty": 1, "stage": "picked"}, {"fragile": True, "stage": "packed", "weight": 2.5},
        {"patient": "Asha Rao"}]
    assert app.found(stage="packed", region="south") == [run_id]
    assert app.found(stage="picked") == []
    assert app.found(weight=2.5, fragile=True) == [run_id]


def test_a_child_inherits_the_labels_its_parent_has_when_it_starts(app: App) -> None:
    parent = app.start(child="same")
    child = app.state(parent).children and next(iter(app.state(parent).children))
    assert child
    assert app.labels(child) == {**FINAL, "leg": "child"}
    assert app.state(child).lineage.sensitive_labels == ("patient",)
    assert app.labels(child, reveal=False)["patient"] == REDACTED
    # A child started with a label of its own keeps it over the parent's.
    other = app.start(child="other")
    other_child = next(iter(app.state(other).children))
    assert app.labels(other_child)["sku"] == "B-1"
    assert app.found(leg="child", sku="B-1") == [other_child]


def test_a_fork_has_the_labels_its_parent_had_at_the_fork(app: App) -> None:
    run_id = app.start()
    events = app.engine.journal.history(TENANT, run_id)
    first_label = next(r.seq for r in events if isinstance(r.event, ev.RunLabeled))
    early = app.client.fork(run_id, at_seq=first_label, by="ops", tenant_id=TENANT)
    assert app.labels(early.run_id) == {"sku": "A-7", "region": "south", "stage": "picked",
                                        "qty": 1}
    late = app.client.fork(run_id, at_seq=events[-1].seq, by="ops", step="pack",
                           tenant_id=TENANT)
    assert app.labels(late.run_id) == FINAL
    assert app.labels(late.run_id, reveal=False)["patient"] == REDACTED


def test_a_replay_sets_the_same_labels(app: App) -> None:
    run_id = app.start()
    result = asyncio.run(replay_run(app.store, run_id, flows=flows(), tenant_id=TENANT))
    replayed = fold(result.replay_events, start=RunState(tenant_id=TENANT, run_id=run_id))
    assert replayed.lineage.labels == FINAL


def test_a_sensitive_label_is_hidden_in_the_events_shown(app: App) -> None:
    run_id = app.start()
    events = [r.event for r in app.engine.journal.history(TENANT, run_id)]
    hide = Redactor().learn(events)
    shown = [hide.event(e).model_dump_json() for e in events]
    assert not any("Asha Rao" in s for s in shown)
    assert hide.text("called about Asha Rao") == f"called about {REDACTED}"
    assert app.labels(run_id, reveal=False)["patient"] == REDACTED
    revealed = Redactor(reveal=True).learn(events)
    assert any("Asha Rao" in revealed.event(e).model_dump_json() for e in events)


def test_erasure_removes_the_subjects_labels(app: App) -> None:
    run_id = app.start()
    assert app.found(patient="Asha Rao") == [run_id]
    erase_subject(app.store, "cust-1", by="dpo", reason="request 7", tenant_id=TENANT)
    assert app.labels(run_id) == {}
    assert app.found(patient="Asha Rao") == []
    assert app.found(sku="A-7") == []


def test_intake_maps_event_fields_to_labels(app: App) -> None:
    route = StartFlow("order", labels_from={"sku": "payload.sku", "customer": "entity_id",
                                            "absent": "payload.nothing"},
                      sensitive_labels=("customer",))
    routes = Routes({"order.placed": route})

    def event(key: str, payload: dict[str, Any]) -> IntakeEvent:
        return IntakeEvent(tenant_id=TENANT, entity_id="cust-9", event_type="order.placed",
                           occurred_at="2026-01-01T00:00:00Z", source="shop",
                           idempotency_key=key, payload=payload)

    done = intake(app.engine, event("e1", {"sku": "C-3", "qty": 2}), routes)
    assert done.run_id is not None
    assert app.labels(done.run_id) == {"sku": "C-3", "customer": "cust-9"}
    assert app.labels(done.run_id, reveal=False)["customer"] == REDACTED
    with pytest.raises(IntakeError, match="label 'sku'"):
        intake(app.engine, event("e2", {"sku": {"nested": 1}, "qty": 2}), routes)
    with pytest.raises(IntakeError, match="labels_from"):
        StartFlow("order", labels_from={"sku": ""})
    with pytest.raises(IntakeError, match="bad label name"):
        StartFlow("order", labels_from={"9sku": "payload.sku"})
    assert app.found(sku="C-3") == [done.run_id]


def test_bad_labels_are_refused_naming_the_label(app: App) -> None:
    for labels, named in (({"1sku": "A"}, "1sku"), ({"sku": "x" * 201}, "sku"),
                          ({"sku": float("nan")}, "sku"), ({"sku": ["A"]}, "sku"),
                          ({f"k{i}": i for i in range(21)}, "21 labels")):
        with pytest.raises(InvalidInput, match=named):
            app.engine.start("order", {}, tenant_id=TENANT, labels=labels)
    assert app.client.list_runs(tenant_id=TENANT).runs == []
    # A flow that sets a bad label stops there, naming it; nothing of it is indexed.
    run_id = app.start(bad="no good")
    row = app.client.get_run(run_id, tenant_id=TENANT)
    assert row.status == "dead" and "no good" in (row.error or "")
    assert app.labels(run_id) == {"sku": "A-7", "region": "south"}


def test_the_runs_spans_carry_its_labels_and_never_a_sensitive_value(db_url: str) -> None:
    exporter = InMemorySpanExporter()
    store = uw.connect(db_url)
    tracing = Tracing(store, exporter, flows=flows(), recover_window=None)
    engine = uw.Engine(store, flows=flows(), clock=ManualClock(1.7e9), metrics=tracing)
    engine.start("order", {}, tenant_id=TENANT, labels={"sku": "A-7"})
    asyncio.run(Runner(engine).run_until_idle())
    tracing.shutdown()  # sends what the run journaled
    spans = {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}
    labels = {name: {k: v for k, v in a.items() if k.startswith("underway.label.")}
              for name, a in spans.items()}
    # A step's span has the labels as they stood when it ended, set by it included.
    assert labels["underway.step pick"] == {
        "underway.label.sku": "A-7", "underway.label.stage": "picked",
        "underway.label.qty": 1}
    packed = {"underway.label.sku": "A-7", "underway.label.stage": "packed",
              "underway.label.qty": 1, "underway.label.weight": 2.5,
              "underway.label.fragile": True, "underway.label.patient": REDACTED}
    assert labels["underway.step pack"] == packed
    assert labels["underway.run order"] == packed  # the run's root span, at its end
    assert not any("Asha Rao" in str(v) for a in spans.values() for v in a.values())


def test_the_audit_finds_a_label_index_the_journal_contradicts(app: App, db_url: str) -> None:
    run_id = app.start()
    assert verify(app.store, tenant_id=TENANT).ok
    with insider(db_url) as sql:
        sql.q("UPDATE run_labels SET value = ? WHERE tenant_id = ? AND run_id = ? "
              "AND key = ?", "B-9", TENANT, run_id, "sku")
        sql.q("DELETE FROM run_labels WHERE tenant_id = ? AND run_id = ? AND key = ?",
              TENANT, run_id, "stage")
    found = [f.reason for f in verify(app.store, tenant_id=TENANT).findings]
    assert len(found) == 2, found
    assert "the label index disagrees with the journal" in found[0]
    assert "label sku" in found[0] and "'B-9'" in found[0] and "'A-7'" in found[0]
    assert "label stage" in found[1] and "None" in found[1]
