"""Checkpoints are verified: an insider who edits or splices the checkpoints table (and
makes the run row look due) never makes a worker act on the forged state, and
`underway audit verify` reports the run, the seq and the reason.

Runs are written through the engine on SQLite and a real PostgreSQL; every attack is plain
SQL on the database, with the library's own codec where the insider needs to re-encode a
state. The target run has paid a small refund and waits for a finance approval of a
25,000 INR refund: the forgeries try to make it look approved, finished, or like someone
else's run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway import events as ev
from underway.cli import app
from underway.codec import Codec, Where
from underway.guard.approvals import (
    ApproverRecord,
    generate_keypair,
    load_private_key,
    sign_decision,
    write_private_key,
)
from underway.guard.budgets import tenant_usage
from underway.guard.policy import policy_from_dict
from underway.journal import Journal
from underway.journal.state import RunState, apply
from underway.store import connect
from underway.store.base import AppendBatch, NewRun, RunUpdate, StoredEvent
from underway.store.postgres import split_url

# -- the flow: a small refund, a timer, then a large refund that needs an approval ------


class Paid(BaseModel):
    refunds: list[float] = []


class Refund(BaseModel):
    invoice: str
    amount: float
    currency: str


refunds_made: list[dict[str, Any]] = []


@uw.tool(irreversible=True, amount="amount", currency="arg:currency")
async def refund(args: Refund) -> dict[str, Any]:
    """Send money back to a customer (irreversible)."""
    refunds_made.append(args.model_dump())
    return {"refunded": args.amount}


POLICY = policy_from_dict({"version": "v1", "rules": [
    {"id": "large", "tools": ["refund"], "outcome": "require_approval",
     "approver_role": "finance", "expires_in": 3600,
     "amount": {"op": ">", "value": "10000", "currency": "INR"}},
    {"id": "small", "tools": ["refund"], "outcome": "allow",
     "amount": {"op": "<=", "value": "10000", "currency": "INR"}},
]})

flow: uw.Flow[Paid, Any] = uw.Flow("ckpt_refunds", state=Paid, tools=[refund], policy=POLICY)


@flow.step(start=True)
async def small(ctx: uw.RunContext[Paid, Any]) -> Any:
    await ctx.call(refund, {"invoice": "INV-1", "amount": 5000, "currency": "INR"})
    ctx.state.refunds.append(5000)
    return ctx.sleep(60, then=big)


@flow.step
async def big(ctx: uw.RunContext[Paid, Any]) -> Any:
    await ctx.call(refund, {"invoice": "INV-1", "amount": 25000, "currency": "INR"})
    ctx.state.refunds.append(25000)
    return ctx.goto(close)


@flow.step
async def close(ctx: uw.RunContext[Paid, Any]) -> Any:
    return ctx.done({"refunds": ctx.state.refunds})


# -- plain SQL on each backend -----------------------------------------------------------


class Raw:
    """Plain SQL on the database behind the store (``?`` placeholders on both)."""

    def __init__(self, execute: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]) -> None:
        self._execute = execute

    def q(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return self._execute(sql, params)

    def checkpoint(self, tenant: str, run: str) -> tuple[int, bytes] | None:
        rows = self.q("SELECT seq, state FROM checkpoints WHERE tenant_id = ? AND run_id = ?",
                      tenant, run)
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else None

    def set_checkpoint(self, tenant: str, run: str, seq: int, state: bytes) -> None:
        self.delete_checkpoint(tenant, run)
        self.q("INSERT INTO checkpoints (tenant_id, run_id, seq, state) VALUES (?, ?, ?, ?)",
               tenant, run, seq, state)

    def delete_checkpoint(self, tenant: str, run: str) -> None:
        self.q("DELETE FROM checkpoints WHERE tenant_id = ? AND run_id = ?", tenant, run)

    def content(self, tenant: str, stored: bytes) -> dict[str, Any]:
        """A checkpoint's content, decoded the way the library does it."""
        def fetch(keys: list[str]) -> dict[str, bytes]:
            return {k: bytes(d) for k, d in self.q(
                "SELECT key, data FROM blobs WHERE tenant_id = ? AND key = ?", tenant, keys[0])}

        value = Codec().decode(stored, fetch, Where("checkpoint", tenant))
        assert isinstance(value, dict)
        return value

    def encode(self, tenant: str, content: dict[str, Any]) -> bytes:
        """Stored bytes of ``content``, its large parts written to the blobs table."""
        blobs: dict[str, bytes] = {}
        stored = Codec().encode(content, blobs, Where("checkpoint", tenant))
        for key, data in blobs.items():
            self.q("INSERT INTO blobs (tenant_id, key, data) VALUES (?, ?, ?) "
                   "ON CONFLICT DO NOTHING", tenant, key, data)
        return stored

    def make_due(self, tenant: str, run: str) -> None:
        """Make the run row say the run is ready now (the row alone is only a projection)."""
        self.q("UPDATE runs SET status = 'ready', next_wake_at = 0, waiting_signal = NULL "
               "WHERE tenant_id = ? AND run_id = ?", tenant, run)


@contextmanager
def open_raw(url: str) -> Iterator[Raw]:
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            yield Raw(lambda sql, params: conn.execute(sql, params).fetchall())
        finally:
            conn.close()
        return
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as pg:
        if schema:
            pg.execute(psycopg.sql.SQL("SET search_path TO {}").format(
                psycopg.sql.Identifier(schema)))

        def execute(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            cur = pg.execute(sql.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []

        yield Raw(execute)


# -- the world each attack starts from ---------------------------------------------------


@dataclass
class World:
    url: str
    engine: uw.Engine
    tmp: Path
    early: tuple[int, bytes]
    """acme/r-1's checkpoint while it slept between the refunds (a genuine, older one)."""
    fresh_run: str
    """A run of acme that was started and never activated: no checkpoint yet."""

    def drive(self, tenant: str = "acme", run: str = "r-1") -> RunState:
        asyncio.run(uw.Runner(self.engine).run_until_idle())
        return self.engine.state(run, tenant_id=tenant)

    def raw(self) -> Any:
        return open_raw(self.url)

    def approve(self, tenant: str, run: str) -> None:
        state = self.engine.state(run, tenant_id=tenant)
        req = state.pending_approval
        assert req is not None
        decision = sign_decision(
            self.key(tenant), request_id=req.request_id, run_id=run, tenant_id=tenant,
            tool=req.tool, args_hash=req.args_hash, decision="approve",
            expires_at=req.expires_at, approver_id="fin",
        )
        self.engine.submit_decision(decision.model_dump(mode="json"), tenant_id=tenant)

    def key(self, tenant: str) -> Any:
        path = self.tmp / f"fin-{tenant}.pem"
        if not path.exists():
            pem, public = generate_keypair()
            write_private_key(path, pem)
            self.engine.store.put_approver(ApproverRecord(
                tenant_id=tenant, approver_id="fin", public_key=public, roles=("finance",),
                created_at=self.engine.clock.now(),
            ))
        return load_private_key(path)

    def history(self, tenant: str = "acme", run: str = "r-1") -> list[ev.Event]:
        return [r.event for r in self.engine.journal.history(tenant, run)]


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    refunds_made.clear()
    store = connect(db_url)
    clock = uw.ManualClock(1_800_000_000.0)
    engine = uw.Engine(store, flows=[flow], clock=clock)
    w = World(db_url, engine, tmp_path, (0, b""), "")
    try:
        # "r-1" in two tenants, started at the same instant: their states differ only in
        # the tenant (and the chains behind them).
        for tenant in ("acme", "globex"):
            engine.start(flow, tenant_id=tenant, run_id="r-1")
        engine.start(flow, tenant_id="acme", run_id="r-2")
        w.drive()
        with w.raw() as raw:
            early = raw.checkpoint("acme", "r-1")
        assert early is not None
        w.early = early
        clock.advance(61)
        for tenant, run in (("acme", "r-1"), ("globex", "r-1"), ("acme", "r-2")):
            state = w.drive(tenant, run)
            assert state.status == "waiting" and state.pending_approval is not None
        # The other two are approved and finish: their checkpoints show a paid run.
        for tenant, run in (("globex", "r-1"), ("acme", "r-2")):
            w.approve(tenant, run)
            assert w.drive(tenant, run).status == "completed"
        w.fresh_run, _ = engine.start(flow, tenant_id="acme", start_at=clock.now() + 10**6)
        assert len(refunds_made) == 3 + 2  # a small refund each, two approved large ones
        refunds_made.clear()
        assert verify(db_url) == (0, "")
        yield w
    finally:
        store.close()


def verify(url: str) -> tuple[int, str]:
    """`underway audit verify --all`: (exit code, the lines naming bad runs)."""
    result = CliRunner().invoke(app, ["audit", "verify", "--all", "--db", url])
    bad = [line for line in (result.stdout + result.stderr).splitlines()
           if "TAMPERED" in line]
    return result.exit_code, "\n".join(bad)


# -- the attacks ---------------------------------------------------------------------------
# Each takes the raw database and the world, forges acme/r-1's checkpoint, and returns
# (the seq audit must name, words its reason must contain).

Attack = Callable[[Raw, World], tuple[int, str]]
"""An attack on r-1's checkpoint: the seq it forged, and the reason a finding gives (``|``
between reasons either of which is right)."""


def said(reason: str, text: str) -> bool:
    """Whether ``text`` gives the reason (one of its ``|``-separated forms)."""
    return any(r in text for r in reason.split("|"))


def _edit(edit: Callable[[dict[str, Any]], None]) -> Attack:
    """Re-encode acme/r-1's checkpoint with ``edit`` applied to its state."""

    def attack(raw: Raw, w: World) -> tuple[int, str]:
        row = raw.checkpoint("acme", "r-1")
        assert row is not None
        content = raw.content("acme", row[1])
        edit(content)
        raw.set_checkpoint("acme", "r-1", row[0], raw.encode("acme", content))
        return row[0], "differs from the one the journal committed to"

    return attack


def _looks_approved(c: dict[str, Any]) -> None:
    """The forgery the issue reported: waiting for approval becomes approved and ready."""
    key = c["calls"][0]["key"]
    c.update(status="ready", waiting_signal=None, wake_at=None, pending_approval=None)
    c["calls"][0]["status"] = "approved"
    c["approvals"][key] = {"decision": {"decision": "approve", "approver_id": "fin"},
                           "required_role": "finance", "expires_at": c["updated_at"] + 3600}


def _marked_for_retry(c: dict[str, Any]) -> None:
    """The held call made to look like a failed call an operator asked to try again."""
    c.update(status="ready", waiting_signal=None, wake_at=None, pending_approval=None)
    c["calls"][0].update(status="retry", error_type="Timeout", retryable=True)


def _looks_paid(c: dict[str, Any]) -> None:
    c.update(status="ready", waiting_signal=None, wake_at=None, pending_approval=None)
    c["calls"][0].update(status="succeeded", result={"refunded": 25000})


def _skips_to_close(c: dict[str, Any]) -> None:
    c.update(status="ready", step="close", calls=[], values=[], waiting_signal=None,
             wake_at=None, pending_approval=None)


def _money_reset(c: dict[str, Any]) -> None:
    c.update(money={}, tool_calls=0, status="ready", waiting_signal=None, wake_at=None,
             pending_approval=None)


def _state_edited(c: dict[str, Any]) -> None:
    c["state"] = {"refunds": [5000, 25000]}
    c["status"] = "ready"


def seq_changed(raw: Raw, w: World) -> tuple[int, str]:
    """Moved back two events: the fold would apply them twice."""
    seq, stored = raw.checkpoint("acme", "r-1") or (0, b"")
    raw.set_checkpoint("acme", "r-1", seq - 2, stored)
    return seq - 2, "holds the state at seq"


def seq_and_content_changed(raw: Raw, w: World) -> tuple[int, str]:
    """The same, with the state's own seq rewritten to agree with its row."""
    seq, stored = raw.checkpoint("acme", "r-1") or (0, b"")
    content = raw.content("acme", stored)
    content["seq"] = seq - 2
    raw.set_checkpoint("acme", "r-1", seq - 2, raw.encode("acme", content))
    return seq - 2, "commits to no checkpoint"


def _splice(tenant: str, run: str, *, rewrite: bool) -> Attack:
    """Copy another run's checkpoint (verbatim, or with its tenant and run rewritten)."""

    def attack(raw: Raw, w: World) -> tuple[int, str]:
        seq, stored = raw.checkpoint(tenant, run) or (0, b"")
        if not rewrite:
            raw.set_checkpoint("acme", "r-1", seq, stored)
            if tenant != "acme":
                # Its large values live in its own tenant's blobs. A process that has not
                # read them finds them missing in acme before it reaches the tenant field.
                return seq, f"belongs to tenant {tenant!r}|missing from the store"
            return seq, f"belongs to run {run!r}"
        # Made to agree with the target in every field the row or the binding shows.
        head, own = raw.checkpoint("acme", "r-1") or (0, b"")
        content = raw.content(tenant, stored)
        content.update(tenant_id="acme", run_id="r-1", seq=head,
                       binding=raw.content("acme", own)["binding"])
        raw.set_checkpoint("acme", "r-1", head, raw.encode("acme", content))
        return head, "differs from the one the journal committed to"

    return attack


def earlier_checkpoint(raw: Raw, w: World) -> tuple[int, str]:
    """A genuine checkpoint of the same run from before the approval was requested."""
    raw.set_checkpoint("acme", "r-1", *w.early)
    return w.early[0], "stale"


def earlier_checkpoint_at_head(raw: Raw, w: World) -> tuple[int, str]:
    """The same, claiming the current seq so the events since are never folded."""
    seq, _ = raw.checkpoint("acme", "r-1") or (0, b"")
    raw.set_checkpoint("acme", "r-1", seq, w.early[1])
    return seq, "holds the state at seq"


def binding_edited(raw: Raw, w: World) -> tuple[int, str]:
    """The chain hash the checkpoint is bound to replaced by another event's."""
    seq, stored = raw.checkpoint("acme", "r-1") or (0, b"")
    content = raw.content("acme", stored)
    other = raw.q("SELECT hash FROM events WHERE tenant_id = 'acme' AND run_id = 'r-1' "
                  "AND seq = 1")[0][0]
    content["binding"]["prev"] = bytes(other).hex()
    raw.set_checkpoint("acme", "r-1", seq, raw.encode("acme", content))
    return seq, "committed to"


def binding_removed(raw: Raw, w: World) -> tuple[int, str]:
    """A forged state made to look like a checkpoint from before checkpoints were bound."""
    seq, stored = raw.checkpoint("acme", "r-1") or (0, b"")
    content = raw.content("acme", stored)
    _looks_approved(content)
    del content["binding"]
    raw.set_checkpoint("acme", "r-1", seq, raw.encode("acme", content))
    return seq, "not bound to the journal"


def bytes_flipped(raw: Raw, w: World) -> tuple[int, str]:
    """One byte of the row changed (here: of the blob reference a large state leaves)."""
    seq, stored = raw.checkpoint("acme", "r-1") or (0, b"")
    i = len(stored) // 2
    raw.set_checkpoint("acme", "r-1", seq, stored[:i] + bytes([stored[i] ^ 0x01]) + stored[i + 1:])
    return seq, "cannot be read"


def garbage(raw: Raw, w: World) -> tuple[int, str]:
    seq, _ = raw.checkpoint("acme", "r-1") or (0, b"")
    raw.set_checkpoint("acme", "r-1", seq, b"\x00not json")
    return seq, "cannot be read"


def beyond_the_journal(raw: Raw, w: World) -> tuple[int, str]:
    """A forged state placed after the journal's last event."""
    seq, stored = raw.checkpoint("acme", "r-1") or (0, b"")
    content = raw.content("acme", stored)
    _looks_approved(content)
    content["seq"] = seq + 5
    raw.set_checkpoint("acme", "r-1", seq + 5, raw.encode("acme", content))
    return seq + 5, "no event at seq"


ATTACKS: dict[str, Attack] = {
    "status_approved": _edit(_looks_approved),
    "call_marked_paid": _edit(_looks_paid),
    "call_marked_for_retry": _edit(_marked_for_retry),
    "step_skipped": _edit(_skips_to_close),
    "money_and_counts_reset": _edit(_money_reset),
    "flow_state_edited": _edit(_state_edited),
    "seq_changed": seq_changed,
    "seq_and_content_changed": seq_and_content_changed,
    "another_run_verbatim": _splice("acme", "r-2", rewrite=False),
    "another_run_rewritten": _splice("acme", "r-2", rewrite=True),
    "another_tenant_verbatim": _splice("globex", "r-1", rewrite=False),
    "another_tenant_rewritten": _splice("globex", "r-1", rewrite=True),
    "earlier_seq_of_same_run": earlier_checkpoint,
    "earlier_state_at_current_seq": earlier_checkpoint_at_head,
    "bound_hash_edited": binding_edited,
    "binding_removed": binding_removed,
    "byte_flipped": bytes_flipped,
    "not_decodable": garbage,
    "seq_beyond_the_journal": beyond_the_journal,
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_forged_checkpoint_is_reported_and_never_acted_on(
    world: World, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = world.engine.journal.load("acme", "r-1", use_checkpoint=False)
    with world.raw() as raw:
        seq, reason = ATTACKS[name](raw, world)
        raw.make_due("acme", "r-1")

    code, out = verify(world.url)
    assert code == 1, out
    assert "run r-1 in tenant 'acme'" in out and f"at seq {seq}:" in out and said(reason, out), out
    assert out.count("TAMPERED") == 1, out

    # Readers see the journal's state, with a warning.
    with caplog.at_level(logging.WARNING, logger="underway.journal"):
        seen = world.engine.state("r-1", tenant_id="acme")
    assert seen.to_json() == before.to_json()
    assert "checkpoint refused" in caplog.text and said(reason, caplog.text)

    # The worker acts on the journal: the refund still waits for its approval.
    after = world.drive()
    assert refunds_made == []
    assert after.status == "waiting" and after.pending_approval is not None
    assert after.state == {"refunds": [5000]}
    refused = [e for e in world.history() if isinstance(e, ev.CheckpointRefused)]
    assert len(refused) == 1 and refused[0].checkpoint_seq == seq
    assert said(reason, refused[0].reason)

    # The finding outlives the forged row (the worker's new checkpoint replaced it).
    with world.raw() as raw:
        assert raw.checkpoint("acme", "r-1") != (seq, b"")
    code, out = verify(world.url)
    assert code == 1 and "a worker refused the checkpoint" in out and said(reason, out), out

    # A genuine approval still goes through, exactly once.
    world.approve("acme", "r-1")
    done = world.drive()
    assert done.status == "completed" and done.result == {"refunds": [5000, 25000]}
    assert [r["amount"] for r in refunds_made] == [25000]


def test_a_deleted_checkpoint_is_reported_and_the_journal_is_folded(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    with world.raw() as raw:
        seq, _ = raw.checkpoint("acme", "r-1") or (0, b"")
        raw.delete_checkpoint("acme", "r-1")
    code, out = verify(world.url)
    assert code == 1 and "run r-1 in tenant 'acme'" in out, out
    assert f"at seq {seq}: the checkpoint committed at seq {seq} is missing" in out, out
    # The worker folds the whole journal: the approval it finds pending goes through once.
    world.approve("acme", "r-1")
    with caplog.at_level(logging.WARNING, logger="underway.journal"):
        done = world.drive()
    assert "is missing" in caplog.text
    assert done.status == "completed" and [r["amount"] for r in refunds_made] == [25000]
    # Deleting a cache forges nothing: logged and reported while missing, not journaled;
    # the worker's next checkpoint restores a clean audit.
    assert not [e for e in world.history() if isinstance(e, ev.CheckpointRefused)]
    assert verify(world.url) == (0, "")


@pytest.mark.parametrize("bound", [True, False])
def test_a_checkpoint_inserted_for_a_run_without_one_is_refused(
    world: World, bound: bool
) -> None:
    """A run that was started but never ran has no checkpoint; one claiming it already
    paid (in the current format, or in the unbound one of older versions) is refused."""
    run = world.fresh_run
    fake = world.engine.journal.load("acme", run).to_json()
    fake.update(status="completed", result={"refunds": [5000, 25000]})
    if bound:
        fake["binding"] = {"v": 1, "prev": "00" * 32}
    with world.raw() as raw:
        raw.set_checkpoint("acme", run, 1, raw.encode("acme", fake))
        raw.make_due("acme", run)
    code, out = verify(world.url)
    if bound:
        assert code == 1 and f"run {run} in tenant 'acme' at seq 1:" in out, out
        assert "commits to no checkpoint at seq 1" in out
    else:
        # Unbound and after the last committed checkpoint (there is none): what an older
        # version wrote. It is never used, and not reported.
        assert code == 0, out
    # The worker runs the first step the journal says is next; nothing else.
    state = world.drive("acme", run)
    assert state.status == "waiting" and state.step == "big" and state.result is None
    assert [r["amount"] for r in refunds_made] == [5000]
    refused = [e for e in world.history("acme", run) if isinstance(e, ev.CheckpointRefused)]
    assert len(refused) == (1 if bound else 0)


def test_an_unbound_checkpoint_behind_a_bound_one_is_refused(world: World) -> None:
    """Once a run has bound checkpoints, an unbound one at or before the last is forged."""
    with world.raw() as raw:
        seq, stored = raw.checkpoint("acme", "r-1") or (0, b"")
        content = raw.content("acme", stored)
        del content["binding"]
        raw.set_checkpoint("acme", "r-1", seq, raw.encode("acme", content))
    code, out = verify(world.url)
    assert code == 1 and f"at seq {seq}: checkpoint is not bound to the journal" in out, out


def test_an_edited_blob_of_a_checkpoint_is_refused(world: World) -> None:
    """A state over the blob threshold is stored as a blob the row refers to: editing the
    blob, not the row, is caught by the blob's content address."""
    with world.raw() as raw:
        seq, stored = raw.checkpoint("acme", "r-1") or (0, b"")
        content = raw.content("acme", stored)
        _looks_approved(content)
        key = json.loads(stored)["$blob"]
        raw.q("UPDATE blobs SET data = ? WHERE tenant_id = 'acme' AND key = ?",
              json.dumps(content).encode(), key)
        raw.make_due("acme", "r-1")
    code, out = verify(world.url)
    assert code == 1 and f"run r-1 in tenant 'acme' at seq {seq}: checkpoint cannot be read" \
        in out and "does not match its content hash" in out, out
    # A worker in another process (this engine's codec remembers the genuine blob).
    worker = uw.Engine(world.engine.store, flows=[flow], clock=world.engine.clock)
    asyncio.run(uw.Runner(worker).run_until_idle())
    assert refunds_made == []
    refused = [e for e in world.history() if isinstance(e, ev.CheckpointRefused)]
    assert len(refused) == 1 and "does not match its content hash" in refused[0].reason
    assert world.engine.state("r-1", tenant_id="acme").status == "waiting"


def test_tenant_usage_is_not_hidden_by_a_forged_checkpoint(world: World) -> None:
    """Usage since an instant skips a run's events up to a checkpoint older than that
    instant; a checkpoint edited to look old must not hide what the run spent."""
    since = world.engine.clock.now() - 30
    honest = tenant_usage(world.engine.store, "globex", since=since)
    assert honest.money == {"INR": 25000}
    with world.raw() as raw:
        seq, stored = raw.checkpoint("globex", "r-1") or (0, b"")
        content = raw.content("globex", stored)
        content["updated_at"] = since - 1000
        raw.set_checkpoint("globex", "r-1", seq, raw.encode("globex", content))
    assert tenant_usage(world.engine.store, "globex", since=since) == honest


def test_untouched_checkpoints_are_used_and_verify(world: World) -> None:
    """The happy path: every parked run's checkpoint is trusted, and equals the fold."""
    journal = world.engine.journal
    for tenant, run in (("acme", "r-1"), ("acme", "r-2"), ("globex", "r-1")):
        trusted = journal.trusted_checkpoint(tenant, run)
        assert trusted is not None
        full = journal.load(tenant, run, use_checkpoint=False)
        assert trusted.to_json() == full.to_json()
    assert journal.trusted_checkpoint("acme", world.fresh_run) is None


class _RowReadBeforeACommit:
    """A store whose first checkpoint read returns the row as it was before a worker's
    last commit (a reader racing a worker), and the current row afterwards."""

    def __init__(self, store: uw.Store, before: tuple[int, bytes]) -> None:
        self._store = store
        self._before: tuple[int, bytes] | None = before

    def load_checkpoint(self, tenant_id: str, run_id: str) -> tuple[int, bytes] | None:
        before, self._before = self._before, None
        return before or self._store.load_checkpoint(tenant_id, run_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_reader_racing_a_worker_is_not_a_forgery(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    store: Any = _RowReadBeforeACommit(world.engine.store, world.early)
    with caplog.at_level(logging.WARNING, logger="underway.journal"):
        state, _, refused = Journal(store).load_head("acme", "r-1")
    assert refused is None and "refused" not in caplog.text
    assert state.to_json() == world.engine.journal.load(
        "acme", "r-1", use_checkpoint=False).to_json()


FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("journal_*.json")), ids=lambda p: p.stem)
def test_a_journal_recorded_before_checkpoints_were_bound_loads_and_verifies(
    db_url: str, path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A recorded journal of an earlier version, stored with the unbound checkpoint that
    version wrote, loads (by a full fold), raises no flag and passes the audit."""
    recorded = json.loads(path.read_text())
    tenant, run = recorded["tenant_id"], recorded["run_id"]
    events = [StoredEvent(e["seq"], e["type"], e["payload"].encode(), e["hash"])
              for e in recorded["events"]]
    store = connect(db_url)
    try:
        first = json.loads(events[0].payload)
        store.create_run(NewRun(
            tenant_id=tenant, run_id=run, flow=first["data"]["flow"], idempotency_key=None,
            first_event=events[0], blobs={}, step=first["data"]["first_step"],
            now=first["at"], next_wake_at=first["at"],
        ))
        lease = store.claim(owner="recorder", now=first["at"], ttl=60, limit=1)[0]
        journal = Journal(store)
        folded = journal.load(tenant, run, use_checkpoint=False)
        folded_all = journal.decode(tenant, run, events)
        for rec in folded_all[1:]:
            apply(folded, rec)
        old_checkpoint = Codec().encode(folded.to_json(), {}, Where("checkpoint", tenant))
        store.append(AppendBatch(
            tenant_id=tenant, run_id=run, expected_seq=1, fence=lease.token, events=events[1:],
            now=first["at"], update=RunUpdate("completed", None, None),
            checkpoint=(folded.seq, old_checkpoint), release=True,
        ))
        with caplog.at_level(logging.WARNING, logger="underway.journal"):
            state, _, refused = journal.load_head(tenant, run)
        assert refused is None and "refused" not in caplog.text
        assert state.to_json() == folded.to_json()
        assert state.status == "completed"
        assert verify(db_url) == (0, "")
    finally:
        store.close()
