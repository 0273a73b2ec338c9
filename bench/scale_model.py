"""The model behind ``bench/scale_sim.py``: 10,000 workers' claim traffic against one
PostgreSQL cluster and against N shards, from costs measured on a real server.

Nothing here touches a database. :class:`Measured` holds what ``scale_sim.measure`` reads
off the local PostgreSQL (backend CPU per statement, per notification); :func:`load`
turns it and a :class:`Workload` into the load one shard sees. The model follows the
worker's loop as the code has it (``underway/worker.py``):

- a worker with a free slot wakes when one of its runs ends, when a NOTIFY reaches it
  (a new run, a signal), when the earliest due time of its shards comes (a timer), and at
  least every ``poll`` seconds;
- each wake claims on every shard the worker serves (round robin, as the regional store
  does) and, when nothing was leased, asks each for its next due time;
- a notification reaches every connection listening on the shard's channel;
- a worker cannot wake faster than one empty loop takes (its statements' CPU on the
  server and in the worker, plus a round trip each).

It is a mean-field model: rates are averages, slots are busy independently with
probability equal to the utilisation, the database's cores are an M/M/c queue. What it
predicts is the *offered* load; a shard offered more CPU than it has saturates, and its
workers then wait instead.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Literal

Mode = Literal["pinned", "every"]
"""How workers meet shards: each worker serves one shard (``pinned``: W/N workers per
shard), or every worker serves every shard (``every``: the regional store's claim)."""


@dataclass(frozen=True, slots=True)
class Measured:
    """Costs read off a real PostgreSQL server: backend CPU seconds, pages."""

    claim_lease_s: float
    """One claim that leases one run (one claimer)."""
    claim_per_run_s: float
    """What each further run of a batch adds to a claim."""
    claim_empty_s: float
    """One claim that finds nothing due."""
    claim_per_tenant_s: float
    """What each further tenant with scheduled runs adds to a claim."""
    tenants: int
    """Tenants with scheduled runs when the claims above were measured."""
    next_due_s: float
    """One ``next_due_at`` (the idle worker's question)."""
    schedules_s: float
    """One ``claim_schedules`` finding no tick due (each worker's once a second)."""
    loop_client_s: float
    """The worker's own CPU for an empty claim and a ``next_due_at`` (its thread's)."""
    notify_send_s: float
    """The sending backend, per notification, with one listener."""
    notify_send_per_listener_s: float
    """What each further listener adds to the sender, per notification."""
    notify_deliver_s: float
    """A listening backend, per notification it passes on."""
    claim_pages: float
    """Shared buffers one leasing claim touches (hit + read)."""
    contention: dict[int, float] = field(default_factory=dict)
    """K concurrent claimers -> CPU per leased run, against one claimer."""

    def inputs(self) -> dict[str, float]:
        """Every measured number, by name (for checks and the report)."""
        out = {k: float(getattr(self, k)) for k in (
            "claim_lease_s", "claim_per_run_s", "claim_empty_s", "claim_per_tenant_s",
            "next_due_s", "schedules_s", "loop_client_s",
            "notify_send_s", "notify_send_per_listener_s", "notify_deliver_s",
            "claim_pages")}
        out.update({f"contention_{k}": v for k, v in sorted(self.contention.items())})
        return out

    def contention_at(self, claimers: float) -> float:
        """The contention factor at ``claimers`` concurrent claimers: linear between the
        measured points, the last measured one beyond them, 1 below one claimer; never
        below 1 (a measured discount is noise, not a saving)."""
        points = sorted(self.contention.items()) or [(1, 1.0)]
        if claimers <= points[0][0]:
            return max(1.0, points[0][1]) if claimers >= 1 else 1.0
        for (k0, v0), (k1, v1) in itertools.pairwise(points):
            if claimers <= k1:
                return max(1.0, v0 + (v1 - v0) * (claimers - k0) / (k1 - k0))
        return max(1.0, points[-1][1])

    def at_tenants(self, tenants: float) -> Measured:
        """The claims' costs on a database where ``tenants`` tenants have scheduled runs:
        each tenant adds :attr:`claim_per_tenant_s` to every claim (the tenant-fair walk
        visits each), never below a fifth of the measured cost."""
        extra = self.claim_per_tenant_s * (tenants - self.tenants)
        return replace(self, claim_lease_s=max(self.claim_lease_s + extra,
                                               self.claim_lease_s / 5),
                       claim_empty_s=max(self.claim_empty_s + extra, self.claim_empty_s / 5),
                       tenants=round(tenants))


@dataclass(frozen=True, slots=True)
class Workload:
    """The fleet and its work (assumed, not measured)."""

    workers: int = 10_000
    tenants: int = 2_000
    """Tenants with scheduled runs, spread evenly over the shards."""
    slots: int = 10
    """Runs each worker drives at once (``--concurrency``)."""
    step_s: float = 10.0
    """Mean activation: a step waiting on a model or a tool."""
    utilisation: float = 0.6
    """Share of all slots busy."""
    notified_share: float = 0.5
    """Share of activations made due by a NOTIFY (new runs, signals); timers the rest."""
    poll_s: float = 1.0
    schedules_every_s: float | None = 1.0
    """How often each worker looks for due schedule ticks on each shard (None: never)."""
    rtt_s: float = 0.0005
    """Network round trip between a worker and a database."""
    pool_connections: int = 2
    """Pooled connections a worker keeps to each database it serves, beside its LISTEN."""
    cores: int = 32
    """CPU cores of each cluster's primary."""
    woken_per_due: int | None = None
    """Workers a due run wakes: None, every idle listener (the code today); k, a
    proposed wake-k scheme (k sub-channels' worth of listeners)."""

    @property
    def activations_per_s(self) -> float:
        """Activations per second the fleet runs: busy slots over the mean activation."""
        return self.utilisation * self.workers * self.slots / self.step_s


@dataclass(frozen=True, slots=True)
class Load:
    """What one shard is offered, per second (``total_*``: all shards together)."""

    shards: int
    mode: Mode
    activations: float
    workers: float
    """Workers whose claims reach this shard."""
    connections: float
    wakes_per_worker: float
    """Wake-ups per second of a worker with a free slot (its loop's cap included)."""
    claims: float
    """Claim statements."""
    schedule_claims: float
    """``claim_schedules`` statements."""
    leasing_claims: float
    empty_claims: float
    next_due: float
    notifies: float
    deliveries: float
    """Notifications passed on to listening connections."""
    concurrent_claimers: float
    cpu_cores: float
    """Backend CPU seconds per second: cores busy with claims, due times, NOTIFY."""
    core_utilisation: float
    claim_latency_s: float
    """Mean claim time under M/M/c on the shard's cores (inf: saturated)."""
    total_cpu_cores: float
    total_connections: float
    total_deliveries: float


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with ``servers`` servers and
    ``offered`` Erlangs (arrival rate x service time); 1 when ``offered >= servers``."""
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    b = 1.0  # Erlang B, by its stable recurrence
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
    rho = offered / servers
    return b / (1 - rho + rho * b)


def mmc_response(servers: int, rate: float, service_s: float) -> float:
    """Mean time in an M/M/c system (wait + service); inf when it cannot keep up."""
    offered = rate * service_s
    if offered >= servers:
        return math.inf
    if rate <= 0:
        return service_s
    return erlang_c(servers, offered) * service_s / (servers - offered) + service_s


def load(m: Measured, w: Workload, *, shards: int, mode: Mode = "pinned") -> Load:
    """The load one of ``shards`` shards is offered (tenants spread evenly over them)."""
    if shards < 1:
        raise ValueError("at least one shard")
    served = 1 if mode == "pinned" else shards
    m = m.at_tenants(w.tenants / shards)
    lam = w.activations_per_s / shards  # runs made due on this shard
    workers = w.workers / shards if mode == "pinned" else float(w.workers)
    free = 1.0 - w.utilisation ** w.slots  # a worker has a free slot
    idle = workers * free
    # Wake-ups of an idle worker: its own runs ending, the due runs of every shard it
    # serves (each wakes every idle listener, or k of them), and the poll.
    per_due = 1.0 if w.woken_per_due is None else min(1.0, w.woken_per_due / max(idle, 1e-9))
    heard = w.activations_per_s / w.workers + served * lam * per_due + 1.0 / w.poll_s
    loop_s = served * (m.claim_empty_s + m.next_due_s + m.loop_client_s + 2 * w.rtt_s)
    wakes = min(heard, 1.0 / loop_s)
    claims = idle * wakes  # each wake claims once on each shard it serves
    leasing = min(lam, claims)  # every due run is leased once, one claim each
    empty = claims - leasing
    notifies = w.notified_share * lam
    listeners = workers if w.woken_per_due is None else min(workers, w.woken_per_due)
    deliveries = notifies * listeners
    ticks = 0.0 if w.schedules_every_s is None else workers / w.schedules_every_s
    # Concurrent claimers (Little's law over the claims' CPU) set the contention factor.
    concurrent = leasing * m.claim_lease_s + empty * m.claim_empty_s
    cpu = (leasing * m.claim_lease_s * m.contention_at(concurrent)
           + empty * m.claim_empty_s + empty * m.next_due_s + ticks * m.schedules_s
           + notifies * (m.notify_send_s + m.notify_send_per_listener_s * max(
               listeners - 1, 0))
           + deliveries * m.notify_deliver_s)
    per_claim = cpu / claims if claims > 0 else m.claim_lease_s
    connections = workers * (w.pool_connections + 1)
    return Load(
        shards=shards, mode=mode, activations=lam, workers=workers, connections=connections,
        wakes_per_worker=wakes, claims=claims, schedule_claims=ticks, leasing_claims=leasing,
        empty_claims=empty,
        next_due=empty, notifies=notifies, deliveries=deliveries,
        concurrent_claimers=concurrent, cpu_cores=cpu, core_utilisation=cpu / w.cores,
        claim_latency_s=mmc_response(w.cores, claims, per_claim),
        total_cpu_cores=cpu * shards, total_connections=connections * shards,
        total_deliveries=deliveries * shards,
    )


def damped(w: Workload, k: int) -> Workload:
    """The workload with a due run waking ``k`` workers instead of every idle one."""
    return replace(w, woken_per_due=k)
