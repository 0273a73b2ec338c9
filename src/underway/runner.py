"""A single in-process runner: drives due runs, sleeps until the next timer, takes signals.

(The multi-worker ``underway worker`` builds on the same engine and store protocol.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

from pydantic import BaseModel

from .engine import Engine
from .errors import ConflictError, FencedError
from .events import JSON
from .flow import Flow
from .identity import owner_is_dead
from .journal.state import APPROVAL_SIGNAL, RunState
from .redaction import redacting_logs
from .store.base import Lease, RunRecord

__all__ = ["Runner", "run", "settled"]

log = logging.getLogger("underway.runner")


class Runner:
    """Advances runs of one engine in this process.

    Args:
        engine: The engine whose runs it advances.
        poll: Bounds how long a sleeping runner takes to notice a signal or a new run.
        batch: Runs claimed at a time.
        concurrency: Runs of a claimed batch advanced at once. Their commits are written
            together (:mod:`underway.engine._group`). 1 advances them one after another.
    """

    def __init__(
        self, engine: Engine, *, poll: float = 0.2, batch: int = 16, concurrency: int = 1
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"a runner advances at least one run at a time, not {concurrency}")
        self.engine = engine
        self.poll = poll
        self.batch = batch
        self.concurrency = concurrency

    def reclaim_dead_local_leases(self) -> int:
        """Free leases held by processes on this host that have died (e.g. SIGKILL), so
        their runs resume now instead of after the lease expires."""
        store = self.engine.store
        return sum(store.expire_lease(*dead) for dead in self._dead_local_leases())

    def _dead_local_leases(self) -> list[tuple[str, str, str]]:
        """(tenant, run, owner) of the leases held by dead processes of this host."""
        me, held = self.engine.owner, self.engine.store.held_leases(now=self.engine.clock.now())
        return [lease for lease in held if lease[2] != me and owner_is_dead(lease[2])]

    async def run_until_idle(self) -> int:
        """Advance every run that is due now; return how many activations ran."""
        return await self._until_idle(None)

    async def _until_idle(self, first: tuple[str, str] | None) -> int:
        """Advance every run that is due now, claiming ``first`` (tenant, run) before any
        other when given."""
        activations = 0
        io = self.engine.io
        claim = functools.partial(self.engine.claim, limit=self.batch)
        with redacting_logs(self.engine.redactor):
            # Freeing dead leases, healing rows and the first claim make one trip to the
            # store's thread and one commit: a fresh process taking a run over reaches it
            # sooner.
            leases = await io(self._repair_and_claim, first)
            while leases:
                for i in range(0, len(leases), self.concurrency):
                    await asyncio.gather(*(
                        self._advance(lease) for lease in leases[i:i + self.concurrency]))
                activations += len(leases)
                leases = await io(claim)
        return activations

    def _repair_and_claim(self, first: tuple[str, str] | None) -> list[Lease]:
        """Heal suspect rows, then claim (``first`` alone when it is due, its state read
        too), ending the dead holders' leases in the claim's transaction."""
        dead = self._dead_local_leases()
        self.engine.heal_rows(dead={owner for _, _, owner in dead})
        if first is not None:
            leases = self.engine.claim(tenant_id=first[0], run_id=first[1], expire=dead)
            if leases:
                # Its state read in the same trip; on failure its activation reads again.
                with contextlib.suppress(Exception):
                    self.engine.load_ahead(leases[0])
                return leases
            dead = []
        return self.engine.claim(limit=self.batch, expire=dead)

    async def _advance(self, lease: Lease) -> None:
        try:
            await self.engine.activate(lease)
        except (FencedError, ConflictError) as exc:
            # Another worker owns the run now; what it commits is the truth.
            log.warning("gave up run %s: %s", lease.run_id, exc)

    async def run_until_complete(self, run_id: str, *, tenant_id: str = "default") -> RunState:
        """Advance runs until ``run_id`` completes, fails, is cancelled, escalates to a
        person, waits for a person's approval or stops dead for an operator."""
        eng = self.engine
        while True:
            await self._until_idle((tenant_id, run_id))
            row, wake = await eng.io(self._look, tenant_id, run_id)
            if row is not None and settled(row.status, row.waiting_signal):
                return await eng.io(functools.partial(eng.state, run_id, tenant_id=tenant_id))
            now = eng.clock.now()
            target = now + self.poll if wake is None else min(wake, now + self.poll)
            await eng.clock.sleep_until(max(target, now))

    def _look(self, tenant_id: str, run_id: str) -> tuple[RunRecord | None, float | None]:
        """The run's row and the next wake time of any run, in one trip."""
        store = self.engine.store
        return store.get_run(tenant_id, run_id), store.next_wake_at()

    async def serve(self, stop: asyncio.Event) -> None:
        """Advance runs until ``stop`` is set."""
        while not stop.is_set():
            await self.run_until_idle()
            wake = await self.engine.io(self.engine.store.next_wake_at)
            now = self.engine.clock.now()
            delay = self.poll if wake is None else min(max(wake - now, 0.0), self.poll)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)


def settled(status: str, waiting_signal: str | None) -> bool:
    """Whether a run with this status is as far as a runner takes it: final, escalated to
    a person, waiting for a person's approval or stopped dead for an operator."""
    return status in ("completed", "failed", "cancelled", "escalated", "dead") or (
        status == "waiting" and waiting_signal == APPROVAL_SIGNAL)


async def run(
    engine: Engine,
    flow: Flow[Any, Any] | str,
    input: JSON | BaseModel = None,
    *,
    tenant_id: str = "default",
    idempotency_key: str | None = None,
    eager: bool = True,
) -> RunState:
    """Start a run (or find the one with this idempotency key) and drive it to an end.

    Args:
        engine: The engine to run it on.
        flow: The flow, or its name.
        input: The run's input.
        tenant_id: The run's tenant.
        idempotency_key: Finds the run started with the same key, if any.
        eager: Lease the run to this process in its start's transaction. It is activated at
            once from what the start wrote (:mod:`underway.engine._eager`). A run found by
            its key, held by another worker or not yet due is driven as a claim finds it.
            False: the run is created, then claimed.

    Returns:
        The run's state at its end.
    """
    new = engine.prepare_start(flow, input, tenant_id=tenant_id, idempotency_key=idempotency_key)
    if not eager:
        rec, _ = await engine.io(engine.store.create_run, new)
        return await Runner(engine).run_until_complete(rec.run_id, tenant_id=tenant_id)
    start = await engine.io(engine.start_leased, new)
    if start.lease is not None:
        try:
            state = await engine.activate(start.lease, start=start)
        except (FencedError, ConflictError) as exc:
            log.warning("gave up run %s: %s", start.run_id, exc)
        else:
            if settled(state.status, state.waiting_signal):
                return state
    return await Runner(engine).run_until_complete(start.run_id, tenant_id=tenant_id)
