"""One I/O rule: async code never calls the store synchronously on the event loop.

A store that notes every call made from a thread running an event loop drives runs
through every path that reaches the store from async code — a run from start to finish
with tools, a circuit, a child run, an approval, a signal wait and wake, a budgeted
tenant whose usage is read, a policy matching on the tenant's counters, a crash taken
over once the lease expired, a dead-lettering, schedules, the runner, and a worker's claim
loop and hand-backs — on SQLite (plain, and with every payload encrypted: the tenants'
data keys are read through the store too) and on PostgreSQL. None of those calls may be
made on the loop. The in-memory store, which does no I/O, is the one store called inline.
"""

from __future__ import annotations

import ast
import asyncio
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel

import underway as uw
from fakes.keys import encrypted
from underway.clock import ManualClock
from underway.guard.approvals import ApproverRecord, public_key_of, sign_decision
from underway.guard.policy import policy_from_dict
from underway.runner import Runner
from underway.runner import run as run_to_end
from underway.scheduling.schedules import add_schedule, fire_due_schedules
from underway.store import MemoryStore, Store
from underway.store._offload import INLINE, Offload, offload_of

T0 = 1_700_000_000.0


def _a_loop_runs_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Watched:
    """A store that notes which of its methods were called, and every call made on a
    thread running an event loop (with where it came from)."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.called: set[str] = set()
        self.on_loop: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr  # dialect, offload: the wrapped store's

        def watched(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.called.add(name)
                if _a_loop_runs_here():
                    where = "".join(traceback.format_stack(limit=6)[:-1])
                    self.on_loop.append(f"{name}, called on the event loop from\n{where}")
            return attr(*args, **kwargs)

        return watched


@pytest.fixture(params=["sqlite", "postgres", "sqlite-encrypted"])
def watched(request: pytest.FixtureRequest) -> Iterator[Watched]:
    url = request.getfixturevalue("pg_url" if request.param == "postgres" else "sqlite_url")
    store = uw.connect(url)
    try:
        found = Watched(store)
        if request.param.endswith("encrypted"):
            # Every payload sealed: the tenants' data keys are read through the watch too.
            encrypted(found)  # type: ignore[arg-type]
        yield found
    finally:
        store.close()


# -- flows ------------------------------------------------------------------------------
class Account(BaseModel):
    account: str


class Payment(BaseModel):
    account: str
    amount: int


class Notes(BaseModel):
    seen: list[str] = []


class Crash(BaseException):
    """Abandons an activation mid-call, leaving its lease behind (as a SIGKILL would)."""


@uw.tool(read_only=True, circuit=uw.CircuitBreaker(failure_threshold=3))
async def look(args: Account) -> dict[str, Any]:
    """Read an account."""
    return {"account": args.account, "balance": 100}


@uw.tool(idempotent=True)
async def note(args: Account) -> str:
    """Write a note about an account."""
    return f"noted {args.account}"


@uw.tool(irreversible=True)
async def pay(args: Payment) -> str:
    """Move money (a policy asks a person first)."""
    return f"paid {args.amount}"


CRASHES: list[str] = []
CLOCKS: list[ManualClock] = []
LEASE_TTL = 30.0


@uw.tool(idempotent=True)
async def flaky(args: Account, info: uw.CallInfo) -> str:
    """Dies the first time, after its intent was journaled."""
    if not CRASHES:
        CRASHES.append(info.key)
        raise Crash
    return "done"


child: uw.Flow[Notes, Account] = uw.Flow("io_child", state=Notes, input=Account, tools=[look])


@child.step
async def child_look(ctx: uw.RunContext[Notes, Account]) -> Any:
    return ctx.done(await ctx.call(look, {"account": ctx.input.account}))


parent: uw.Flow[Notes, Account] = uw.Flow(
    "io_parent", state=Notes, input=Account, tools=[look, note, pay]
)


@parent.step
async def gather(ctx: uw.RunContext[Notes, Account]) -> Any:
    await ctx.call(look, {"account": ctx.input.account})
    await ctx.call(note, {"account": ctx.input.account})
    kid = await ctx.start(child, {"account": ctx.input.account})
    outcome = await ctx.wait_for(kid)
    ctx.state.seen.append(outcome.status)
    # Most of the lease goes by: the engine renews it before the next step.
    CLOCKS[-1].advance(0.6 * LEASE_TTL)
    return ctx.goto(settle)


@parent.step
async def settle(ctx: uw.RunContext[Notes, Account]) -> Any:
    await ctx.call(pay, {"account": ctx.input.account, "amount": 5})
    return ctx.wait("go", then=finish)


@parent.step
async def finish(ctx: uw.RunContext[Notes, Account]) -> Any:
    return ctx.done({"seen": ctx.state.seen, "signal": ctx.signal})


fragile: uw.Flow[Notes, Account] = uw.Flow("io_fragile", state=Notes, input=Account,
                                           tools=[flaky])


@fragile.step
async def once(ctx: uw.RunContext[Notes, Account]) -> Any:
    return ctx.done(await ctx.call(flaky, {"account": ctx.input.account}))


POLICY = policy_from_dict({"version": "io", "rules": [
    {"id": "pay-needs-finance", "tools": ["pay"], "outcome": "require_approval",
     "approver_role": "finance"},
    {"id": "busy-tenant", "tools": ["look"], "outcome": "deny",
     "counters": [{"counter": "tenant.tool_calls.today", "op": ">", "value": 10_000}]},
]})


def _engine(store: Watched, clock: ManualClock) -> uw.Engine:
    engine = uw.Engine(
        store, flows=[parent, child, fragile], clock=clock,  # type: ignore[arg-type]
        lease_ttl=LEASE_TTL, policy=POLICY, tenant_budget=uw.Budget(tool_calls=1_000),
    )
    engine.guard.tenant_usage_ttl = 0.0  # every check reads the tenant's usage again
    return engine


def _approve(engine: uw.Engine, run_id: str, key: Any) -> dict[str, Any]:
    s = engine.state(run_id)
    pending = s.pending_approval
    assert pending is not None
    return sign_decision(
        key, request_id=pending.request_id, run_id=run_id, tenant_id="default",
        tool=pending.tool, args_hash=pending.args_hash, decision="approve",
        expires_at=engine.clock.now() + 3600, approver_id="fin",
    ).model_dump(mode="json")


# -- the rule ---------------------------------------------------------------------------
def test_the_watch_sees_a_store_call_made_on_the_loop() -> None:
    store = Watched(MemoryStore())

    async def careless() -> None:
        store.next_wake_at()

    store.next_wake_at()
    assert store.on_loop == []
    asyncio.run(careless())
    assert len(store.on_loop) == 1 and store.on_loop[0].startswith("next_wake_at")


def test_stores_that_do_io_run_their_calls_on_threads_and_memory_inline(
    sqlite_url: str,
) -> None:
    assert offload_of(MemoryStore()) is INLINE
    store = uw.connect(sqlite_url)
    try:
        assert isinstance(offload_of(store), Offload)
        assert offload_of(Watched(store)) is offload_of(store)  # wrappers use the store's
        loop_thread = threading.get_ident()

        async def where() -> int:
            return await offload_of(store).run(threading.get_ident)

        assert asyncio.run(where()) != loop_thread
    finally:
        store.close()


def test_no_path_calls_the_store_on_the_event_loop(watched: Watched) -> None:
    clock = ManualClock(T0)
    CLOCKS.append(clock)
    CRASHES.clear()
    engine = _engine(watched, clock)
    key = Ed25519PrivateKey.generate()
    watched.put_approver(ApproverRecord("default", "fin", public_key_of(key), ("finance",), T0))

    def drive() -> None:
        asyncio.run(Runner(engine).run_until_idle())

    # A run with tools, a circuit, a child, the tenant's budget and counters: it stops to
    # ask for an approval.
    run_id, _ = engine.start(parent, {"account": "ACC-1"})
    drive()
    s = engine.state(run_id)
    assert s.status == "waiting" and s.pending_approval is not None, s.status
    # The signed approval, verified when the inbox is read and again before the call;
    # then the run waits for a signal, and the signal wakes it.
    engine.submit_decision(_approve(engine, run_id, key))
    drive()
    assert engine.state(run_id).waiting_signal == "go"
    engine.signal(run_id, "go", {"now": True})
    drive()
    done = engine.state(run_id)
    assert done.status == "completed", done.status
    assert done.result == {"seen": ["completed"], "signal": {"now": True}}

    # A worker dies mid-call; once its lease expired, another takes the run over.
    crashed, _ = engine.start(fragile, {"account": "ACC-2"})
    with pytest.raises(Crash):
        drive()
    clock.advance(engine.lease_ttl + 1)
    drive()
    assert engine.state(crashed).status == "completed"

    # A run dead-lettered from what its journal holds.
    doomed, _ = engine.start(fragile, {"account": "ACC-3"})
    [lease] = engine.claim(run_id=doomed)
    dead = asyncio.run(engine.dead_letter(lease, reason="failed again", error_type="Boom"))
    assert dead.status == "dead"

    # A due schedule tick starts its run; the runner starts and finishes two more, one
    # started eagerly (leased in its start's transaction), one started, then claimed.
    add_schedule(engine, "hourly", child, "0 * * * *", {"account": "ACC-4"})
    clock.advance(3600)
    assert asyncio.run(fire_due_schedules(engine)) == 1
    assert asyncio.run(run_to_end(engine, child, {"account": "ACC-5"})).status == "completed"
    assert asyncio.run(run_to_end(engine, child, {"account": "ACC-6"}, eager=False)
                       ).status == "completed"

    assert watched.on_loop == [], "\n".join(watched.on_loop)
    assert {
        "get_run", "load_checkpoint", "load_events", "actionable_signals", "append_many", "claim",
        "renew", "create_run", "held_leases", "next_wake_at", "get_approver",
        "use_nonce", "circuit_admit", "circuit_record", "list_runs", "claim_schedules",
        "advance_schedule", "start_leased",
    } <= watched.called, sorted(watched.called)


held: uw.Flow[Notes, Account] = uw.Flow("io_held", state=Notes, input=Account)
HOLDING = {"now": 0}


class Gate:
    """What the held flow's steps wait on, made fresh in each test's loop."""

    holding: asyncio.Event
    release: asyncio.Event


GATE = Gate()


@held.step
async def hold(ctx: uw.RunContext[Notes, Account]) -> Any:
    GATE.holding.set()
    await GATE.release.wait()
    return ctx.goto(after)


@held.step
async def after(ctx: uw.RunContext[Notes, Account]) -> Any:
    return ctx.done(ctx.input.account)


def test_a_worker_claims_and_hands_back_off_the_event_loop(watched: Watched) -> None:
    engine = uw.Engine(watched, flows=[held])  # type: ignore[arg-type]
    first, _ = engine.start(held, {"account": "A"})

    async def stop_after_the_step() -> uw.Worker:
        GATE.holding, GATE.release = asyncio.Event(), asyncio.Event()
        worker = uw.Worker(engine, poll=0.05, grace=600)
        serving = asyncio.create_task(worker.run())
        await GATE.holding.wait()
        worker.stop()
        GATE.release.set()  # the step ends; the run goes back at the step boundary
        await serving
        return worker

    worker = asyncio.run(stop_after_the_step())
    assert worker.handed_back == 1
    assert (engine.state(first).status, engine.state(first).step) == ("ready", "after")
    asyncio.run(Runner(engine).run_until_idle())
    assert engine.state(first).status == "completed"

    second, _ = engine.start(held, {"account": "B"})

    async def stop_at_once() -> uw.Worker:
        GATE.holding, GATE.release = asyncio.Event(), asyncio.Event()
        worker = uw.Worker(engine, poll=0.05, grace=600)
        serving = asyncio.create_task(worker.run())
        await GATE.holding.wait()
        worker.stop(now=True)  # the step in flight is cancelled, the run handed back
        await serving
        return worker

    worker = asyncio.run(stop_at_once())
    assert (engine.state(second).status, engine.state(second).step) == ("ready", "hold")
    assert worker.handed_back == 1 and worker.activations == 0
    assert watched.on_loop == [], "\n".join(watched.on_loop)
    assert {
        "wakeups", "claim", "next_due_at", "get_run", "append_many", "release",
    } <= watched.called


# -- the rule, read from the code --------------------------------------------------------
PACKAGE = Path(__file__).parents[2] / "src" / "underway"
JOURNAL_READS = frozenset({"load", "load_head", "history", "verify", "trusted_checkpoint",
                           "decode", "verify_events", "states_at"})
"""Journal methods that read the store."""
CLIENT_CALLS = frozenset({"start", "signal", "cancel", "resolve", "resume", "submit_decision",
                          "state", "claim", "history", "events", "list_runs", "get_run",
                          "activity", "state_at", "children", "pending_request"})
"""Methods of an engine or client that reach the store."""


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _reaches_the_store(call: ast.Call) -> bool:
    """A direct call of a store, a journal read, or an engine's or client's store work."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    receiver = _name(func.value)
    return (
        receiver in ("store", "_store")
        or (receiver == "journal" and func.attr in JOURNAL_READS)
        or (receiver in ("engine", "eng", "client", "_client") and func.attr in CLIENT_CALLS)
    )


def _hands_over_the_store(call: ast.Call, awaited: set[int]) -> bool:
    """A call that is not awaited, given a store to work with (``f(..., eng.store)``):
    a sync function that may call it on the loop. ``functools.partial`` only packs it."""
    if id(call) in awaited or _name(call.func) == "partial":
        return False
    args = [*call.args, *(k.value for k in call.keywords)]
    return any(isinstance(a, ast.Name | ast.Attribute) and _name(a) in ("store", "_store")
               for a in args)


def _calls(fn: ast.AST) -> Iterator[ast.Call]:
    """The calls a function makes itself (not those of functions defined inside it, which
    run wherever they are sent)."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Call):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def _awaited(fn: ast.AST) -> set[int]:
    return {id(node.value) for node in ast.walk(fn) if isinstance(node, ast.Await)}


def _sync_helpers_that_reach_the_store(tree: ast.Module) -> set[str]:
    """Names of the module's functions and methods (``self.<name>``) whose own code
    reaches the store, directly or through one another."""
    sync: dict[str, ast.FunctionDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            sync[node.name] = node
    tainted = {n for n, fn in sync.items() if any(map(_reaches_the_store, _calls(fn)))}
    grew = True
    while grew:
        grew = False
        for n, fn in sync.items():
            if n not in tainted and any(_called_name(c) in tainted for c in _calls(fn)):
                tainted.add(n)
                grew = True
    return tainted


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id in ("self", "cls"):
        return func.attr
    return None


def test_no_async_function_calls_the_store_directly() -> None:
    """A cheap reading of the rule: no ``async def`` of the package calls a store, a
    journal read or an engine's store work itself, a sync helper of its module that does,
    or a sync function it hands a store to; it sends such work to the store's I/O threads
    (``engine.io(fn, ...)``)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "store" / "_offload.py":
            continue  # the mechanism itself: it hands the store's calls to its threads
        tree = ast.parse(path.read_text())
        helpers = _sync_helpers_that_reach_the_store(tree)
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.AsyncFunctionDef):
                continue
            awaited = _awaited(fn)
            for call in _calls(fn):
                if (_reaches_the_store(call) or _called_name(call) in helpers
                        or _hands_over_the_store(call, awaited)):
                    where = f"{path.relative_to(PACKAGE.parent)}:{call.lineno} in {fn.name}"
                    found.append(f"{where}: {ast.unparse(call)[:80]}")
    assert found == [], "\n".join(found)
