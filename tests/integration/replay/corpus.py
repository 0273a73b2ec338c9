"""A corpus of journals for the unchanged-code property of ``underway replay`` and
``underway deploy check``: real flows run on a real database under a worker's config file
(``[policy] file``, ``[budgets]``, ``[secrets]`` bindings, ``environment = "prod"``), with
the engine built as ``underway worker`` builds it (:meth:`Config.make_guard_options`).

The flows cover what a journal can hold: approvals granted, rejected and expired; signals
that came in time, late (after the wait timed out) or never; a supplier that fails now and
then (retries) or for good (a dead run); a step interrupted mid-call and taken over by a
second engine (a crash); a call whose outcome was lost (an escalated run); questions
answered or left open; child runs; an agent asking a model; forks; a cancelled run.
:func:`produce` runs one scenario of each, its parameters chosen by the caller (the
property test lets hypothesis choose them).

``corpus:app`` is what the commands load (``--app``, or ``worker.app`` of the config file
:func:`write_config` writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway import Client, RunState
from underway import events as ev
from underway.agent import Agent
from underway.config import Config, load_config
from underway.engine import Engine
from underway.models.types import ModelRequest
from underway.runner import Runner
from underway.store import connect
from underway.testing import ManualClock, RuleModel, say

HERE = Path(__file__).resolve().parent
UNDERWAY = Path(sys.executable).with_name("underway")
SECRET = "SUPPLIER_TOKEN"
"""The supplier's secret: bound to ``prod`` in the config file; set for the original runs
only (a replay never reads a secret)."""
POLICY = """\
version = "corpus-1"
default = "allow"

[[rules]]
id = "big-orders-need-procurement"
tools = ["place_order"]
environments = ["prod"]
amount = { op = ">", value = "5000", currency = "INR" }
outcome = "require_approval"
approver_role = "procurement"
expires_in = 600
"""
START = 1.7e9
"""When the corpus's clock starts (epoch seconds)."""


class Notes(BaseModel):
    seen: list[Any] = []


class Order(BaseModel):
    amount: float = 100.0
    fail_quotes: int = 0
    """How many times the supplier answers 503 before it quotes (more than the retries:
    the run dies)."""


_fails: dict[str, int] = {}
_hang: dict[str, Any] = {"tool": None, "entered": None}


class SupplierDown(Exception):
    """The supplier answered 503."""

    retryable = True


@uw.tool(read_only=True, secrets=(SECRET,),
         retry=uw.RetryPolicy(max_attempts=2, initial_interval=1.0, jitter=False))
async def supplier_quote(args: Any, info: uw.CallInfo) -> dict[str, Any]:
    """Ask the supplier for a quote (it fails as the run's input says)."""
    assert info.secrets[SECRET]
    seen = _fails.get(info.run_id, 0)
    if seen < int(args["fail"]):
        _fails[info.run_id] = seen + 1
        raise SupplierDown("503 Service Unavailable")
    return {"price": args["amount"]}


class Purchase(BaseModel):
    amount: float


@uw.tool(amount="amount", currency="INR")
async def place_order(args: Purchase) -> dict[str, Any]:
    """Order from the supplier."""
    return {"ordered": args.amount}


@uw.tool
async def notify_procurement(args: Any) -> dict[str, Any]:
    """Tell procurement the supplier is late."""
    return {"told": True}


@uw.tool(idempotent=True)
async def ship(args: Any) -> dict[str, Any]:
    """Book the shipment (idempotent: a takeover books it again)."""
    if _hang["tool"] == "ship":
        _hang["entered"].set()
        await asyncio.Event().wait()
    return {"shipped": args["order"]}


@uw.tool
async def charge(args: Any) -> dict[str, Any]:
    """Charge the card (not idempotent: a takeover cannot tell whether it ran)."""
    if _hang["tool"] == "charge":
        _hang["entered"].set()
        await asyncio.Event().wait()
    return {"charged": True}


def purchase_flow() -> uw.Flow[Notes, Order]:
    """Quote, order (held above 5,000 INR by the config's policy), wait for the supplier."""
    flow = uw.Flow("purchase", state=Notes, input=Order,
                   tools=[supplier_quote, place_order, notify_procurement])

    @flow.step(start=True)
    async def order(ctx: uw.RunContext[Notes, Order]) -> Any:
        quote = await ctx.call(supplier_quote, {"amount": ctx.input.amount,
                                                "fail": ctx.input.fail_quotes})
        try:
            ctx.state.seen.append(await ctx.call(place_order, {"amount": quote["price"]}))
        except uw.ToolCallError as exc:
            ctx.state.seen.append(exc.error_type)
            return ctx.done(ctx.state.seen)
        return ctx.wait("supplier", timeout=60, then=confirm)

    @flow.step
    async def confirm(ctx: uw.RunContext[Notes, Order]) -> Any:
        ctx.state.seen.append({"timed_out": ctx.timed_out, "signal": ctx.signal})
        if ctx.timed_out and len(ctx.state.seen) < 4:
            await ctx.call(notify_procurement, {"late": len(ctx.state.seen)})
            # The third wait lasts ten days: a supplier that never answers leaves the run
            # waiting in the corpus.
            longer = 3600 if len(ctx.state.seen) < 3 else 864_000
            return ctx.wait("supplier", timeout=longer, then=confirm)
        return ctx.done(ctx.state.seen)

    return flow


def fulfil_flow() -> uw.Flow[Notes, Any]:
    """Ship, charge and ask; a parent of ``lookup`` child runs."""
    flow = uw.Flow("fulfil", state=Notes, tools=[ship, charge])

    @flow.step(start=True)
    async def book(ctx: uw.RunContext[Notes, Any]) -> Any:
        kid = await ctx.start("lookup", {})
        ctx.state.seen.append((await ctx.wait_for(kid)).result)
        ctx.state.seen.append(await ctx.call(ship, {"order": ctx.uuid()}))
        ctx.state.seen.append(await ctx.call(charge, {"at": ctx.now().isoformat()}))
        ctx.state.seen.append(await ctx.ask("gift wrap?", role="procurement"))
        return ctx.done(ctx.state.seen)

    return flow


def lookup_flow() -> uw.Flow[Notes, Any]:
    """A child run: one random value, one quote-free answer."""
    flow = uw.Flow("lookup", state=Notes)

    @flow.step(start=True)
    async def look(ctx: uw.RunContext[Notes, Any]) -> Any:
        return ctx.done({"stock": round(ctx.random() * 100)})

    return flow


def _brain(req: ModelRequest) -> Any:
    told = [m.content for m in req.messages if m.role == "tool"]
    if any('"ordered"' in t for t in told) or any("Error" in t for t in told):
        return say("Done.", ("finish", {"result": "ordered"}))
    return say("Ordering.", ("place_order", {"amount": 6000 if "big" in str(req) else 300}))


def buyer_agent() -> Agent:
    """An agent whose model (rules) orders once, then finishes."""
    return Agent("buyer", model=RuleModel(_brain, name="buyer-rules"), tools=[place_order],
                 plan=False)


def app() -> list[Any]:
    """The corpus's flows and tools (``--app corpus:app``)."""
    return [purchase_flow(), fulfil_flow(), lookup_flow(), buyer_agent().flow]


def write_config(folder: Path, db: str) -> Path:
    """The worker's ``underway.toml`` (and its policy file) in ``folder``."""
    (folder / "policy.toml").write_text(POLICY)
    path = folder / "underway.toml"
    path.write_text(f"""\
database = {db!r}

[worker]
app = "corpus:app"
environment = "prod"

[policy]
file = "policy.toml"

[budgets.default]
tool_calls = 10000
money = {{ INR = 1000000 }}

[secrets]
environments = {{ {SECRET} = "prod" }}
""")
    return path


@dataclass(frozen=True, slots=True)
class Scenario:
    """The parameters of one corpus."""

    amount: float = 6000.0
    """The purchase's amount: above 5,000 INR the config's policy holds it."""
    verdict: str = "approve"
    """``approve``, ``reject`` or ``expire`` (what becomes of a held order)."""
    signal: str = "late"
    """``on_time``, ``late`` (after the first wait timed out) or ``never``."""
    fail_quotes: int = 1
    """Supplier failures before a quote: 0 or 1 are retried past; 2 kills the run."""
    answer: bool = True
    """Whether the fulfilment's question is answered (else the run stays escalated)."""


@dataclass(slots=True)
class World:
    """The engine a corpus runs on, built like a worker's."""

    config: Config
    clock: ManualClock
    engine: Engine
    approver: Any
    runs: dict[str, str] = field(default_factory=dict)

    def drive(self) -> None:
        asyncio.run(Runner(self.engine).run_until_idle())

    def decide(self, run_id: str, verdict: str) -> None:
        held = self.engine.state(run_id)
        if held.pending_approval is None:
            return
        if verdict == "expire":
            self.clock.advance(held.pending_approval.expires_at - self.clock.now() + 1)
        else:
            self.engine.submit_decision(self.approver.decide(held, verdict))
        self.drive()

    def answer(self, run_id: str) -> None:
        s = self.engine.state(run_id)
        if s.escalation is None or not s.escalation.is_question:
            return
        self.engine.submit_decision(self.approver.decide(
            s, "answer", request_id=s.escalation.request_id, tool="", args_hash="",
            answer="yes", expires_at=self.clock.now() + 3600))
        self.drive()


def engine_of(config: Config, store: Any, clock: ManualClock, owner: str) -> Engine:
    """An engine as ``underway worker`` builds one from ``config``."""
    return Engine(store, flows=[f for f in app() if isinstance(f, uw.Flow)], clock=clock,
                  owner=owner, guard_options=config.make_guard_options())


def produce(folder: Path, db: str, s: Scenario, approver: type) -> dict[str, str]:
    """Run one scenario of every flow on ``db`` under the config in ``folder``; return the
    run ids by what they are about. ``approver`` is the tests' signing approver class."""
    config = load_config(write_config(folder, db))
    store = connect(db)
    clock = ManualClock(START)
    engine = engine_of(config, store, clock, "worker-1")
    keys = Path(tempfile.mkdtemp(dir=folder))
    w = World(config, clock, engine, approver(engine, keys, f"pat-{keys.name}",
                                              ("procurement",)))
    try:
        _purchases(w, s)
        _fulfilment(w, s, store)
        _agents(w, s)
        _forks(w)
        _cancels(w)
    finally:
        store.close()
    return w.runs


def _purchases(w: World, s: Scenario) -> None:
    rid, _ = w.engine.start("purchase", {"amount": s.amount, "fail_quotes": s.fail_quotes})
    w.runs["purchase"] = rid
    for _ in range(3):  # the supplier's retries wait on durable timers
        w.drive()
        w.clock.advance(2)
    w.decide(rid, s.verdict)
    if s.signal == "on_time":
        w.engine.signal(rid, "supplier", {"ships": "today"}, signal_id=f"{rid}-on-time")
    else:
        w.clock.advance(61)
        w.drive()
        if s.signal == "late":
            w.engine.signal(rid, "supplier", {"ships": "monday"}, signal_id=f"{rid}-late")
        else:
            w.clock.advance(3601)
    w.drive()


def _fulfilment(w: World, s: Scenario, store: Any) -> None:
    """Two fulfilments, each interrupted mid-call and taken over by a second engine: the
    idempotent ``ship`` runs again; the ``charge`` that may have happened escalates."""
    for which in ("ship", "charge"):
        rid, _ = w.engine.start("fulfil", {})
        w.runs[f"fulfil-{which}"] = rid
        asyncio.run(_interrupted(w.engine, which))
        w.clock.advance(w.engine.lease_ttl + 1)
        w.engine = engine_of(w.config, store, w.clock, f"worker-{which}")
        w.drive()
        if s.answer:
            w.answer(rid)


async def _interrupted(engine: Engine, tool: str) -> None:
    """Drive until a call of ``tool`` has begun, then stop the worker dead."""
    entered = asyncio.Event()
    _hang.update(tool=tool, entered=entered)
    try:
        task = asyncio.create_task(Runner(engine).run_until_idle())
        async with asyncio.timeout(120):
            await entered.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    finally:
        _hang["tool"] = None


def _agents(w: World, s: Scenario) -> None:
    goal = "a big order" if s.amount > 5000 else "a small order"
    rid, _ = w.engine.start("buyer", {"goal": goal})
    w.runs["buyer"] = rid
    w.drive()
    w.decide(rid, s.verdict)


def killed(folder: Path, db: str, approver: type) -> str:
    """A ``fulfil`` run whose ``underway worker`` process is SIGKILLed right after ``ship``
    ran and before the journal recorded it; a second worker takes it over, ``ship`` runs
    again under its key, the question is answered, and the run completes. The run's id."""
    config = load_config(write_config(folder, db))
    store = connect(db)
    try:
        run_id, _ = Client(store).start("fulfil", {})
        env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_")}
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
        worker = [str(UNDERWAY), "worker", "--config", str(folder / "underway.toml"),
                  "--poll", "0.05", "--grace", "5"]
        crash = {"UNDERWAY_CRASH_AFTER": "1", "UNDERWAY_CRASH_POINTS": "effect.after_run"}
        first = subprocess.run(worker, env=env | crash, cwd=HERE, capture_output=True,
                               timeout=120, check=False)
        assert first.returncode == -signal.SIGKILL, first.stderr.decode(errors="replace")
        second = subprocess.Popen(worker, env=env, cwd=HERE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        try:
            asked = _until(store, run_id, lambda s: s.escalation is not None)
            engine = engine_of(config, store, ManualClock(time.time()), "approver")
            person = approver(engine, Path(tempfile.mkdtemp(dir=folder)), "killed-pat",
                              ("procurement",))
            assert asked.escalation is not None and asked.escalation.is_question
            engine.submit_decision(person.decide(
                asked, "answer", request_id=asked.escalation.request_id, tool="",
                args_hash="", answer="no", expires_at=time.time() + 3600))
            assert _until(store, run_id, lambda s: s.final).status == "completed"
            # The step the kill interrupted ran again under the second worker.
            history = [r.event for r in Client(store).history(run_id)]
            assert [e.attempt for e in history if isinstance(e, ev.StepStarted)
                    and e.step == "book"][:2] == [1, 2], history
        finally:
            second.terminate()
            second.communicate(timeout=120)
    finally:
        store.close()
    return run_id


def _until(store: Any, run_id: str, ok: Callable[[RunState], bool]) -> RunState:
    """The run's state once ``ok`` holds for it (a worker process moves it)."""
    deadline = time.monotonic() + 120
    while True:
        state = Client(store).state(run_id)
        if ok(state):
            return state
        assert time.monotonic() < deadline, f"run {run_id} stuck: {state.status}"
        time.sleep(0.05)


def _cancels(w: World) -> None:
    """A purchase cancelled while it waits for the supplier."""
    rid, _ = w.engine.start("purchase", {"amount": 300.0})
    w.runs["cancelled"] = rid
    for _ in range(2):
        w.drive()
    w.engine.client.cancel(rid, by="ops", reason="the supplier closed")
    w.drive()


def _forks(w: World) -> None:
    done = w.runs["purchase"]
    fork = w.engine.client.fork(done, at_seq=w.engine.state(done).seq, by="ops",
                                step="order", state_patch={"seen": ["forked"]})
    w.runs["fork"] = fork.run_id
    for _ in range(3):
        w.drive()
        w.clock.advance(2)
    w.decide(fork.run_id, "approve")
    for _ in range(3):
        w.clock.advance(3601)
        w.drive()
