"""Personal-data canaries written through every path that stores a payload, and scans of a
database's raw bytes for them (the S4 test of issue 13).

:func:`write_everywhere` drives real runs on a store: a run's input, tool arguments and
results (one of them large enough to become a blob, and a growing conversation stored as
a chain of blobs), a model's prompt and response, a signal, an outside event through
intake (a start and a signal), an approval's evidence and the approver's comment, a
question and its answer, a child's input and result (its end reaches the parent as a
signal), a cancellation's reason, a dead-lettered step's error, a failed run's reason, a
schedule's input, a knowledge record (text, source, metadata), and the checkpoints of all
of them. Identifiers (tenants, runs, entities, idempotency keys, signal names) are not
personal data by contract and carry no canary.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from pydantic import BaseModel

import underway as uw
from fakes.guard_helpers import Approver
from underway.guard.policy import policy_from_dict
from underway.knowledge import KnowledgeRecord, open_knowledge
from underway.scheduling.intake import Routes, Signal, StartFlow, intake
from underway.scheduling.schedules import add_schedule
from underway.store import Store
from underway.store._urls import split_url
from underway.testing import ScriptedModel

AADHAAR = "2345 6789 0123"
PAN = "ABCPE1234F"
PHONE = "+91 98765 43210"
CANARIES = (AADHAAR, PAN, PHONE)
TENANT = "acme"


class Case(BaseModel):
    customer: str = ""
    aadhaar: str = ""
    phone: str = ""


class Notes(BaseModel):
    notes: list[str] = []
    history: list[dict[str, str]] = []


@uw.tool(idempotent=True)
async def lookup_customer(args: dict[str, Any]) -> dict[str, Any]:
    """Read a customer by PAN: answers with their Aadhaar and phone, and a long file."""
    return {"pan": args["pan"], "aadhaar": AADHAAR, "phone": PHONE,
            "file": f"KYC file of {PAN}: " + f"aadhaar {AADHAAR}, phone {PHONE}; " * 80}


@uw.tool
async def send_sms(args: dict[str, Any]) -> dict[str, Any]:
    """Send an SMS (held for approval by the policy)."""
    return {"sent_to": args["to"]}


def flows() -> list[uw.Flow[Any, Any]]:
    """The flows the canaries travel through."""
    main = uw.Flow("kyc", state=Notes, input=Case, tools=[lookup_customer, send_sms],
                   signals=["reply"])
    model = ScriptedModel([{"text": f"the customer's PAN is {PAN}"}] * 4, name="scripted")
    child = uw.Flow("child", state=Notes, input=Case)

    @child.step(start=True)
    async def child_step(ctx: uw.RunContext[Notes, Case]) -> Any:
        return ctx.done({"checked": ctx.input.aadhaar})

    @main.step(start=True)
    async def look(ctx: uw.RunContext[Notes, Case]) -> Any:
        found = await ctx.call(lookup_customer, {"pan": PAN})
        reply = await ctx.model(model, {"messages": [
            {"role": "user", "content": f"summarise customer {ctx.input.aadhaar}"}]},
            stream=True)  # its words go to the live stream too
        ctx.state.notes += [found["aadhaar"], str(reply)]
        for i in range(40):  # a conversation that grows: a chain of blobs
            ctx.state.history.append({"role": "user", "content": f"{i}: call {PHONE} " * 5})
        kid = await ctx.start(child, {"aadhaar": AADHAAR}, key="kid")
        outcome = await ctx.wait_for(kid)
        ctx.state.notes.append(str(outcome.result))
        return ctx.goto(notify)

    @main.step
    async def notify(ctx: uw.RunContext[Notes, Case]) -> Any:
        await ctx.call(send_sms, {"to": PHONE, "text": f"your PAN {PAN}"},
                       evidence={"aadhaar": AADHAAR, "pan": PAN}, risks=[f"texts {PHONE}"])
        answer = await ctx.ask(f"may we call {PHONE}?", context={"pan": PAN})
        ctx.state.notes.append(str(answer))
        return ctx.wait("reply", then=replied)

    @main.step
    async def replied(ctx: uw.RunContext[Notes, Case]) -> Any:
        ctx.state.notes.append(str(ctx.signal))
        return ctx.done({"phone": PHONE, "notes": ctx.state.notes})

    waiting = uw.Flow("waiting", state=Notes, input=Case, signals=["more"])

    @waiting.step(start=True)
    async def wait_more(ctx: uw.RunContext[Notes, Case]) -> Any:
        ctx.state.notes.append(ctx.input.phone)
        return ctx.wait("more", then=wait_more)

    broken = uw.Flow("broken", state=Notes, input=Case)

    @broken.step(start=True)
    async def crash(ctx: uw.RunContext[Notes, Case]) -> Any:
        if ctx.input.customer == "fail":
            return ctx.fail(f"customer {PHONE} refused (PAN {PAN})")
        raise RuntimeError(f"cannot reach {PHONE} for {AADHAAR}")

    return [main, child, waiting, broken]


POLICY = policy_from_dict({
    "version": "canaries",
    "rules": [{"id": "sms-needs-ops", "tools": ["send_sms"], "outcome": "require_approval",
               "approver_role": "ops"}],
})


def _drive(engine: uw.Engine) -> None:
    asyncio.run(uw.Runner(engine).run_until_idle())


def write_everywhere(store: Store, tmp: Path, *, subject: str | None = None,
                     leave_active: bool = True) -> dict[str, str]:
    """Write every canary through every path on ``store`` (encrypted or not, as the store
    is); return the ids of the runs made, by what they are.

    With ``subject`` every run, the outside events and the knowledge record name that data
    subject, and no schedule is added (a schedule is not about one subject). Without
    ``leave_active`` the runs left waiting are cancelled at the end."""
    engine = uw.Engine(store, flows=flows(), policy=POLICY)
    runs: dict[str, str] = {}
    runs["main"], _ = engine.start("kyc", {"customer": "c1", "aadhaar": AADHAAR,
                                           "phone": PHONE}, tenant_id=TENANT, subject=subject)
    _drive(engine)
    ops = Approver(engine, tmp, "ops-1", ("ops",), tenant=TENANT)
    state = engine.state(runs["main"], tenant_id=TENANT)
    assert state.pending_approval is not None, state.status
    engine.submit_decision(ops.decide(state, comment=f"ok to text {PHONE}"), tenant_id=TENANT)
    _drive(engine)
    state = engine.state(runs["main"], tenant_id=TENANT)
    assert state.escalation is not None and state.escalation.is_question, state.status
    engine.submit_decision(ops.decide(
        state, decision="answer", request_id=state.escalation.request_id, tool="",
        args_hash="", expires_at=state.escalation.expires_at or 4e9,
        answer={"yes": f"call {PHONE}"}, comment=f"answered for {AADHAAR}",
    ), tenant_id=TENANT)
    _drive(engine)
    engine.signal(runs["main"], "reply", {"phone": PHONE, "pan": PAN}, tenant_id=TENANT)
    _drive(engine)
    assert engine.state(runs["main"], tenant_id=TENANT).status == "completed"

    # Intake: a start, then a signal to the run that owns the entity.
    routes = Routes({"opened": StartFlow("waiting", subject_from=subject and "entity_id"),
                     "updated": Signal("more")})
    when = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    for kind in ("opened", "updated"):
        got = intake(engine, {
            "tenant_id": TENANT, "entity_id": subject or "case-1", "event_type": kind,
            "occurred_at": when, "source": "crm", "idempotency_key": f"crm-{kind}",
            "payload": {"customer": "c2", "aadhaar": AADHAAR, "phone": PHONE},
        }, routes)
        runs[f"intake-{kind}"] = str(got.run_id)
    _drive(engine)
    # A run waiting with a signal in its inbox, then cancelled with a reason.
    runs["cancelled"], _ = engine.start("waiting", {"phone": PHONE}, tenant_id=TENANT,
                                        subject=subject)
    _drive(engine)
    engine.signal(runs["cancelled"], "more", {"aadhaar": AADHAAR}, tenant_id=TENANT)
    engine.cancel(runs["cancelled"], by="ops", reason=f"customer {PHONE} asked",
                  tenant_id=TENANT)
    runs["waiting"], _ = engine.start("waiting", {"phone": PHONE}, tenant_id=TENANT,
                                      subject=subject)
    _drive(engine)
    engine.signal(runs["waiting"], "more", {"pan": PAN}, tenant_id=TENANT)  # left unread
    runs["dead"], _ = engine.start("broken", {"customer": "dead"}, tenant_id=TENANT,
                                   subject=subject)
    runs["failed"], _ = engine.start("broken", {"customer": "fail"}, tenant_id=TENANT,
                                     subject=subject)
    _drive(engine)
    if subject is None:
        add_schedule(engine, "nightly-kyc", "waiting", "0 2 * * *",
                     {"phone": PHONE, "aadhaar": AADHAAR}, tenant_id=TENANT)
    if not leave_active:
        for name in ("waiting", "intake-opened"):
            engine.cancel(runs[name], by="ops", reason="done", tenant_id=TENANT)
        _drive(engine)
    kb = open_knowledge(store)
    kb.put(KnowledgeRecord(tenant_id=TENANT, id="pref-1", text=f"customer PAN {PAN} prefers "
                           f"calls on {PHONE}", source=f"crm:{AADHAAR}",
                           created_at=1.7e9, metadata={"aadhaar": AADHAAR}, subject=subject))
    hits = kb.search(TENANT, "prefers calls", roles=(), now=1.7e9 + 1)
    assert [h.record.text for h in hits] == [f"customer PAN {PAN} prefers calls on {PHONE}"]
    return runs


# -- scans ----------------------------------------------------------------------------------
def found_in(raw: bytes) -> set[str]:
    """The canaries ``raw`` holds as they are."""
    return {c for c in CANARIES if c.encode() in raw}


def sqlite_bytes(path: Path) -> bytes:
    """The database file and its write-ahead log, whatever was checkpointed or not."""
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal"), Path(f"{path}-journal"))
                    if p.exists())


def sqlite_rows(path: Path) -> bytes:
    """Every value of every table of the SQLite database (text and blobs), read with SQL."""
    out = []
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                for v in row:
                    out.append(v if isinstance(v, bytes) else str(v).encode())
    return b"\n".join(out)


def postgres_rows(url: str) -> tuple[bytes, list[str]]:
    """Every column of every table of the store's PostgreSQL schema: cast to text, and
    bytea columns as their bytes; and the tables read."""
    conninfo, schema = split_url(url)
    out: list[bytes] = []
    with psycopg.connect(conninfo) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "AND table_type = 'BASE TABLE'", (schema,))]
        for table in tables:
            cols = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = %s", (schema, table)).fetchall()
            for name, kind in cols:
                cast = "" if kind == "bytea" else "::text"
                q = f'SELECT "{name}"{cast} FROM "{schema}"."{table}"'
                for (v,) in conn.execute(q):
                    if v is not None:
                        out.append(bytes(v) if kind == "bytea" else str(v).encode())
    return b"\n".join(out), tables
