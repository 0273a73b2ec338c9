"""Crash safety with real processes killed by SIGKILL, on SQLite and PostgreSQL.

For each seed a child process (``worker.py``) starts a batch of runs and drives them;
it is killed at a seeded fault point (``UNDERWAY_CRASH_AFTER``, sometimes counting only the
points around effects, such as ``effect.after_run``: the effect happened, its outcome is not
journaled) or from outside after a seeded delay, then fresh children take over until every
run is final. Escalated runs (a non-idempotent tool without a reconcile hook lost its
outcome) are settled by the harness acting as operator: it asks the outside service whether
the key arrived and resolves accordingly.

What a user is promised, and what is checked against the store and the outside service:
every run completes with its expected result; each run's journal is contiguous, its hash
chain verifies, and whatever was committed before a kill is still there byte for byte;
a non-idempotent effect reaches the outside world exactly once per key; idempotent
re-deliveries are allowed and counted.

``UNDERWAY_CRASH_KILLS`` sets the total number of kills across both backends (default
40; ``make soak`` uses 10000). Whatever the number, each backend goes on until every kind
of kill (:data:`KILL_MODES`) has struck at least once and a hidden outcome has been
reconciled, so the default sees them all.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from worker import invoices_for, is_letter_run, run_key

from fakes.invariants import Journals, check_once, check_prefix, journals
from fakes.outside_service import Delivery, OutsideService
from underway import Engine, connect
from underway import events as ev

# Hundreds of real processes take minutes on a busy machine, more than the suite's default
# limit (pyproject.toml), which is for tests that take seconds: this one only catches a
# hang. ``make soak`` (UNDERWAY_CRASH_KILLS) runs for as long as its load needs.
SUITE_TIMEOUT_S = 0 if os.environ.get("UNDERWAY_CRASH_KILLS") else 1800
pytestmark = [pytest.mark.crash, pytest.mark.timeout(SUITE_TIMEOUT_S)]

WORKER = Path(__file__).with_name("worker.py")
RUNS_PER_CHILD = 6
"""Runs per batch: every kill interrupts several runs at different points."""
BACKENDS = 2
CHILD_TIMEOUT_S = 120.0
"""A child that does not finish by then has a stuck run: that fails the test."""
MAX_CHILDREN_PER_SEED = 40
EFFECT_POINTS = ("effect.before_run", "effect.after_run")
"""Points that bracket an effect: kills counting only these land on the outside world's edge."""
GROUP_POINTS = "group.before_commit,group.uncommitted,group.after_commit"
"""Points around and inside a group commit's transaction (the child's runs in flight commit
together): kills counting only these land in the middle of a group."""
KILL_MODES = ("fault", *EFFECT_POINTS, "outside", "pair", "group")
"""How a child dies: at a seeded fault point of any kind, at one of :data:`EFFECT_POINTS`,
by SIGKILL from outside after a seeded delay, while a second worker shares its batch, or
around or inside a group commit (:data:`GROUP_POINTS`)."""
DEFAULT_KILLS = 40
"""Kills across both backends without ``UNDERWAY_CRASH_KILLS``."""
BACKEND_PARAMS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                  pytest.param("pgbouncer", marks=pytest.mark.postgres)]
"""``pgbouncer``: PostgreSQL through a real PgBouncer in transaction mode, workers polling."""



def kill_budget() -> int:
    """Kills each backend must see: ``UNDERWAY_CRASH_KILLS`` shared by the backends."""
    total = int(os.environ.get("UNDERWAY_CRASH_KILLS", "0") or 0) or DEFAULT_KILLS
    return max(1, total // BACKENDS)


@dataclass
class Tally:
    """What one backend's crash run did and found."""

    backend: str
    kills: int = 0
    kills_at_fault_point: int = 0
    kills_from_outside: int = 0
    children: int = 0
    seeds: int = 0
    runs: int = 0
    events: int = 0
    effects: int = 0
    duplicate_effects: int = 0
    idempotent_redeliveries: int = 0
    reconciled: int = 0
    resolved_succeeded: int = 0
    resolved_retry: int = 0
    clean_fault_points: int = 0
    kills_by_mode: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def not_seen(self) -> list[str]:
        """What the run has yet to see: kinds of kill (:data:`KILL_MODES`) that have not
        struck, and an effect whose outcome a kill hid being reconciled on restart."""
        missing = [f"a kill {m}" for m in KILL_MODES if not self.kills_by_mode[m]]
        return missing + ([] if self.reconciled else ["a reconciled outcome"])


@dataclass(frozen=True)
class ChildResult:
    """How one child ended."""

    killed: bool
    hits: int
    grouped: int = 0
    """Commits that shared a transaction with another run's (group commit)."""


def spawn(
    url: str, service: str, tenant: str, *, mix: str = "mixed", crash_after: int | None = None,
    points: str | None = None, together: bool = True,
) -> subprocess.Popen[bytes]:
    """Start one worker process, armed to kill itself at fault point ``crash_after``;
    ``together``: it advances its runs at once (their commits grouped), else one by one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_after is not None:
        env["UNDERWAY_CRASH_AFTER"] = str(crash_after)
    if points is not None:
        env["UNDERWAY_CRASH_POINTS"] = points
    cmd = [sys.executable, str(WORKER), "--db", url, "--service", service, "--tenant", tenant,
           "--runs", str(RUNS_PER_CHILD), "--mix", mix, "--lease-ttl", "2",
           "--concurrency", str(RUNS_PER_CHILD if together else 1)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def run_child(
    url: str, service: str, tenant: str, *, mix: str = "mixed", crash_after: int | None = None,
    points: str | None = None, kill_after: float | None = None, together: bool = True,
) -> ChildResult:
    """Run one worker process; SIGKILL it after ``kill_after`` seconds if still alive."""
    proc = spawn(url, service, tenant, mix=mix, crash_after=crash_after, points=points,
                 together=together)
    return finish(proc, tenant, kill_after=kill_after)


def finish(
    proc: subprocess.Popen[bytes], tenant: str, *, kill_after: float | None = None
) -> ChildResult:
    """Wait for a worker (SIGKILLing it after ``kill_after`` seconds); fail if it broke."""
    try:
        if kill_after is not None:
            try:
                out, err = proc.communicate(timeout=kill_after)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
        else:
            out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"worker for {tenant} hung for {CHILD_TIMEOUT_S}s (a stuck run?):\n"
                    f"{err.decode(errors='replace')[-4000:]}")
    if proc.returncode == -signal.SIGKILL:
        return ChildResult(True, 0)
    if proc.returncode != 0:
        pytest.fail(f"worker for {tenant} exited with {proc.returncode}:\n"
                    f"{err.decode(errors='replace')[-4000:]}")
    report = json.loads(out.decode().strip().splitlines()[-1])
    return ChildResult(False, int(report["hits"]), int(report["grouped"]))


def ask_service(service: str, key: str) -> dict[str, Any]:
    """What an operator does: ask the outside system whether ``key`` arrived."""
    with urllib.request.urlopen(f"{service}/effects/{key}", timeout=10) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
        return answer


def settle_escalations(engine: Engine, service: str, tenant: str, tally: Tally) -> bool:
    """Resolve every escalated run of ``tenant`` from what the service says; False when a
    run escalated for a reason no operator should ever see in this workload."""
    for row in engine.store.list_runs(tenant, status="escalated", limit=10_000):
        esc = engine.state(row.run_id, tenant_id=tenant).escalation
        assert esc is not None
        key = esc.key
        if not isinstance(key, str) or esc.tool != "post_letter":
            tally.problems.append(f"run {row.run_id} escalated unexpectedly: {esc}")
            return False
        seen = ask_service(service, key)
        if seen["seen"]:
            engine.resolve(row.run_id, resolution="succeeded", result=seen["result"],
                           by="operator", tenant_id=tenant)
            tally.resolved_succeeded += 1
        else:
            engine.resolve(row.run_id, resolution="retry", by="operator", tenant_id=tenant)
            tally.resolved_retry += 1
    return True


def verify_run(engine: Engine, effects: dict[str, Delivery], tenant: str, rid: str, i: int,
               mix: str, tally: Tally) -> None:
    """Run ``i`` of the batch completed as intended; the service saw its effects once."""
    problems = tally.problems
    audit = engine.journal.verify(tenant, rid)
    if not audit.ok:
        problems.append(f"{tenant}/{rid}: journal does not verify: {audit}")
    history = engine.journal.history(tenant, rid)
    tally.events += len(history)
    if [r.seq for r in history] != list(range(1, len(history) + 1)):
        problems.append(f"{tenant}/{rid}: seqs not contiguous")
    outcomes = Counter(
        r.event.key for r in history
        if isinstance(r.event, ev.ToolSucceeded)
        or (isinstance(r.event, ev.EscalationResolved) and r.event.resolution == "succeeded")
    )
    tally.reconciled += sum(
        1 for r in history if isinstance(r.event, ev.ToolSucceeded) and r.event.reconciled
    )
    for k, n in outcomes.items():
        if n != 1:
            problems.append(f"{tenant}/{rid}: {n} committed outcomes for key {k}")
    state = engine.state(rid, tenant_id=tenant)
    if state.status != "completed":
        problems.append(f"{tenant}/{rid}: ended {state.status}: {state.error}")
        return
    mine = {k: d for k, d in effects.items() if k.startswith(f"{rid}:")}
    tally.effects += len(mine)
    seen = check_once(f"{tenant}/{rid}", sorted(
        mine.items(), key=lambda kd: str(kd[1].payload.get("invoice"))), problems)
    tally.duplicate_effects += seen.duplicates
    tally.idempotent_redeliveries += seen.idempotent_redeliveries
    by_kind = seen.by_kind
    problems += [f"{tenant}/{rid}: effect {k} has no committed outcome"
                 for k in sorted(mine) if k not in outcomes]
    result = state.result
    if is_letter_run(i, mix):
        letters = by_kind.get("letter", [])
        want: Any = {"customer": f"c{i}", "letter": letters[0].result["id"] if letters else 0}
        if len(letters) != 1 or set(by_kind) != {"letter"} or result != want:
            problems.append(f"{tenant}/{rid}: {len(letters)} letters, result {result}")
        return
    invoices = invoices_for(i)
    reminders, payments = by_kind.get("reminder", []), by_kind.get("payment", [])
    ref = result.get("ref") if isinstance(result, dict) else None
    want = {
        "customer": f"c{i}", "ref": ref,
        "reminders": [d.result["id"] for d in reminders],
        "payments": [d.result["id"] for d in payments],
        "paid_cents": sum(inv["cents"] for inv in invoices),
    }
    if result != want:
        problems.append(f"{tenant}/{rid}: result {result} != {want}")
    for kind, sent in (("reminder", reminders), ("payment", payments)):
        if [d.payload["invoice"] for d in sent] != [inv["id"] for inv in invoices]:
            problems.append(f"{tenant}/{rid}: {kind}s went to "
                            f"{[d.payload['invoice'] for d in sent]}")
        if {d.payload["ref"] for d in sent} != {ref}:
            problems.append(f"{tenant}/{rid}: ctx.uuid() changed between attempts")


def verify_batch(engine: Engine, svc: OutsideService, tenant: str, tally: Tally,
                 mix: str = "mixed") -> None:
    """Every run of the batch exists once and completed as intended."""
    listed = engine.store.list_runs(tenant, limit=10_000)
    rows = {r.idempotency_key: r for r in listed}
    expected = {run_key(tenant, i): i for i in range(RUNS_PER_CHILD)}
    if set(rows) != set(expected) or len(listed) != len(expected):
        tally.problems.append(f"{tenant}: runs {sorted(map(str, rows))} != {sorted(expected)}")
    effects = svc.ledger.snapshot()
    for key, i in expected.items():
        if (row := rows.get(key)) is not None:
            tally.runs += 1
            verify_run(engine, effects, tenant, row.run_id, i, mix, tally)


def drive_seed(
    seed: int, url: str, svc: OutsideService, engine: Engine, tally: Tally, ranges: dict[str, int],
    clean_seconds: float,
) -> None:
    """One batch: kill its children a seeded number of times, then let it finish."""
    rng = random.Random(seed)
    tenant = f"seed{seed}"
    planned = rng.randint(1, 4)
    kills = 0
    before: Journals = {}
    for child in range(MAX_CHILDREN_PER_SEED):
        mode = "clean" if kills >= planned else rng.choices(
            KILL_MODES, weights=[4, 2, 3, 2, 2, 2])[0]
        if mode == "pair":
            # Two workers share the batch; one dies mid-way and the other takes over
            # its runs (fencing, claiming and dead-lease reclaim across processes).
            doomed = spawn(url, svc.url, tenant, crash_after=rng.randint(1, ranges["fault"] // 2))
            survivor = spawn(url, svc.url, tenant)
            res = finish(doomed, tenant)
            finish(survivor, tenant)
            tally.children += 1
        elif mode == "fault":
            res = run_child(url, svc.url, tenant, crash_after=rng.randint(1, ranges["fault"]))
        elif mode in EFFECT_POINTS:
            res = run_child(url, svc.url, tenant, crash_after=rng.randint(1, ranges[mode]),
                            points=mode)
        elif mode == "group":
            res = run_child(url, svc.url, tenant, crash_after=rng.randint(1, ranges[mode]),
                            points=GROUP_POINTS)
        elif mode == "outside":
            res = run_child(url, svc.url, tenant, kill_after=rng.uniform(0.05, clean_seconds))
        else:
            res = run_child(url, svc.url, tenant)
        tally.children += 1
        if res.killed:
            kills += 1
            tally.kills += 1
            tally.kills_by_mode[mode] += 1
            if mode == "outside":
                tally.kills_from_outside += 1
            else:
                tally.kills_at_fault_point += 1
        after = journals(engine.store, tenant)
        check_prefix(before, after, tally.problems, f"{tenant} child {child} ({mode})")
        before = after
        statuses = {r.status for r in engine.store.list_runs(tenant, limit=10_000)}
        if len(after) == RUNS_PER_CHILD and statuses == {"completed"}:
            break
        if not res.killed and "escalated" not in statuses:
            tally.problems.append(f"{tenant}: a child finished but runs are {statuses}")
            return
        if not settle_escalations(engine, svc.url, tenant, tally):
            return
    else:
        tally.problems.append(f"{tenant}: runs not final after {MAX_CHILDREN_PER_SEED} children")
        return
    verify_batch(engine, svc, tenant, tally)


def measure(url: str, svc: OutsideService, engine: Engine, tally: Tally) -> tuple[dict[str, int],
                                                                             float]:
    """Fault points a clean batch passes (all of them, and each of :data:`EFFECT_POINTS`
    alone), and how long a clean child takes."""
    began = time.perf_counter()
    ranges = {"fault": run_child(url, svc.url, "clean-fault", crash_after=10**9).hits}
    seconds = time.perf_counter() - began
    for point in EFFECT_POINTS:
        ranges[point] = run_child(url, svc.url, f"clean-{point}", crash_after=10**9,
                                  points=point).hits
    grouped = run_child(url, svc.url, "clean-group", crash_after=10**9, points=GROUP_POINTS)
    # The group kills must land among runs that really commit together.
    assert grouped.grouped > 0, "a clean child's runs in flight never committed together"
    ranges["group"] = grouped.hits
    for mode in ranges:
        verify_batch(engine, svc, f"clean-{mode}", tally)
    tally.clean_fault_points = ranges["fault"]
    return ranges, seconds


def db_url(backend: str, request: pytest.FixtureRequest) -> str:
    """A fresh database of ``backend``."""
    url: str = request.getfixturevalue(f"{backend}_url" if backend != "postgres" else "pg_url")
    return url


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_sigkill_anywhere_loses_nothing_and_repeats_no_effect(
    backend: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str],
    record_property: Any,
) -> None:
    url = db_url(backend, request)
    tally = Tally(backend)
    # Through PgBouncer half as many kills: the same kinds all strike (not_seen), and the
    # store's logic is the one the postgres case kills twice as often.
    budget = max(1, kill_budget() // 2) if backend == "pgbouncer" else kill_budget()
    store = connect(url)
    engine = Engine(store)
    with OutsideService() as svc:
        ranges, clean_seconds = measure(url, svc, engine, tally)
        assert ranges["fault"] > ranges["effect.after_run"] == ranges["effect.before_run"] > 0
        seed = 0
        while ((tally.kills < budget or tally.not_seen()) and seed < 4 * budget + 40
               and len(tally.problems) < 20):
            drive_seed(seed, url, svc, engine, tally, ranges, clean_seconds)
            seed += 1
        tally.seeds = seed
    store.close()
    summary = {k: v for k, v in asdict(tally).items() if k not in ("problems", "kills_by_mode")}
    summary["problems"] = len(tally.problems)
    summary["by_mode"] = ",".join(f"{m}:{tally.kills_by_mode[m]}" for m in KILL_MODES)
    record_property("crash_summary", json.dumps(summary))
    with capsys.disabled():
        print(f"\ncrash[{backend}] " + " ".join(f"{k}={v}" for k, v in summary.items()))
    assert not tally.problems, "\n".join(tally.problems[:20])
    assert tally.kills >= budget
    assert not tally.not_seen(), f"never saw {tally.not_seen()}"
    assert tally.duplicate_effects == 0


SETTLE_CASES = [
    pytest.param("dunning", "effect.after_run", (1, 0, 0), id="reconciled-happened"),
    pytest.param("dunning", "effect.before_run", (0, 0, 0), id="reconciled-not-happened"),
    pytest.param("letters", "effect.after_run", (0, 1, 0), id="operator-succeeded"),
    pytest.param("letters", "effect.before_run", (0, 0, 1), id="operator-retry"),
]
"""How a hidden outcome is settled. Through PgBouncer two of them run (one reconciled,
one by the operator, each through a kill): the other two differ only in the outside
service's answer, not in what reaches the database."""


def settle_params() -> list[Any]:
    """Each of :data:`SETTLE_CASES` on each backend; two of them through PgBouncer."""
    out = []
    for backend in BACKEND_PARAMS:
        name = backend if isinstance(backend, str) else str(backend.values[0])
        marks = () if isinstance(backend, str) else backend.marks
        for case in SETTLE_CASES:
            if name == "pgbouncer" and case.id not in ("reconciled-happened", "operator-retry"):
                continue
            out.append(pytest.param(name, *case.values, id=f"{case.id}-{name}", marks=marks))
    return out


@pytest.mark.parametrize(("backend", "mix", "point", "settled"), settle_params())
def test_an_effect_hidden_by_a_kill_is_settled_once(
    backend: str, mix: str, point: str, settled: tuple[int, int, int],
    request: pytest.FixtureRequest,
) -> None:
    """Kill the first mutating call of a batch right before or right after it reaches the
    service: the reconcile hook, or else the operator, asks the service once, and the
    effect happens exactly once. ``settled``: (reconciled outcomes, operator "succeeded"
    resolutions, operator "retry" resolutions)."""
    url = db_url(backend, request)
    tally = Tally(backend)
    store = connect(url)
    engine = Engine(store)
    with OutsideService() as svc:
        # The first run's lookup passes the point first, its first mutating call second
        # (the runs advance one by one, so no other run's call comes between).
        assert run_child(url, svc.url, "t", mix=mix, crash_after=2, points=point,
                         together=False).killed
        delivered = [d.kind for d in svc.ledger.snapshot().values()]
        assert delivered == (["letter" if mix == "letters" else "reminder"]
                             if point == "effect.after_run" else [])
        done = run_child(url, svc.url, "t", mix=mix)
        escalated = store.list_runs("t", status="escalated")
        assert len(escalated) == (1 if mix == "letters" else 0)
        if escalated:
            assert settle_escalations(engine, svc.url, "t", tally)
            done = run_child(url, svc.url, "t", mix=mix)
        assert not done.killed
        verify_batch(engine, svc, "t", tally, mix)
        asked = svc.ledger.queries
    store.close()
    assert not tally.problems, "\n".join(tally.problems)
    assert tally.duplicate_effects == 0
    assert (tally.reconciled, tally.resolved_succeeded, tally.resolved_retry) == settled
    assert asked == 1  # the one unknown outcome, asked about once
