"""Past one PostgreSQL: 10,000 workers' claim traffic against one cluster and against N
shards (docs/scale.md). Group ``scale`` of ``bench/run.py``.

Measured, on the benchmark's PostgreSQL (which must run on this machine: a backend's CPU
time is read from ``/proc/<pid>/schedstat``, nanoseconds the kernel counted):

- the backend CPU of the store's own ``claim`` (``PostgresStore.claim``: the
  tenant-fair ``claim_candidates`` and ``take_leases``, its transaction included) leasing
  1 and 10 runs out of 20 tenants' due runs, and finding none due (with 20 and with 500
  tenants scheduled); of ``next_due_at`` and ``claim_schedules``; the worker's own CPU
  for an idle loop's claim and ``next_due_at``;
- the shared buffers one claim touches (``EXPLAIN (ANALYZE, BUFFERS)`` of the statement);
- the CPU per leased run with K = 1, 2, 4, 8 claimers at once, each on its own connection
  (``FOR UPDATE SKIP LOCKED``: what skipping each other's rows costs);
- NOTIFY: the sender's CPU per notification with 1 and 16 listeners, and each listening
  backend's CPU per notification it passes on.

Checked (``bench/scale_herd.py``): real workers' claims against the model's prediction
for them, runs made due by NOTIFY and by timers.

Modelled (``bench/scale_model.py``, mean field and M/M/c): 10,000 workers of 10 slots,
activations of 10 s at 60 % of the slots, half of them made due by NOTIFY, 2,000 tenants;
the claims, CPU cores, connections and notifications one cluster and each of N shards
would see. Every modelled figure is printed against the one-cluster figure of the same
run.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

import scale_herd
import scale_model
from common import Figure, median, pg_schema
from scale_model import Load, Measured, Workload

TENANTS = 20
MORE_TENANTS = 500
DUE_PER_TENANT = 100
FINISHED_PER_TENANT = 400
WAITING_PER_TENANT = 100
SHARDS = (4, 16, 64)
CLAIMERS = (1, 2, 4, 8)
LISTENERS = (1, 16)


def backend_cpu(pid: int) -> float:
    """CPU seconds the server process ``pid`` has run (``/proc/<pid>/schedstat``)."""
    path = Path(f"/proc/{pid}/schedstat")
    try:
        return int(path.read_text().split()[0]) / 1e9
    except OSError as exc:
        raise RuntimeError(
            f"cannot read {path}: the scale benchmark reads PostgreSQL backends' CPU time, "
            "so the server must run on this machine") from exc


def _store(url: str) -> Any:
    from underway.store.postgres import PostgresStore

    return PostgresStore(url, min_size=1, max_size=1)


def _pid(store: Any) -> int:
    with store.pool.connection() as conn:
        return int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])


def populate(store: Any, *, tenants: int, due: int, finished: int, waiting: int,
             prefix: str = "t", due_at: float | None = None) -> float:
    """Runs of ``tenants`` tenants named ``prefix`` + a number: ``due`` ready (due now, or
    at ``due_at``), ``waiting`` on timers an hour off, ``finished`` completed, each
    tenant; the table analysed. Returns the time the runs were written at."""
    now = time.time()
    with store.pool.connection() as conn:
        conn.execute("""
            INSERT INTO runs (tenant_id, run_id, flow, status, step, last_seq, last_hash,
                              next_wake_at, created_at, updated_at)
            SELECT %(p)s || (g %% %(t)s), %(p)s || '-r' || g, 'bench', kind, 'step', 1, 'h',
                   CASE kind WHEN 'ready' THEN %(due)s - 1 + g * 1e-6
                             WHEN 'waiting' THEN %(now)s + 3600 + g END,
                   %(now)s, %(now)s
              FROM (SELECT g, CASE WHEN g < %(d)s THEN 'ready'
                                   WHEN g < %(d)s + %(w)s THEN 'waiting'
                                   ELSE 'completed' END AS kind
                      FROM generate_series(0, %(n)s - 1) AS g) AS s
        """, {"p": prefix, "t": tenants, "now": now, "due": now if due_at is None else due_at,
              "d": due * tenants, "w": waiting * tenants,
              "n": (due + waiting + finished) * tenants})
        conn.execute("ANALYZE runs")
    return now


def vacuum(url: str) -> None:
    """``VACUUM (ANALYZE) runs`` in the schema ``url`` selects: each phase starts from a
    table autovacuum has caught up with, not from the previous phase's dead row versions
    (every lease and release writes new versions of the run's row and its index entries)."""
    from underway.store._urls import split_url

    base, schema = split_url(url)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'VACUUM (ANALYZE) "{schema}".runs')


def _claims(store: Any, pid: int, n: int, limit: int, owner: str,
            at: float | None = None) -> tuple[list[float], int]:
    """CPU of ``n`` claims for ``limit`` runs (each handed back after), runs leased;
    claiming as of ``at`` (default: now)."""
    cpu: list[float] = []
    leased = 0
    for _ in range(n):
        before = backend_cpu(pid)
        leases = store.claim(owner=owner, now=time.time() if at is None else at, ttl=30.0,
                             limit=limit)
        cpu.append(backend_cpu(pid) - before)
        leased += len(leases)
        for lease in leases:
            store.release(lease)
    return cpu, leased


def claim_pages(store: Any, limit: int) -> float:
    """Shared buffers (hit + read) of one ``claim_candidates`` for ``limit`` runs, by
    ``EXPLAIN (ANALYZE, BUFFERS)`` in a transaction rolled back."""
    from underway.store import limits
    from underway.store.postgres._connection import _Q

    params = {"now": time.time(), "queues": None, "tenant_id": None, "run_id": None,
              "full": [], "empty_queues": [], "empty_tenants": [], "limit": limit,
              "window": limits.window(limit)}
    with store.pool.connection() as conn, conn.transaction(force_rollback=True):
        row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                           + _Q["claim_candidates"], params).fetchone()
    plan = (row[0] if not isinstance(row[0], str) else json.loads(row[0]))[0]["Plan"]
    return float(plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0))


def contention(url: str, claimers: int, claims_each: int) -> tuple[float, float]:
    """CPU per leased run and share of claims that came back empty, with ``claimers``
    claiming at once, each on its own connection."""
    stores = [_store(url) for _ in range(claimers)]
    try:
        pids = [_pid(s) for s in stores]
        results: list[tuple[list[float], int]] = [([], 0)] * claimers
        gate = threading.Barrier(claimers)

        def work(i: int) -> None:
            gate.wait()
            results[i] = _claims(stores[i], pids[i], claims_each, 1, f"bench-{i}")

        threads = [threading.Thread(target=work, args=(i,)) for i in range(claimers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu = median([c for each, _ in results for c in each])
        leased = sum(n for _, n in results) / (claimers * claims_each)
        return cpu / max(leased, 1e-9), 1 - leased
    finally:
        for s in stores:
            s.close()


def notify_costs(url: str, listeners: int, notifies: int) -> tuple[float, float]:
    """(sender CPU per notification, each listener's CPU per notification), with
    ``listeners`` connections to ``url``'s database listening on a channel of their own."""
    from underway.store._urls import split_url

    base, _ = split_url(url)
    channel = f"scale_{uuid.uuid4().hex[:12]}"
    conns = [psycopg.connect(base, autocommit=True) for _ in range(listeners + 1)]
    try:
        sender, ears = conns[0], conns[1:]
        for c in ears:
            c.execute(f'LISTEN "{channel}"')
        pids = [int(c.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
                for c in conns]
        before = [backend_cpu(p) for p in pids]
        for _ in range(notifies):
            sender.execute("SELECT pg_notify(%s, 'default')", (channel,))
        heard = [sum(1 for _ in c.notifies(timeout=30, stop_after=notifies)) for c in ears]
        if heard != [notifies] * listeners:
            raise RuntimeError(f"listeners heard {heard} of {notifies} notifications")
        after = [backend_cpu(p) for p in pids]
        spent = [a - b for a, b in zip(after, before, strict=True)]
        return spent[0] / notifies, sum(spent[1:]) / (notifies * listeners)
    finally:
        for c in conns:
            c.close()


def measure(url: str, *, tenants: int = TENANTS, more_tenants: int = MORE_TENANTS,
            due: int = DUE_PER_TENANT, finished: int = FINISHED_PER_TENANT,
            waiting: int = WAITING_PER_TENANT, claims: int = 200,
            claimers: tuple[int, ...] = CLAIMERS,
            notifies: int = 200) -> tuple[Measured, dict[str, float]]:
    """Measure the model's inputs on the (empty, fresh) schema ``url`` selects; also
    returns facts of the measurement (empty claims under contention, runs per claim)."""
    store = _store(url)
    facts: dict[str, float] = {}
    try:
        store.migrate()
        written = populate(store, tenants=tenants, due=due, finished=finished, waiting=waiting)
        before_due = written - 60  # claims as of then find nothing due, with no row changed
        pid = _pid(store)
        # The idle worker's statements first, on a table no claim has rewritten yet.
        _claims(store, pid, 20, 1, "bench-warm", before_due)
        vacuum(url)
        empty, got0 = _claims(store, pid, claims, 1, "bench", before_due)
        due_cpu, tick_cpu, loop_cpu = [], [], []
        for _ in range(claims):
            before = backend_cpu(pid)
            store.next_due_at(now=before_due)
            due_cpu.append(backend_cpu(pid) - before)
            # The worker's side of an idle loop: this thread's CPU for an empty claim and
            # a next_due_at (psycopg, the pool, the store's code).
            mine = time.thread_time()
            store.claim(owner="bench", now=before_due, ttl=30.0, limit=1)
            store.next_due_at(now=before_due)
            loop_cpu.append(time.thread_time() - mine)
            before = backend_cpu(pid)
            now = time.time()
            store.claim_schedules(now=now, until=now + 30, flows=["bench"], limit=100)
            tick_cpu.append(backend_cpu(pid) - before)
        # Claims that lease (each run handed back after).
        _claims(store, pid, 20, 1, "bench-warm")
        vacuum(url)
        pages = claim_pages(store, 1)
        one, got1 = _claims(store, pid, claims, 1, "bench")
        vacuum(url)
        ten, got10 = _claims(store, pid, claims // 4, 10, "bench")
        facts["runs_per_claim_1"] = got1 / claims
        facts["runs_per_claim_10"] = got10 / (claims // 4)
        per_claimer: dict[int, float] = {}
        for k in claimers:
            vacuum(url)
            per_run, empty_share = contention(url, k, max(claims // k, 10))
            per_claimer[k] = per_run
            facts[f"empty_share_{k}"] = empty_share
        # More tenants with runs scheduled (timers), none due: what each tenant adds to a
        # claim (the tenant-fair walk visits every one), against empty claims made just
        # before, on the table as the claims above left it.
        vacuum(url)
        empty_less, got_less = _claims(store, pid, claims, 1, "bench", before_due)
        populate(store, tenants=more_tenants - tenants, due=0, finished=0, waiting=5,
                 prefix="u")
        vacuum(url)
        empty_more, got_more = _claims(store, pid, claims, 1, "bench", before_due)
        got0 += got_less
        if got0 or got_more:
            raise RuntimeError(f"{got0 + got_more} runs leased where none was due")
    finally:
        store.close()
    send1, deliver1 = notify_costs(url, LISTENERS[0], notifies)
    send16, deliver16 = notify_costs(url, LISTENERS[1], notifies)
    lease_s = median(one)
    base = per_claimer.get(1) or lease_s
    measured = Measured(
        claim_lease_s=lease_s,
        claim_per_run_s=max((median(ten) - lease_s) / 9, 0.0),
        claim_empty_s=median(empty),
        claim_per_tenant_s=max((median(empty_more) - median(empty_less))
                               / (more_tenants - tenants), 0.0),
        tenants=tenants,
        next_due_s=median(due_cpu),
        schedules_s=median(tick_cpu),
        loop_client_s=median(loop_cpu),
        notify_send_s=send1,
        notify_send_per_listener_s=max((send16 - send1) / (LISTENERS[1] - LISTENERS[0]), 0.0),
        notify_deliver_s=median([deliver1, deliver16]),
        claim_pages=pages,
        contention={k: v / base for k, v in per_claimer.items()},
    )
    return measured, facts


# -- figures ------------------------------------------------------------------------------
def scenarios() -> list[tuple[str, Workload, int, scale_model.Mode]]:
    """(name, workload, shards, mode) of every modelled deployment; the first is the
    one-cluster baseline."""
    w = Workload()
    out: list[tuple[str, Workload, int, scale_model.Mode]] = [("one_cluster", w, 1, "pinned")]
    out += [(f"pinned_{n}", w, n, "pinned") for n in SHARDS]
    out += [(f"every_{n}", w, n, "every") for n in SHARDS[:2]]
    out += [("wake2_one_cluster", scale_model.damped(w, 2), 1, "pinned"),
            ("wake2_pinned_16", scale_model.damped(w, 2), 16, "pinned"),
            # ...and a claim whose cost does not grow with the tenants (as measured at
            # TENANTS): what one cluster could carry with both changes.
            ("wake2_flat_one_cluster", dataclasses.replace(scale_model.damped(w, 2),
                                                           tenants=TENANTS), 1, "pinned")]
    return out


def model_figures(m: Measured) -> list[Figure]:
    """Every modelled deployment's load, against the one-cluster baseline."""
    runs = [(name, scale_model.load(m, w, shards=n, mode=mode))
            for name, w, n, mode in scenarios()]
    base = runs[0][1]
    per_shard: list[tuple[str, str, Callable[[Load], float]]] = [
        ("claims_per_s", "claims/s per shard", lambda x: x.claims),
        ("cpu_cores", "cores per shard", lambda x: x.cpu_cores),
        ("connections", "connections per shard", lambda x: x.connections),
        ("notify_deliveries_per_s", "deliveries/s per shard", lambda x: x.deliveries),
        ("total_cpu_cores", "cores, all shards", lambda x: x.total_cpu_cores),
    ]
    figures = []
    for name, ld in runs:
        for key, unit, get in per_shard:
            value, baseline = get(ld), get(base)
            figures.append(Figure(
                f"scale.{name}.{key}", value, unit, baseline,
                value / baseline if baseline else None, "modelled"))
        figures.append(Figure(f"scale.{name}.core_utilisation", ld.core_utilisation,
                              "share of 32 cores offered", base.core_utilisation,
                              ld.core_utilisation / base.core_utilisation, "modelled",
                              note=">1: saturated, the offered load cannot be served"
                              if name == "one_cluster" and ld.core_utilisation > 1 else ""))
        if ld.claim_latency_s != float("inf"):
            figures.append(Figure(f"scale.{name}.claim_latency_ms", ld.claim_latency_s * 1e3,
                                  "ms per claim (M/M/c)", target="modelled"))
    return figures


def measured_figures(m: Measured, facts: dict[str, float]) -> list[Figure]:
    """The measured inputs (CPU in µs of backend time)."""
    us = 1e6
    out = [
        Figure("scale.measured.claim_lease_cpu", m.claim_lease_s * us, "µs backend CPU"),
        Figure("scale.measured.claim_per_extra_run_cpu", m.claim_per_run_s * us,
               "µs backend CPU", m.claim_lease_s * us, m.claim_per_run_s / m.claim_lease_s),
        Figure("scale.measured.claim_empty_cpu", m.claim_empty_s * us, "µs backend CPU",
               m.claim_lease_s * us, m.claim_empty_s / m.claim_lease_s),
        Figure("scale.measured.claim_per_tenant_cpu", m.claim_per_tenant_s * us,
               "µs backend CPU per tenant scheduled", m.claim_empty_s * us,
               m.claim_per_tenant_s / m.claim_empty_s,
               note=f"from {m.tenants} to {MORE_TENANTS} tenants with runs scheduled"),
        Figure("scale.measured.next_due_cpu", m.next_due_s * us, "µs backend CPU",
               m.claim_lease_s * us, m.next_due_s / m.claim_lease_s),
        Figure("scale.measured.schedule_claim_cpu", m.schedules_s * us, "µs backend CPU",
               m.claim_lease_s * us, m.schedules_s / m.claim_lease_s),
        Figure("scale.measured.idle_loop_worker_cpu", m.loop_client_s * us,
               "µs worker CPU per empty claim + next_due_at", m.claim_empty_s * us,
               m.loop_client_s / m.claim_empty_s),
        Figure("scale.measured.claim_pages", m.claim_pages, "shared buffers per claim"),
        Figure("scale.measured.notify_send_cpu", m.notify_send_s * us, "µs backend CPU"),
        Figure("scale.measured.notify_send_per_listener_cpu",
               m.notify_send_per_listener_s * us, "µs backend CPU"),
        Figure("scale.measured.notify_deliver_cpu", m.notify_deliver_s * us,
               "µs backend CPU per listener", m.notify_send_s * us,
               m.notify_deliver_s / m.notify_send_s if m.notify_send_s else None),
    ]
    for k, v in sorted(m.contention.items()):
        out.append(Figure(f"scale.measured.contention_{k}_claimers", v,
                          "CPU per leased run vs 1 claimer", 1.0, v,
                          note=f"{facts.get(f'empty_share_{k}', 0):.0%} of claims empty"
                          if k > 1 else ""))
    return out


def herd_figures(seen: dict[str, float], predicted: float, *, kind: str) -> list[Figure]:
    """Real workers' claims against the model's prediction for them (bench/scale_herd.py)."""
    ratio = seen["claims_per_s"] / predicted
    # Timers: the model's term is an upper bound (losers of a timer's race back off).
    target, ok = ("<= 1.5", ratio <= 1.5) if kind == "timers" else ("0.5-1.5",
                                                                   0.5 <= ratio <= 1.5)
    return [
        Figure(f"scale.herd_check.{kind}_claims_per_s", seen["claims_per_s"],
               f"claims/s, {scale_herd.WORKERS} real workers, {scale_herd.RATE:g} runs/s",
               predicted, ratio, target, ok,
               note="baseline: the model's claims/s for the same fleet and load"),
        Figure(f"scale.herd_check.{kind}_leased_per_s", seen["leased_per_s"],
               "runs leased/s", scale_herd.RATE, seen["leased_per_s"] / scale_herd.RATE),
    ]


def bench() -> list[Figure]:
    """Measure on a fresh schema, model, and check the model's herd against real workers:
    the ``scale`` group's figures."""
    with pg_schema() as (_, url):
        m, facts = measure(url)
    herd = [f for timers, kind in ((False, "notified"), (True, "timers"))
            for f in herd_figures(*scale_herd.check(m, timers=timers), kind=kind)]
    return measured_figures(m, facts) + herd + model_figures(m)


if __name__ == "__main__":
    for fig in bench():
        print(f"{fig.name:48} {fig.value:14,.3f} {fig.unit:32} "
              f"{'' if fig.ratio is None else f'x{fig.ratio:,.4g}'}")
