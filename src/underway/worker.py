"""Workers: processes that lease ready runs and drive many of them at once.

A :class:`Worker` serves some queues (or all) of one store with one :class:`Engine`. It
claims only as many runs as it has free slots (``concurrency``) and drives each leased run
as an asyncio task (:meth:`Engine.activate`), so one worker keeps many runs moving while
each awaits slow tools or models. Any number of workers, in any number of processes on
any number of machines, may share a database: claiming takes each run once (``FOR UPDATE
SKIP LOCKED`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), every append is fenced by the
lease token, and a run whose worker died is taken over when its lease runs out — at once
when the dead worker was a process of this host.

A waiting run holds no worker: it is a row with ``next_wake_at``. An idle worker sleeps
until the earliest due time of its queues, never longer than ``poll`` seconds, and less
right after it found work. It also listens to its store's wake-ups
(:mod:`underway.store.wakeups`): on PostgreSQL a new run or a signal wakes it at once.

Stopping (:meth:`Worker.stop`, or SIGTERM/SIGINT under ``underway worker``) is graceful:
the worker claims nothing more, lets each run in flight finish the step it is in, hands
it back (another worker continues with the next step), and after ``grace`` seconds
cancels the steps still running and hands those runs back too; their uncommitted work is
redone from the journal by whoever takes them next.

With ``anchoring`` a worker also anchors the heads of the journals on a schedule (and once
more when it stops): see :mod:`underway.ops.audit`. With ``retention`` it sweeps finished runs
past their retention period every ``retention.every`` seconds, on the store's I/O threads
so no step waits for it: see :mod:`underway.privacy.retention`.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import random
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar, cast

from .engine import EagerStart, Engine
from .engine._rows import RowCheck
from .errors import ConfigurationError, ConflictError, FencedError, is_store_failure
from .loading import App, load_app
from .privacy.retention import Retention, RetentionSweeper
from .redaction import redacting_logs
from .runner import Runner
from .store.base import Lease, Store, whole
from .store.wakeups import Polling, Wakeups


class Anchored(Protocol):
    """What a worker logs of an anchor record."""

    @property
    def n(self) -> int: ...
    @property
    def root(self) -> str: ...
    @property
    def leaves(self) -> Sequence[object]: ...


class Anchoring(Protocol):
    """What a worker needs of :class:`~underway.ops.audit.Anchoring`: how often, and one
    round of anchoring the heads that moved."""

    @property
    def every(self) -> float: ...

    def run(
        self, store: Store, anchored: dict[tuple[str, str], tuple[int, str]]
    ) -> Anchored | None:
        """Anchor the heads that moved since ``anchored``; None when none moved."""


__all__ = ["App", "Worker", "load_app"]

log = logging.getLogger("underway.worker")

ScheduleFiring = Callable[..., Coroutine[Any, Any, int]]
R = TypeVar("R")

SCHEDULES_EVERY = 1.0
"""Seconds between a worker's looks for due schedule ticks."""

ROW_CHECK_EVERY = 300.0
"""Seconds between a worker's looks for runs rows its journal contradicts (each such row is
healed once, from the journal: :mod:`underway.engine._rows`). Old live streams are dropped
at the same pace."""
ROW_FULL_CHECK_EVERY = 86400.0
"""Seconds between a worker's looks that check every runs row (the others read less)."""
STREAM_KEEP_S = 3600.0
"""Seconds the deltas of a run no worker holds stay in its live stream (the journal keeps
each call's whole reply): a reader that fell behind has this long to catch up."""


class Worker:
    """Leases ready runs and drives several of them at once on ``engine``.

    Args:
        engine: The engine the runs are driven on.
        queues: The queues it leases runs of; None means every queue.
        concurrency: The most runs driven at once.
        poll: Bounds how long an idle worker sleeps before looking for work again. It waits
            ``min_poll`` after finding work. It waits twice as long each time it finds none,
            up to ``poll``. A worker on PostgreSQL that listens waits ``poll`` outright.
        min_poll: The wait after finding work.
        grace: How long a stopping worker lets steps in flight finish before cancelling
            them.
        listen: Let the store's wake-ups (on PostgreSQL, notifications) wake the worker.
            Otherwise it waits for its poll.
        anchoring: Signs the journals' heads every ``anchoring.every`` seconds.
        retention: Purges finished runs past their period every ``retention.every`` seconds
            (:class:`~underway.privacy.retention.RetentionSweeper`).
        eager: Lease a run the engine starts to this worker in the start's own transaction.
            It applies while the worker has a free slot and no due run waits for a claim.
            Such a run (``engine.start``, a schedule's tick, a step's child run) is activated
            at once (:mod:`underway.engine._eager`).
        row_check_every: Seconds between looks for runs rows that contradict their journal.
            Such a row would stop a run for good: a finished status on a sleeping run, a
            wake time that is no time, a lease no worker holds. Each is healed from the
            journal once. A look checks the rows written since the one before.
        row_full_check_every: Seconds between looks that check every row, as the first does.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 10,
        poll: float = 1.0,
        min_poll: float = 0.05,
        grace: float = 30.0,
        listen: bool = True,
        anchoring: Anchoring | None = None,
        retention: Retention | None = None,
        eager: bool = True,
        row_check_every: float = ROW_CHECK_EVERY,
        row_full_check_every: float = ROW_FULL_CHECK_EVERY,
    ) -> None:
        if concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, not {concurrency}")
        if not poll > 0 or not min_poll > 0:
            raise ConfigurationError(f"poll intervals must be positive (poll={poll})")
        if grace < 0:
            raise ConfigurationError(f"grace must be 0 or more seconds, not {grace}")
        if queues is not None and (not queues or not all(queues)):
            raise ConfigurationError("queue names must not be empty")
        if not row_check_every > 0:
            raise ConfigurationError(
                f"row_check_every must be positive seconds, not {row_check_every}")
        self.engine = engine
        self.eager = eager
        self.row_check_every = row_check_every
        self.row_check = RowCheck(margin=engine.lease_ttl, full_every=row_full_check_every)
        self.rows_healed = 0
        """Runs rows this worker rewrote from their journal."""
        self.queues = None if queues is None else sorted(set(queues))
        self.concurrency = concurrency
        self.poll = poll
        self.min_poll = min(min_poll, poll)
        self.grace = grace
        self.listen = listen
        self.anchoring = anchoring
        self.anchored = 0
        """Anchor records this worker appended."""
        self.retention = retention
        self._sweeper = None if retention is None else RetentionSweeper(
            whole(engine.store, by="a retention sweep"), retention, codec=engine.journal.codec,
            clock=engine.clock,
            by=f"worker {engine.owner}")
        self._anchored_heads: dict[tuple[str, str], tuple[int, str]] = {}
        self._anchor_lock = threading.Lock()
        self.ready = asyncio.Event()
        """Set once the worker is serving (and, on PostgreSQL, listening) and its first look
        for work has ended."""
        self.activations = 0
        """Activations that ran to their end (the run waits, finished or escalated)."""
        self.eager_starts = 0
        """Runs this worker took in their start's own transaction (eager start)."""
        self.handed_back = 0
        """Runs handed back unfinished: the worker stopped, or their activation failed
        here (the database went away, say)."""
        self._store = engine.store
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._stopping = False
        self._hurry = asyncio.Event()
        self._draining = False
        self._wakeups: Wakeups = Polling()
        self._heard = asyncio.Event()
        self._handed_back_queues: set[str] = set()
        self._failures: dict[str, int] = {}
        self._fire_schedules: ScheduleFiring | None = _schedule_firing()
        self._slots = threading.Lock()
        self._reserved = 0
        self._backlog = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def owner(self) -> str:
        """The identity this worker's leases carry."""
        return self.engine.owner

    @property
    def purged(self) -> int:
        """Runs this worker's retention sweeps purged."""
        return 0 if self._sweeper is None else self._sweeper.purged

    @property
    def forgotten(self) -> int:
        """Purged runs this worker's retention sweeps forgot."""
        return 0 if self._sweeper is None else self._sweeper.forgotten

    @property
    def in_flight(self) -> int:
        """Runs leased and being driven right now."""
        return len(self._tasks)

    def stop(self, *, now: bool = False) -> None:
        """Stop gracefully: claim nothing more, let steps in flight finish (up to
        ``grace``) and hand their runs back. ``now`` (or a second call) cancels the
        steps in flight at once instead of waiting."""
        if self._stopping or now:
            self._hurry.set()
        # From now on, a step that completes ends its activation: the run goes back.
        self._stopping = self._draining = True
        self._wake.set()

    async def run(self) -> None:
        """Serve until :meth:`stop` is called, then shut down gracefully."""
        if self.engine.driver is not None:
            raise ConfigurationError(
                "this engine is already driven by a running Worker; give each Worker an "
                "Engine of its own"
            )
        self._loop = asyncio.get_running_loop()
        self.engine.driver = self
        self._store = self.engine.store
        self._wakeups = Polling()
        helpers: list[asyncio.Task[None]] = []
        # No value a run hides reaches this worker's log lines.
        with redacting_logs(self.engine.redactor):
            try:
                if self.listen:
                    self._wakeups = await self.engine.io(
                        functools.partial(self._store.wakeups, name=self.owner))
                helpers.append(asyncio.create_task(self._maintain(), name="underway-maintain"))
                if self._sweeper is not None:
                    helpers.append(asyncio.create_task(self._sweeper.run(),
                                                       name="underway-retention"))
                helpers.append(await self._start_listener())
                await self._serve()
            finally:
                await self._drain()
                for task in helpers:
                    task.cancel()
                await asyncio.gather(*helpers, return_exceptions=True)
                if self.anchoring is not None:
                    # The heads as this worker leaves them, not as of the last interval.
                    await self._quietly(self._anchor)
                self.engine.driver = None
                with self._slots:
                    self._loop = None

    # -- the loop -----------------------------------------------------------------------
    async def _serve(self) -> None:
        interval = self.min_poll
        while not self._stopping:
            self._wake.clear()
            free = self.concurrency - len(self._tasks) - self._reserved
            claimed = 0
            if free > 0:
                leases = await self._quietly(self._claim, free) or []
                with self._slots:
                    # An eager start may have taken a slot while the claim ran: what no
                    # slot is left for goes back at once, never past the concurrency.
                    room = max(0, self.concurrency - len(self._tasks) - self._reserved)
                    for lease in leases[:room]:
                        self._spawn(lease)
                for lease in leases[room:]:
                    await self._quietly(self._store.release, lease)
                claimed = len(leases[:room])
            if not self.ready.is_set():
                self.ready.set()
                # Every slot asked for was filled: more runs may be due, and they go
                # before any this process starts itself.
                self._backlog = claimed == free
            if claimed:
                interval = self.min_poll
                if claimed == free:
                    continue  # more may be due; the loop waits once every slot is taken
            timeout = await self._idle_timeout(interval, full=free <= claimed)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                if not claimed:
                    interval = min(interval * 2, self.poll)
        self.ready.set()  # stopped before its first look: nobody waits on it forever

    async def _idle_timeout(self, interval: float, *, full: bool) -> float:
        """How long to wait for a wake-up (a finished run, a notification, stop)."""
        if full:
            return self.poll
        due = await self._quietly(self._next_due)
        now = self.engine.clock.now()
        # Listening, the worker hears of new runs and signals; else it must look.
        horizon = self.poll if self._wakeups.listening else interval
        if due is None:
            return horizon
        if due <= now:
            # Due yet not claimable (its queue is at a limit, or another worker is taking
            # it): look again soon, then less often.
            return interval
        return min(due - now, horizon)

    async def _maintain(self) -> None:
        """Besides claiming: free the leases of dead processes of this host, start the
        runs of due schedule ticks (waking the loop when either made work), and anchor."""
        loop = asyncio.get_running_loop()
        reclaim_at = fire_at = anchor_at = check_at = loop.time()
        while True:
            if self.anchoring is not None and loop.time() >= anchor_at:
                anchor_at = loop.time() + self.anchoring.every
                await self._quietly(self._anchor)
            found = 0
            if loop.time() >= reclaim_at:
                reclaim_at = loop.time() + self.engine.lease_ttl / 3
                found += await self._quietly(self._reclaim_dead_local_leases) or 0
            if loop.time() >= check_at:
                check_at = loop.time() + self.row_check_every
                healed = await self._quietly(
                    self.row_check.look, self.engine.services, self.engine.unhealed) or 0
                self.rows_healed += healed
                found += healed
                await self._quietly(self._prune_streams)
            if self._fire_schedules is not None and loop.time() >= fire_at:
                fire_at = loop.time() + SCHEDULES_EVERY
                found += await self._fire_due_schedules()
            if found:
                self._wake.set()
            later = min(reclaim_at, check_at)
            if self._fire_schedules is not None:
                later = min(later, fire_at)
            if self.anchoring is not None:
                later = min(later, anchor_at)
            await asyncio.sleep(max(0.0, later - loop.time()))

    def _claim(self, limit: int) -> list[Lease]:
        eng = self.engine
        return self._store.claim(
            owner=eng.owner, now=eng.clock.now(), ttl=eng.lease_ttl, limit=limit,
            queues=self.queues,
        )

    def _next_due(self) -> float | None:
        return self._store.next_due_at(now=self.engine.clock.now(), queues=self.queues)

    def _anchor(self) -> None:
        assert self.anchoring is not None
        # One at a time: the periodic anchoring's thread may still run when the stopping
        # worker anchors once more, and both would sign the same moved heads.
        with self._anchor_lock:
            self._anchor_once()

    def _anchor_once(self) -> None:
        assert self.anchoring is not None
        # Heads already in a record stay proven by it: sign only those that moved.
        record = self.anchoring.run(whole(self._store, by="anchoring"),
                                     self._anchored_heads)
        if record is not None:
            self.anchored += 1
            log.info("anchored %d runs as record %d (root %s)", len(record.leaves),
                     record.n, record.root[:16])

    def _reclaim_dead_local_leases(self) -> int:
        return Runner(self.engine).reclaim_dead_local_leases()

    def _prune_streams(self) -> int:
        prune = getattr(self._store, "prune_streams", None)
        return 0 if prune is None else int(prune(
            before=self.engine.clock.now() - STREAM_KEEP_S))

    async def _fire_due_schedules(self) -> int:
        assert self._fire_schedules is not None
        try:
            return await self._fire_schedules(self.engine, limit=100)
        except Exception:
            log.exception("firing due schedules failed; trying again on the next round")
            return 0

    async def _quietly(self, fn: Callable[..., R], *args: Any) -> R | None:
        """Run a store call of the worker's own off the event loop (:meth:`Engine.io`); a
        failure (the database restarting, say) is logged and the loop carries on."""
        try:
            return await self.engine.io(fn, *args)
        except Exception as exc:
            log.warning("%s failed: %s: %s", fn.__name__.strip("_"), type(exc).__name__, exc)
            return None

    # -- eager starts (the engine's Driver) ---------------------------------------------
    def reserve(self) -> bool:
        """Take a free slot for a run the engine is starting (any thread): not when
        stopping, when every slot is taken, or when due runs wait for a claim."""
        with self._slots:
            if not self.eager or self._stopping or self._backlog or self._loop is None:
                return False
            if len(self._tasks) + self._reserved >= self.concurrency:
                return False
            self._reserved += 1
            return True

    def unreserve(self) -> None:
        """Give back a slot the start did not use."""
        with self._slots:
            self._reserved -= 1

    def adopt(self, start: EagerStart) -> None:
        """Drive the run ``start`` leased, in its reserved slot (any thread)."""
        with self._slots:
            loop = self._loop
        try:
            if loop is None:
                raise RuntimeError("the worker stopped")
            loop.call_soon_threadsafe(self._adopt, start)
        except RuntimeError as exc:
            # The worker is gone: the run goes back for another worker to claim now (or,
            # should that fail too, once its lease runs out).
            self.unreserve()
            log.warning("could not take run %s just started: %s", start.run_id, exc)
            assert start.lease is not None
            try:
                self._store.release(start.lease)
            except Exception as again:
                log.warning("could not hand back run %s: %s", start.run_id, again)

    def _adopt(self, start: EagerStart) -> None:
        assert start.lease is not None
        with self._slots:
            self._reserved -= 1
            self._spawn(start.lease, start)
        self.eager_starts += 1

    # -- driving runs -------------------------------------------------------------------
    def _spawn(self, lease: Lease, start: EagerStart | None = None) -> None:
        task = asyncio.create_task(self._drive(lease, start),
                                   name=f"underway-run-{lease.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._wake.set()

    async def _drive(self, lease: Lease, start: EagerStart | None = None) -> None:
        try:
            state = await self.engine.activate(lease, should_stop=lambda: self._draining,
                                               start=start)
            if state.status == "ready":
                self.handed_back += 1  # stopped at a step boundary and handed back
                self._handed_back_queues.add(await self.engine.io(self._queue_of, lease))
            else:
                self.activations += 1
        except asyncio.CancelledError:
            # Cancelled by a stopping worker: the step's uncommitted work is lost, and is
            # redone from the journal by whoever takes the run next.
            await self._give_back(lease)
            return
        except (FencedError, ConflictError) as exc:
            # Another worker owns the run now; what it commits is the truth.
            log.warning("gave up run %s: %s", lease.run_id, exc)
        except Exception:
            # What the engine could not journal — the database failing, a flow this worker
            # does not know, a journal it cannot read: not the run's fault, so handed back,
            # but later each time, never in a loop.
            if len(self._failures) > 10_000:
                self._failures.clear()  # runs other workers finished
            failures = self._failures.get(lease.run_id, 0) + 1
            self._failures[lease.run_id] = failures
            if failures >= POISON_AFTER and await self._dead_letter(lease, failures):
                return
            delay = handback_delay(failures)
            log.exception("run %s (tenant %s) failed in this worker (%d in a row); handing "
                          "it back for %.1fs", lease.run_id, lease.tenant_id, failures, delay)
            await self._give_back(lease, retry_at=self.engine.clock.now() + delay)
            return
        self._failures.pop(lease.run_id, None)

    async def _dead_letter(self, lease: Lease, failures: int) -> bool:
        """After :data:`POISON_AFTER` failures in a row that are not the database's, the run
        stops dead for an operator (journaled); False when even that cannot be done."""
        exc = sys.exc_info()[1]
        # The database's failure, or this worker's configuration (a flow it does not
        # know, in a rolling deploy): not the run's fault.
        if exc is None or is_store_failure(exc) or isinstance(exc, ConfigurationError):
            return False
        try:
            await self.engine.dead_letter(
                lease, reason=f"failed {failures} times in a row in worker {self.owner}: "
                              f"{type(exc).__name__}: {exc}",
                error_type=type(exc).__name__,
            )
        except Exception as again:
            log.warning("could not dead-letter run %s: %s", lease.run_id, again)
            return False
        self._failures.pop(lease.run_id, None)
        log.error("run %s (tenant %s) dead-lettered after %d failures in a row",
                  lease.run_id, lease.tenant_id, failures)
        return True

    def _queue_of(self, lease: Lease) -> str:
        row = self._store.get_run(lease.tenant_id, lease.run_id)
        return row.queue if row is not None else "default"

    async def _give_back(self, lease: Lease, *, retry_at: float | None = None) -> None:
        try:
            queue = await self.engine.io(self._release, lease, retry_at)
        except Exception as exc:
            log.warning("could not hand back run %s (%s); its lease will expire",
                        lease.run_id, exc)
            return
        self.handed_back += 1
        log.info("handed back run %s (tenant %s)", lease.run_id, lease.tenant_id)
        if queue is not None:
            self._handed_back_queues.add(queue)

    def _release(self, lease: Lease, retry_at: float | None) -> str | None:
        """Release the lease and read the run's queue (None: the run is gone), in one
        trip."""
        self._store.release(lease, retry_at=retry_at)
        row = self._store.get_run(lease.tenant_id, lease.run_id)
        return row.queue if row is not None else None

    async def _drain(self) -> None:
        self._stopping = True
        self._draining = True
        pending = set(self._tasks)
        if pending:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.grace
            hurry = asyncio.create_task(self._hurry.wait())
            while pending and not self._hurry.is_set() and loop.time() < deadline:
                await asyncio.wait(pending | {hurry}, timeout=deadline - loop.time(),
                                   return_when=asyncio.FIRST_COMPLETED)
                pending = {t for t in pending if not t.done()}
            hurry.cancel()
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._handed_back_queues:
            await self._quietly(self._announce, sorted(self._handed_back_queues))
        log.info("worker %s stopped: %d activations, %d runs handed back",
                 self.owner, self.activations, self.handed_back)

    # -- wake-ups -----------------------------------------------------------------------
    async def _start_listener(self) -> asyncio.Task[None]:
        task = asyncio.create_task(self._listen(), name="underway-listen")
        # Ready means listening (a store that pushes nothing ends its watch at once); if
        # the first connection fails the worker still starts, polling until it gets through.
        heard = asyncio.create_task(self._heard.wait())
        await asyncio.wait({task, heard}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        heard.cancel()
        return task

    async def _listen(self) -> None:
        async for _ in self._wakeups.watch(self.queues, retry=self.min_poll):
            self._heard.set()
            self._wake.set()

    def _announce(self, queues: list[str]) -> None:
        """Tell idle workers that runs of ``queues`` were handed back."""
        self._wakeups.announce(queues)


POISON_AFTER = 5
"""Failures in a row (not the database's) after which a worker dead-letters a run."""

HANDBACK_MAX_DELAY = 300.0
"""The longest a run handed back after a failure waits before it is due again."""


def handback_delay(failures: int) -> float:
    """Seconds a run handed back after its ``failures``-th failure in a row is not due:
    exponential from 0.5 s, capped at :data:`HANDBACK_MAX_DELAY`, with jitter so runs
    failing together do not come back together."""
    base = min(HANDBACK_MAX_DELAY, 0.5 * 2.0 ** min(failures - 1, 20))
    return base * (0.5 + random.random() / 2)


def _schedule_firing() -> ScheduleFiring | None:
    """The schedules module's ``fire_due_schedules``, when this installation has it."""
    try:
        module = importlib.import_module("underway.scheduling.schedules")
    except ImportError:
        return None
    fire = getattr(module, "fire_due_schedules", None)
    return cast(ScheduleFiring, fire) if callable(fire) else None
