"""Eager start: a process that advances runs leases a run it starts in the start's own
transaction (:meth:`~underway.store.leases.LeaseStore.start_leased`) and activates it from
what the start wrote, instead of committing the start, claiming the run in a second
transaction and reading back what it had just written.

A :class:`Driver` — a :class:`~underway.Worker` serving the engine — takes the runs its
engine starts (:meth:`Engine.start <underway.engine.Engine.start>`, schedules, child runs)
while it has a free slot. Safety is a claim's: the lease is fenced and expires, so a
process that dies right after an eager start leaves a leased run that another worker
takes over once the lease runs out (at once when the dead process was on its host).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel
from typing_extensions import Unpack

from .. import faults
from ..client import StartKeywords, StartOptions
from ..clock import Clock
from ..events import JSON
from ..flow import Flow
from ..store.base import Lease, NewRun, RunRecord, StartedRun
from ..store.features import EngineStore


@dataclass(frozen=True, slots=True)
class EagerStart:
    """A run started and leased in one transaction: the run as the start built it
    (``new``) and what the store did (``result``)."""

    new: NewRun
    result: StartedRun

    @property
    def lease(self) -> Lease | None:
        """The lease the start took (None: the run was left for a claim)."""
        return self.result.lease

    @property
    def run_id(self) -> str:
        """The run's id (an idempotent repeat's: the run found by the key)."""
        return self.result.run.run_id

    @property
    def fresh(self) -> bool:
        """Whether this start created the run and leased it: its whole journal is the
        first event in ``new``, so activating it reads nothing back."""
        return self.result.created and self.result.lease is not None


class Driver(Protocol):
    """Who activates the runs an engine starts eagerly (a worker serving it)."""

    @property
    def queues(self) -> list[str] | None:
        """The queues it serves (None: every queue); a run of another is left for them."""
        ...

    def reserve(self) -> bool:
        """Take a free slot for a run about to be started (any thread); False: none free,
        or due runs wait for a claim (they come first)."""
        ...

    def unreserve(self) -> None:
        """Give back a slot :meth:`reserve` took, when the start leased nothing."""
        ...

    def adopt(self, start: EagerStart) -> None:
        """Activate the run ``start`` leased, in the slot reserved for it (any thread)."""
        ...


class EagerStarts:
    """How an :class:`~underway.engine.Engine` starts runs: eagerly, to the worker serving
    it, when that worker has a free slot."""

    if TYPE_CHECKING:
        store: EngineStore
        clock: Clock
        owner: str
        lease_ttl: float
        driver: Driver | None

        def prepare_start(
            self, flow: Flow[Any, Any] | str, input: JSON | BaseModel = None, *,
            options: StartOptions | None = None, **keywords: Unpack[StartKeywords],
        ) -> NewRun:
            """The engine's client's :meth:`~underway.client.Client.prepare_start`."""

    def start(
        self,
        flow: Flow[Any, Any] | str,
        input: JSON | BaseModel = None,
        *,
        options: StartOptions | None = None,
        eager: bool = True,
        **keywords: Unpack[StartKeywords],
    ) -> tuple[str, bool]:
        """Create a run, or find the one with this idempotency key.

        It works as :meth:`Client.start <underway.client.Client.start>` does, with the same
        arguments: :class:`~underway.client.StartOptions` as keywords, or as ``options``.

        Args:
            flow: The flow, or its name.
            input: The run's input.
            options: How the run starts; keywords may give them instead.
            eager: When a worker serves this engine (:attr:`driver`) and has a free slot, the
                run is leased to it in the same transaction and activated at once. The state it
                starts from is taken from the start rather than read back (see
                :mod:`underway.engine._eager`). False always leaves the run to a claim.

        Returns:
            ``(run_id, created)``: created is False when the key found an existing run.
        """
        new = self.prepare_start(flow, input, options=options, **keywords)
        return self.create_run(new, eager=eager)[:2]

    def create_run(self, new: NewRun, *, eager: bool = True) -> tuple[str, bool, RunRecord]:
        """Create ``new`` (or find the run with its idempotency key): its id, whether this
        call created it, and its row. With ``eager`` and a :attr:`driver` with a free
        slot, leased to the driver in the same transaction and handed to it."""
        driver = self.driver if eager else None
        if driver is None or not driver.reserve():
            rec, created = self.store.create_run(new)
            return rec.run_id, created, rec
        try:
            start = self.start_leased(new, queues=driver.queues)
        except BaseException:
            driver.unreserve()
            raise
        if start.lease is None:
            driver.unreserve()
        else:
            driver.adopt(start)
        return start.run_id, start.result.created, start.result.run

    def start_leased(self, new: NewRun, *, queues: list[str] | None = None) -> EagerStart:
        """Create ``new`` and lease it to this engine's owner in one transaction, when a
        claim of ``queues`` could take it now (:meth:`~underway.store.leases.LeaseStore.
        start_leased`); pass the result to :meth:`activate` to advance the run."""
        start = EagerStart(new, self.store.start_leased(
            new, owner=self.owner, now=self.clock.now(), ttl=self.lease_ttl, queues=queues))
        if start.lease is not None:
            faults.point("start.eager_after_commit")
        return start
