"""What the client reads of runs: their states, events, children, pages of runs, what they
wait on and what they did. The reads are the transport's; what is made of them (a sealed
run's state from its row, where a result's taint came from, a run's children with their
status) is made here, once for both transports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .. import events as ev
from ..errors import ConfigurationError, KeyUnavailable
from ..events import JSON
from ..journal import Verification
from ..journal.state import Recorded, RunState
from ..labels import LabelValue
from ..redaction import Redactor
from ..store.base import RunRecord
from ._activity import Activity
from ._pages import ChildRun, RunEvent, RunPage
from ._requests import PendingRequest, sealed_state

if TYPE_CHECKING:
    from ._database import DatabaseTransport
    from ._transport import Transport

_TAIL = 8  # events before a completed run's recorded head searched for its completion


class Reads:
    """What :class:`~underway.client.Client` reads of runs."""

    _transport: Transport

    if TYPE_CHECKING:  # the client's own
        def get_run(self, run_id: str, *, tenant_id: str = "default") -> RunRecord: ...

        def _database(self, method: str, why: str) -> DatabaseTransport: ...

    def state(self, run_id: str, *, tenant_id: str = "default") -> RunState:
        """The run's current state, folded from its journal (from its checkpoint on)."""
        return self._transport.state(self._transport.tenant(tenant_id), run_id)

    def readable_state(self, run_id: str, *, tenant_id: str = "default") -> RunState:
        """The run's current state (:meth:`state`) — or, when its journal is encrypted and
        cannot be opened here, what its row tells (flow, status, step, times) with its
        input, state and result ``[encrypted]``."""
        try:
            return self.state(run_id, tenant_id=tenant_id)
        except KeyUnavailable:
            return sealed_state(self.get_run(run_id, tenant_id=tenant_id))

    def tainted_by(self, run: str | RunRecord, *, tenant_id: str = "default") -> list[str] | None:
        """Where the untrusted content that shaped a completed run's result came from
        (:attr:`~underway.events.RunCompleted.tainted_by`; empty: none did), read from the
        end of its journal; ``run`` is its id or its row. None while the run has not
        completed, or when its end cannot be read here (encrypted without its key, purged).
        """
        ended = self._completion(run, tenant_id)
        return None if ended is None else list(ended.tainted_by)

    def marks(self, run: str | RunRecord, *,
              tenant_id: str = "default") -> list[dict[str, JSON]] | None:
        """The parts of a completed run's result that trusted sources do not account for,
        each ``{"path", "sources", "repeats"}`` (:attr:`~underway.events.RunCompleted.marks`;
        empty: none), read from the end of its journal; ``run`` is its id or its row. None
        as for :meth:`tainted_by`.
        """
        ended = self._completion(run, tenant_id)
        return None if ended is None else [dict(m) for m in ended.marks]

    def _completion(self, run: str | RunRecord, tenant_id: str
                    ) -> ev.RunCompleted | RunState | None:
        """What says how a completed run ended: its ``RunCompleted``, else its folded state.
        """
        row = run if isinstance(run, RunRecord) else self.get_run(run, tenant_id=tenant_id)
        if row.status != "completed":
            return None
        # Its completion is among the last few events its row counts.
        tail = self.events(row.run_id, tenant_id=row.tenant_id,
                           after=max(row.last_seq - _TAIL, 0))
        for e in reversed(tail):
            if isinstance(e.event, ev.RunCompleted):
                return e.event
            if isinstance(e.event, ev.Encrypted | ev.PayloadPurged):
                return None
        try:
            s = self.state(row.run_id, tenant_id=row.tenant_id)
        except KeyUnavailable:
            return None
        return None if s.purged else s

    def state_at(
        self, run_id: str, seq: int, *, tenant_id: str = "default"
    ) -> tuple[RunState, Recorded, RunState]:
        """The run's state just before its event at ``seq``, that event, and the state after it,
        folded once (from the run's checkpoint when that precedes ``seq``).

        Args:
            run_id: The run.
            seq: The event's seq.
            tenant_id: The run's tenant.

        Raises:
            RunNotFound: There is no such run.
            ConfigurationError: The run has no event at ``seq``.
        """
        if seq < 1:
            raise ConfigurationError(f"a run's events start at seq 1, not {seq}")
        return self._transport.states_at(self._transport.tenant(tenant_id), run_id, seq)

    def history(self, run_id: str, *, tenant_id: str = "default") -> list[Recorded]:
        """Every event of the run, decoded, in order (each with ``seq``, ``at``,
        ``event``); :class:`~underway.errors.KeyUnavailable` when payloads are encrypted
        and cannot be opened here (:meth:`events` shows them as ``[encrypted]``)."""
        return self._transport.history(self._transport.tenant(tenant_id), run_id)

    def events(
        self, run_id: str, *, tenant_id: str = "default", after: int = 0,
        limit: int | None = None,
    ) -> list[RunEvent]:
        """Every event of the run, decoded, with its chain hash.

        An event whose payload is encrypted and cannot be opened here is an
        :class:`~underway.events.Encrypted`: its type and time, the payload ``[encrypted]``.
        An unknown run raises :class:`RunNotFound`.

        Args:
            run_id: The run.
            tenant_id: The run's tenant.
            after: Only events with ``seq`` above it.
            limit: Only the first ``limit`` of them (None: all).
        """
        return self._transport.events(self._transport.tenant(tenant_id), run_id, after, limit)

    def children(self, run_id: str, *, tenant_id: str = "default") -> list[ChildRun]:
        """The runs this run started with ``ctx.start``, in the order it started them."""
        tenant_id = self._transport.tenant(tenant_id)
        state = self.state(run_id, tenant_id=tenant_id)
        found = []
        for child_id, child in sorted(state.children.items(), key=lambda c: c[1].seq):
            row = self._transport.get_run(tenant_id, child_id)
            found.append(ChildRun(
                child_id, child.flow, child.key, child.detached,
                row.status if row is not None else None, child.ended, child.result,
                child.error,
            ))
        return found

    def verify(self, run_id: str, *, tenant_id: str = "default") -> Verification:
        """Check the run's hash chain, sequence and tail against its row."""
        return self._transport.verify(self._transport.tenant(tenant_id), run_id)

    def list_runs(
        self, *, tenant_id: str = "default", status: str | None = None,
        flow: str | None = None, since: float | None = None, until: float | None = None,
        limit: int = 100, cursor: str | None = None, updated_since: float | None = None,
        updated_until: float | None = None, search: str | None = None,
        labels: Mapping[str, LabelValue] | None = None, id_prefix: str | None = None,
    ) -> RunPage:
        """A page of the tenant's runs, newest first. Times are epoch seconds.

        Args:
            tenant_id: The tenant.
            status: Only runs with this status.
            flow: Only runs of this flow.
            since: Only runs created at or after it.
            until: Only runs created before it.
            limit: The most runs on the page.
            cursor: The previous page's ``next_cursor``, for the next page. Pages follow on
                exactly, whatever runs are created meanwhile.
            updated_since: Only runs last updated at or after it.
            updated_until: Only runs last updated before it.
            search: Only runs whose id or flow contains it (a plain, case-sensitive substring).
            labels: Only runs with all these labels. A value matches by its text:
                ``{"qty": "7"}`` finds ``qty=7`` (:mod:`underway.labels`).
            id_prefix: Only runs whose id starts with it.
        """
        if limit < 1:
            raise ConfigurationError(f"limit must be at least 1, not {limit}")
        return self._transport.list_runs(
            self._transport.tenant(tenant_id), limit=limit, cursor=cursor,
            id_prefix=id_prefix, status=status, flow=flow, since=since, until=until,
            updated_since=updated_since, updated_until=updated_until, search=search,
            labels=labels)

    def activity(self, *, since: float, days: int, hourly: bool = False,
                 tenant_id: str = "default") -> Activity:
        """What the tenant's runs did on each day (or hour) of a window.

        It counts runs created by status, model calls, tokens and cost, approval waits and
        takeovers per approver role, escalations by cause and dead-letterings
        (:mod:`underway.client._activity`).

        Args:
            since: The window's start.
            days: How many days (of 86400 seconds) it spans.
            hourly: Count each hour of the window apart, not each day.
            tenant_id: The tenant.
        """
        return self._transport.activity(self._transport.tenant(tenant_id), since=since,
                                        days=days, hourly=hourly)

    def pending_requests(
        self, *, tenant_id: str = "default", limit: int = 100
    ) -> list[PendingRequest]:
        """Runs that wait for a person — an approval, an answer, a resolution of an
        escalation — with what each asks, soonest expiry first. A run whose journal is
        encrypted and cannot be opened here shows ``[encrypted]`` for what it asks."""
        return self._transport.pending_requests(self._transport.tenant(tenant_id), limit)

    def pending_request(self, run_id: str, *,
                        tenant_id: str = "default") -> PendingRequest | None:
        """What the run waits for a person to decide (None: nothing); a resolution of an
        escalated call carries the arguments the call was journaled with."""
        return self._transport.pending_request(self._transport.tenant(tenant_id), run_id)

    def redactor(self, run_id: str, *, tenant_id: str = "default",
                 reveal: bool = False) -> Redactor:
        """What hides the run's data from a viewer: a :class:`~underway.redaction.Redactor`
        that learned every event of the run (of a run seen lately, the newer ones: a query).
        A database client's only: over HTTP the server redacts what it sends.

        Args:
            run_id: The run.
            tenant_id: The run's tenant.
            reveal: Show sensitive fields; secrets are hidden always.
        """
        db = self._database("redactor", "the server redacts what it sends, as the key's "
                            "role allows")
        return db.redactor(tenant_id, run_id, reveal)
