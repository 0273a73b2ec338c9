"""Driving real ``underway worker`` processes through chaos, and checking what they left.

:class:`Workers` starts worker processes on the chaos app (:mod:`app`), SIGKILLs them,
SIGSTOPs them past their lease and SIGCONTs them once other workers took their runs over,
and finally SIGTERMs the survivors.
:func:`unleash` runs a seeded plan of all that while runs are being started, taking
snapshots of every journal as it goes; :func:`verify` checks the end state against the
journal, the snapshots and the fake service (:mod:`fakes.outside_service`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import FLOW, expected_result

from fakes.invariants import Journals, check_once, check_prefix, journals
from fakes.outside_service import Delivery, OutsideService, Witness
from underway import Engine, Flow, Tool, connect
from underway import events as ev
from underway.store.base import FINAL, Store

HERE = Path(__file__).parent
UNDERWAY = Path(sys.executable).with_name("underway")
# The limits below only guard against hangs: a busy machine must never reach them.
READY_TIMEOUT_S = 120.0
"""A worker that has not said ``ready`` by then is broken."""
STUCK_AFTER_S = 120.0
"""Once the chaos stops, runs that commit nothing for this long are stuck: the test fails."""
GRACE_S = 60.0
"""A worker's ``--grace``: on SIGTERM, a step still in flight gets this long to finish (or
to be refused) before it is cancelled and its run handed back without a word."""
SHUTDOWN_TIMEOUT_S = GRACE_S + 60.0
TAKEOVER_PATIENCE_S = 5.0
"""How long past its leases a frozen worker stays frozen while nobody takes its runs over.
On SQLite it may have been frozen holding the write lock, and then nobody can: it is thawed
and keeps its runs. Not a failure either way, only fewer takeovers; it is kept well below
the chaos app's call timeout, which a frozen worker's calls in flight must not reach."""
SERVICE_DELAY_S = 0.02
"""Seconds the outside service takes over each lookup and effect, so that runs spend their
time in flight the way they do against real services (and a paused worker holds some)."""



def scale() -> int:
    """How many times the default load to drive: ``UNDERWAY_CRASH_KILLS`` (``make soak``
    sets 10000) over the crash suite's default of 200, at least 1."""
    kills = int(os.environ.get("UNDERWAY_CRASH_KILLS", "0") or 0)
    return max(1, kills // 200)


@dataclass
class Worker:
    """One worker process and where its output goes."""

    popen: subprocess.Popen[bytes]
    owner: str
    stdout: Path
    stderr: Path
    stopped: bool = False
    killed: bool = False

    @property
    def alive(self) -> bool:
        """Whether the process has not exited (a stopped process is alive)."""
        return self.popen.poll() is None


@dataclass(frozen=True)
class Pause:
    """A worker frozen with SIGSTOP: what it held, what was taken from it, and when it was
    thawed."""

    owner: str
    held: dict[str, int]
    """run id -> lease token the worker held when it was stopped."""
    taken: frozenset[str]
    """The held runs another worker had claimed under a newer lease before the thaw."""
    stopped_at: float
    resumed_at: float


class Workers:
    """Worker processes of one test, all on the same database and chaos service."""

    def __init__(self, db: str, service: str, logdir: Path, *, concurrency: int,
                 lease_ttl: float, poll: float = 0.1, grace: float = GRACE_S) -> None:
        self.db, self.service, self.logdir = db, service, logdir
        self.args = ["--concurrency", str(concurrency), "--lease-ttl", str(lease_ttl),
                     "--poll", str(poll), "--grace", str(grace)]
        self.all: list[Worker] = []

    def spawn(self) -> Worker:
        """Start one worker and wait until it says it is ready."""
        n = len(self.all)
        out, err = self.logdir / f"worker-{n}.out", self.logdir / f"worker-{n}.err"
        env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
        env["CHAOS_SERVICE"] = self.service
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        cmd = [str(UNDERWAY), "worker", "--db", self.db, "--app", "app:app", *self.args]
        with out.open("wb") as fo, err.open("wb") as fe:
            popen = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env, cwd=self.logdir)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            for line in out.read_text(errors="replace").splitlines():
                words = line.split()
                if len(words) == 4 and words[0:2] == ["underway", "worker"] and \
                        words[3] == "ready":
                    w = Worker(popen, words[2], out, err)
                    self.all.append(w)
                    return w
            if popen.poll() is not None or time.monotonic() > deadline:
                popen.kill()
                popen.wait()
                raise AssertionError(
                    f"worker {n} did not become ready (exit {popen.returncode}):\n"
                    f"{err.read_text(errors='replace')[-4000:]}")
            time.sleep(0.02)

    def running(self) -> list[Worker]:
        """Workers alive and not stopped."""
        return [w for w in self.all if w.alive and not w.stopped]

    def kill(self, w: Worker) -> None:
        """SIGKILL ``w`` and reap it."""
        w.popen.send_signal(signal.SIGKILL)
        w.popen.wait()
        w.killed = True

    def stop(self, w: Worker) -> None:
        """Freeze ``w`` (SIGSTOP)."""
        w.popen.send_signal(signal.SIGSTOP)
        w.stopped = True

    def cont(self, w: Worker) -> None:
        """Thaw ``w`` (SIGCONT)."""
        w.popen.send_signal(signal.SIGCONT)
        w.stopped = False

    def shutdown(self) -> dict[str, int]:
        """SIGTERM every live worker (thawing any still frozen) and wait for them:
        exit status by owner id."""
        live = [w for w in self.all if w.alive]
        for w in live:
            if w.stopped:
                self.cont(w)
            w.popen.send_signal(signal.SIGTERM)
        codes = {}
        for w in live:
            try:
                codes[w.owner] = w.popen.wait(timeout=SHUTDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                w.popen.kill()
                codes[w.owner] = w.popen.wait()
        return codes

    def kill_all(self) -> None:
        """SIGKILL whatever is still alive (cleanup after a failure)."""
        for w in self.all:
            if w.alive:
                w.popen.kill()
                w.popen.wait()

    def log(self, w: Worker) -> str:
        """What ``w`` wrote to stderr."""
        return w.stderr.read_text(errors="replace")


@dataclass
class Tally:
    """What a chaos test did and found."""

    backend: str
    runs: int = 0
    workers_started: int = 0
    sigkills: int = 0
    sigstops: int = 0
    sigstops_skipped: int = 0
    """Freezes planned after every run had finished: there was nothing left to freeze."""
    snapshots: int = 0
    events: int = 0
    steps_witnessed: int = 0
    activations: int = 0
    takeovers: int = 0
    kept_after_thaw: int = 0
    uncommitted_steps: int = 0
    stale_steps_refused: int = 0
    refusals_logged: int = 0
    timers: int = 0
    effects: int = 0
    stale_effects_refused: int = 0
    reconciled: int = 0
    idempotent_redeliveries: int = 0
    duplicate_effects: int = 0
    restarts: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the test log."""
        fields = {k: v for k, v in vars(self).items() if k != "problems"}
        fields["problems"] = len(self.problems)
        return " ".join(f"{k}={v}" for k, v in fields.items())


def unfinished(store: Store, tenant: str = "default") -> int:
    """How many runs of ``tenant`` may still move on their own: not final, and not dead or
    escalated (those wait for an operator; :func:`verify` reports them)."""
    return sum(1 for r in store.list_runs(tenant, limit=1_000_000)
               if r.status not in (*FINAL, "dead", "escalated"))


class Db:
    """The test process's own engine on the database the workers share (it starts runs,
    takes snapshots and checks the results)."""

    def __init__(self, url: str, flows: list[Flow[Any, Any]], tools: list[Tool]) -> None:
        self.url, self._flows, self._tools = url, flows, tools
        self.engine = self._open()

    def _open(self) -> Engine:
        return Engine(connect(self.url), flows=self._flows, tools=self._tools)

    @property
    def store(self) -> Store:
        """The store of :attr:`engine`."""
        return self.engine.store

    def reopen(self) -> None:
        """Drop the connections (e.g. to a server that restarted) and connect afresh."""
        with contextlib.suppress(Exception):
            self.engine.store.close()
        self.engine = self._open()

    def close(self) -> None:
        """Release the connections."""
        self.engine.store.close()


@dataclass
class Plan:
    """A seeded schedule of chaos over ``seconds``: run starts, SIGKILLs and SIGSTOPs."""

    runs: int
    seconds: float
    sigkills: int
    sigstops: int
    lease_ttl: float
    loops: int = 3


def start_runs(engine: Engine, first: int, count: int, loops: int) -> None:
    """Start runs ``first`` .. ``first + count - 1`` (idempotently, by key)."""
    for i in range(first, first + count):
        engine.start(FLOW, {"customer": f"c{i}", "loops": loops}, idempotency_key=f"chaos-{i}")


def unleash(db: Db, workers: Workers, plan: Plan, rng: random.Random, tally: Tally,
            *, between: Callable[[float], bool] | None = None) -> list[Pause]:
    """Start the plan's runs in waves while SIGKILLing and SIGSTOPping workers, then wait
    until every run is final and stop the workers with SIGTERM.

    The last waves are held back while freezes are still to come, and one is started
    whenever a freeze is due and every run started so far has finished: however slowly a
    busy machine gets through the schedule, each freeze finds a worker holding runs.

    ``between(elapsed)`` is called on every tick of the chaos phase (the PostgreSQL restart
    test restarts the server from there); the phase lasts while it answers True (it has
    more to do). Journals are snapshotted about once a second (less often when that gets
    slow) and each snapshot must extend the one before it.
    """
    target = len(workers.running())
    began = time.monotonic()
    span = plan.seconds * 0.8
    waves = max(1, int(span / 0.25))
    starts = [(span * k / waves, plan.runs * k // waves,
               plan.runs * (k + 1) // waves - plan.runs * k // waves) for k in range(waves)]
    kills = sorted(rng.uniform(0.1, 0.9) * plan.seconds for _ in range(plan.sigkills))
    # Spread out: with two workers, one freeze must end before the next can begin.
    stops = [(0.1 + 0.45 * k / max(1, plan.sigstops) + rng.uniform(0, 0.05)) * plan.seconds
             for k in range(plan.sigstops)]
    thaws: list[threading.Thread] = []
    pauses: list[Pause] = []
    before: Journals = {}
    last_snapshot = 0.0
    every = 1.0

    def snapshot(where: str) -> None:
        nonlocal before, last_snapshot, every
        began_at = time.monotonic()
        after = journals(db.store)
        check_prefix(before, after, tally.problems, where)
        before, last_snapshot = after, time.monotonic()
        # A big load makes snapshots slow: keep them to a fifth of the time.
        every = max(1.0, 5 * (last_snapshot - began_at))
        tally.snapshots += 1

    def thaw(w: Worker, held: dict[str, int], stopped_at: float, after: float) -> None:
        # Thawed once other workers took its runs over, while they are at work on them:
        # the thawed worker's late writes then race the new holders' first ones. Its own
        # connection: on SQLite this loop may be waiting for the write lock the frozen
        # worker holds, and with it the connection this loop shares.
        reader = connect(db.url, migrate=False)
        try:
            time.sleep(max(0.0, after - time.time()))  # until its leases ran out
            patience = time.monotonic() + TAKEOVER_PATIENCE_S
            while True:
                rows = {rid: reader.get_run("default", rid) for rid in held}
                taken = frozenset(rid for rid, row in rows.items()
                                  if row is not None and row.lease_token > held[rid])
                # Its own last commit may have handed a run back (on PostgreSQL it may
                # have landed after the stop): nobody has to take that one over.
                settled = {rid for rid, row in rows.items()
                           if row is None or row.lease_owner != w.owner}
                if taken | settled >= held.keys() or time.monotonic() > patience:
                    break
                time.sleep(0.02)
        finally:
            reader.close()
        resumed_at = time.time()
        workers.cont(w)
        pauses.append(Pause(w.owner, held, taken, stopped_at, resumed_at))

    def freeze(victim: Worker) -> None:
        workers.stop(victim)
        stopped_at = time.time()
        rows = [r for r in db.store.list_runs("default", limit=1_000_000)
                if r.lease_owner == victim.owner and (r.lease_expires_at or 0) > stopped_at]
        held = {r.run_id: r.lease_token for r in rows}
        expiry = max([float(r.lease_expires_at or 0) for r in rows] or
                     [stopped_at + plan.lease_ttl])
        # From a thread, not this loop: on SQLite the frozen worker may hold the write
        # lock, and this loop's next write waits for it until the thaw.
        thread = threading.Thread(target=thaw, args=(victim, held, stopped_at,
                                                     expiry + rng.uniform(0.05, 0.5)))
        thread.start()
        thaws.append(thread)
        tally.sigstops += 1

    def start_wave() -> None:
        _, first, count = starts.pop(0)
        start_runs(db.engine, first, count, plan.loops)

    while True:
        now = time.monotonic() - began
        while starts and starts[0][0] <= now and len(starts) > len(stops):
            start_wave()
        while kills and kills[0] <= now:
            kills.pop(0)
            workers.kill(rng.choice(workers.running()))
            tally.sigkills += 1
            workers.spawn()
        if stops and stops[0] <= now:
            candidates = workers.running()
            held_by = Counter(o for _, _, o in db.store.held_leases(now=time.time()))
            victim = max(candidates, key=lambda w: (held_by[w.owner], rng.random()))
            if len(candidates) >= 2 and held_by[victim.owner]:
                stops.pop(0)
                freeze(victim)
            elif starts and len(candidates) >= 2 and not unfinished(db.store):
                start_wave()  # a held-back wave, for this freeze to hit
            elif not starts and not unfinished(db.store):
                tally.sigstops_skipped += len(stops)
                stops.clear()
            elif now > plan.seconds + STUCK_AFTER_S:
                tally.problems.append(f"no worker held a run to freeze at t={now:.0f}s")
                stops.pop(0)
            else:
                # Freeze a worker that holds runs, and leave one to take them over: later.
                stops[0] = now + 0.05
        frozen = sum(1 for t in thaws if t.is_alive())
        if len(workers.running()) + frozen < target:
            workers.spawn()
        busy = between is not None and between(now)
        if time.monotonic() - last_snapshot >= every:
            snapshot(f"chaos t={now:.1f}s")
        if now >= plan.seconds and not starts and not kills and not stops and not frozen \
                and not busy:
            break
        time.sleep(0.05)
    for t in thaws:
        t.join()

    # Settle: wait while the journals grow; a load that stops moving is stuck.
    progress, moved = -1, time.monotonic()
    while left := unfinished(db.store):
        if time.monotonic() - last_snapshot >= every:
            snapshot("settling")
            total = sum(len(j) for j in before.values())
            if total != progress:
                progress, moved = total, time.monotonic()
        if time.monotonic() - moved > STUCK_AFTER_S:
            tally.problems.append(f"{left} runs not final, and no event committed for "
                                  f"{STUCK_AFTER_S:.0f}s")
            break
        time.sleep(0.1)
    snapshot("settled")
    tally.workers_started = len(workers.all)
    codes = workers.shutdown()
    for owner, code in codes.items():
        if code != 0:
            tally.problems.append(f"worker {owner} exited {code} on SIGTERM, not 0")
    snapshot("after shutdown")
    return pauses


@dataclass(frozen=True)
class Commit:
    """A witness report that made it into the journal: who committed a step, and where."""

    seq: int
    step: str
    at: str
    owner: str
    token: int
    head: int


def committed_witnesses(engine: Engine, run_id: str) -> list[Commit]:
    """The witness reports a run's journal holds, in journal order."""
    out = []
    for r in engine.journal.history("default", run_id):
        e = r.event
        if isinstance(e, ev.ToolSucceeded) and e.tool == "witness" and isinstance(e.result, dict):
            res = e.result
            out.append(Commit(r.seq, str(res["step"]), str(res["at"]), str(res["owner"]),
                              int(res["token"]), int(res["head"])))
    return out


def fencing_problems(run_id: str, commits: list[Commit], seen: list[Witness]) -> list[str]:
    """Why a run's journal shows two leases at work at once (empty when it does not).

    ``commits``: the witness reports in the journal, in order; ``seen``: every report the
    service received for the run, committed or not. Two rules, each broken by a write that
    fencing should have refused:

    * lease tokens never go backwards along the journal, and one token has one owner;
    * once an activation holding token ``t`` has been seen at work on the journal as it
      stood at ``head``, no commit after ``head`` was made under an older token — i.e. the
      older lease stopped being valid when the newer one was granted.
    """
    problems = []
    owners: dict[int, str] = {}
    for prev, cur in itertools.pairwise(commits):
        if cur.token < prev.token:
            problems.append(f"run {run_id}: seq {cur.seq} committed under token {cur.token} "
                            f"({cur.owner}) after seq {prev.seq} under token {prev.token}")
    for c in commits:
        if owners.setdefault(c.token, c.owner) != c.owner:
            problems.append(f"run {run_id}: token {c.token} held by {owners[c.token]} and "
                            f"{c.owner}")
    for w in seen:
        late = [c for c in commits if c.seq > w.head and c.token < w.token]
        if late:
            problems.append(
                f"run {run_id}: token {w.token} ({w.owner}) was at work from seq {w.head}, "
                f"yet seq {late[0].seq} was committed under older token {late[0].token}")
    return problems


def verify(engine: Engine, svc: OutsideService, workers: Workers, plan: Plan,
           pauses: list[Pause], tally: Tally) -> None:
    """Check every run against its journal, the service and the pauses (see the tests)."""
    problems = tally.problems
    effects, witnesses = svc.ledger.snapshot_with_witnesses()
    tally.stale_effects_refused = svc.ledger.refused
    seen_by_run: dict[str, list[Witness]] = {}
    for w in witnesses:
        seen_by_run.setdefault(w.run, []).append(w)
    rows = {r.idempotency_key: r for r in engine.store.list_runs("default", limit=1_000_000)}
    if set(rows) != {f"chaos-{i}" for i in range(plan.runs)}:
        problems.append(f"{len(rows)} runs exist, {plan.runs} were started")
    tokens_by_run: dict[str, list[int]] = {}
    committed: dict[str, set[tuple[int, str, str, int]]] = {}
    for i in range(plan.runs):
        row = rows.get(f"chaos-{i}")
        if row is None:
            continue
        tally.runs += 1
        rid = row.run_id
        audit = engine.journal.verify("default", rid)
        if not audit.ok:
            problems.append(f"run {rid}: journal does not verify: {audit}")
        history = engine.journal.history("default", rid)
        tally.events += len(history)
        if [r.seq for r in history] != list(range(1, len(history) + 1)):
            problems.append(f"run {rid}: sequence numbers are not contiguous")
        set_ = Counter(r.event.timer_id for r in history if isinstance(r.event, ev.TimerSet))
        fired = Counter(r.event.timer_id for r in history if isinstance(r.event, ev.TimerFired))
        tally.timers += len(set_)
        if len(set_) != 1 or fired != set_:
            problems.append(f"run {rid}: timers set {dict(set_)}, fired {dict(fired)}")
        tally.reconciled += sum(1 for r in history
                                if isinstance(r.event, ev.ToolSucceeded) and r.event.reconciled)
        commits = committed_witnesses(engine, rid)
        tally.steps_witnessed += len(commits)
        tokens = sorted({c.token for c in commits})
        tokens_by_run[rid] = tokens
        tally.activations += len(tokens)
        problems.extend(fencing_problems(rid, commits, seen_by_run.get(rid, [])))
        done = {(c.token, c.step, c.at, c.head) for c in commits}
        committed[rid] = done
        for w in seen_by_run.get(rid, []):
            if (w.token, w.step, w.at, w.head) in done:
                continue
            tally.uncommitted_steps += 1
            if any(p.held.get(rid) == w.token and w.received >= p.resumed_at for p in pauses):
                tally.stale_steps_refused += 1
        state = engine.state(rid)
        mine = {k: d for k, d in effects.items() if k.startswith(f"{rid}:")}
        outcome = state.result if state.status == "completed" else state.error
        check_effects(rid, i, plan.loops, state.status, outcome, mine, tally)
    check_pauses(workers, pauses, tokens_by_run, seen_by_run, committed, tally)


def check_pauses(workers: Workers, pauses: list[Pause], tokens_by_run: dict[str, list[int]],
                 seen_by_run: dict[str, list[Witness]],
                 committed: dict[str, set[tuple[int, str, str, int]]], tally: Tally) -> None:
    """The runs a frozen worker held were taken over under a newer lease, and once thawed
    the worker gave up each of them it still had work in flight on, saying so in its log:
    its commit was refused (stale lease token) or its heartbeat found the lease gone and
    cancelled the step.

    A run is taken over when another worker claimed it before the thaw (:class:`Pause`
    records what the runs' rows said then). A run nobody claimed meanwhile stays with the
    thawed worker, which carries on (on SQLite the frozen worker may hold the database's
    write lock, so nobody could claim anything); newer leases granted once it handed the
    run back are ordinary claims, not takeovers — unless its log says it gave the run up
    (claimed between the thaw and its first write). What a worker must have given up is a
    run taken from it on which it reported a step that never reached the journal: a step
    it had in flight and could not commit. A worker SIGKILLed soon after its thaw may not
    get to log."""
    by_owner = {w.owner: w for w in workers.all}
    for p in pauses:
        w = by_owner[p.owner]
        log = workers.log(w)
        for rid, token in p.held.items():
            # Fenced ("gave up"), or a database error met mid-step (handed back): either
            # way the thawed worker said it left the run.
            said = f"gave up run {rid}:" in log or f"run {rid} (tenant default) failed in " \
                "this worker; handing it back" in log
            if rid not in p.taken and not said:
                tally.kept_after_thaw += 1
                continue
            tally.takeovers += 1
            if said:
                tally.refusals_logged += 1
                continue
            lost = [s for s in seen_by_run.get(rid, [])
                    if s.owner == p.owner and s.token == token
                    and (s.token, s.step, s.at, s.head) not in committed.get(rid, set())]
            if lost and not w.killed:
                newer = [t for t in tokens_by_run.get(rid, []) if t > token]
                tally.problems.append(
                    f"worker {w.owner}, frozen holding run {rid} (token {token}; taken over "
                    f"under {newer or 'a newer token'} before its thaw), reported "
                    f"{[(s.step, s.at) for s in lost]} under its old lease, never committed, "
                    f"yet did not say it gave the run up; its log:\n"
                    f"{log[-2000:] or '(empty)'}")


def check_effects(rid: str, i: int, loops: int, status: str, result: Any,
                  mine: dict[str, Delivery], tally: Tally) -> None:
    """The run completed with the result its two effects imply; each effect happened once."""
    problems = tally.problems
    if status != "completed":
        problems.append(f"run {rid} ended {status}: {result!r}")
        return
    seen = check_once(f"run {rid}", ((d.key, d) for d in mine.values()), problems)
    tally.effects += len(mine)
    tally.duplicate_effects += seen.duplicates
    tally.idempotent_redeliveries += seen.idempotent_redeliveries
    by_kind = seen.by_kind
    charges, payments = by_kind.get("charge", []), by_kind.get("payment", [])
    if len(charges) != 1 or len(payments) != 1 or len(mine) != 2:
        problems.append(f"run {rid}: effects {sorted(mine)}")
        return
    want = expected_result(f"c{i}", loops, str(charges[0].result["id"]),
                           str(payments[0].result["id"]))
    if result != want:
        problems.append(f"run {rid}: result {result} != {want}")


@dataclass(frozen=True)
class Cluster:
    """A PostgreSQL server of the test's own, in a temporary directory."""

    bindir: Path
    datadir: Path
    port: int
    as_postgres: tuple[str, ...]

    @property
    def url(self) -> str:
        """Where the server listens."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *args: str) -> None:
        """Run ``pg_ctl`` on this cluster (as the postgres user when we are root)."""
        # A worker the test freezes (SIGSTOP) can be caught between its TCP connect and its
        # startup packet; the server then waits authentication_timeout (default 60 s) for it
        # before a fast shutdown can finish. A short timeout keeps restarts quick.
        opts = (f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1 "
                "-c authentication_timeout=3s")
        cmd = [*self.as_postgres, str(self.bindir / "pg_ctl"), "-D", str(self.datadir),
               "-o", opts, "-l", str(self.datadir / "server.log"), "-w", "-t", "120", *args]
        done = subprocess.run(cmd, capture_output=True, timeout=180, check=False)
        if done.returncode != 0:
            log = (self.datadir / "server.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"pg_ctl {' '.join(args)} failed: "
                                 f"{done.stderr.decode(errors='replace')}\n{log}")

    def restart(self) -> None:
        """Restart the server, disconnecting every client (``pg_ctl restart -m fast``)."""
        self.pg_ctl("-m", "fast", "restart")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[Cluster]:
    """``initdb`` a cluster into a temporary directory, start it on a free port, and remove
    it afterwards. Fails (never skips) when the server binaries are missing."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    if not found:
        raise AssertionError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin "
                             "(install the postgresql package; scripts/ensure-postgres does)")
    bindir = found[-1].parent
    datadir = Path(tempfile.mkdtemp(prefix="underway-chaos-pg-"))
    as_postgres: tuple[str, ...] = ()
    if os.getuid() == 0:
        # The server refuses to run as root.
        shutil.chown(datadir, "postgres")
        as_postgres = ("runuser", "-u", "postgres", "--")
    try:
        init = subprocess.run([*as_postgres, str(bindir / "initdb"), "-D", str(datadir),
                               "-A", "trust", "-U", "postgres", "--no-sync"],
                              capture_output=True, timeout=120, check=False)
        if init.returncode != 0:
            raise AssertionError(f"initdb failed: {init.stderr.decode(errors='replace')}")
        cluster = Cluster(bindir, datadir, _free_port(), as_postgres)
        cluster.pg_ctl("start")
        try:
            yield cluster
        finally:
            with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                cluster.pg_ctl("-m", "immediate", "stop")
    finally:
        shutil.rmtree(datadir, ignore_errors=True)
