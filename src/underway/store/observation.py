"""What observing runs reads: counts on the runs table's indexes, the checkpoints a
newer one replaced, and a run's whole inbox. ``/metrics`` counts runs by the request they
wait for, the console counts runs by status up to a cap, and a state deep in a long run
starts from the nearest kept checkpoint: none of these reads more than an index range or
one checkpoint interval, however many runs or events there are. A run's whole inbox is
for an operator or a test; the engine reads only what it acts on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .records import CheckpointTail, SignalRecord

__all__ = ["ObservationStore"]


class ObservationStore(Protocol):
    """Cheap reads for observing runs: request counts, capped status counts, kept
    checkpoints and a run's unconsumed signals."""

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Every unconsumed signal of a run, oldest first. The engine never reads the
        whole inbox (it reads ``actionable_signals``); this is for an operator or a test
        that looks at what a run was sent and has not consumed."""
        ...

    def request_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, kind, number of runs) of the runs that wait for a person, by what they
        wait for (``approval``, ``question``, ``resolution``), among waiting and escalated
        runs, sorted by tenant and kind. It counts entries of one partial index, never
        reading a journal (what ``/metrics`` reports on a scrape)."""
        ...

    def status_counts(
        self, tenant_id: str, statuses: Sequence[str], *, cap: int
    ) -> dict[str, int]:
        """How many of the tenant's runs have each status, each counted up to ``cap``.

        A count that reaches ``cap`` means "at least ``cap``". Each status reads at most
        ``cap`` entries of the (tenant, status) index, so the cost stays flat however many
        runs the tenant has (what the console's runs page shows above the list).

        Args:
            tenant_id: The tenant.
            statuses: The statuses to count.
            cap: The most runs counted of a status.
        """
        ...

    def checkpoint_before(
        self, tenant_id: str, run_id: str, seq: int
    ) -> CheckpointTail | None:
        """The run's newest checkpoint before ``seq`` with the events from its seq through
        ``seq``, read together (None: no checkpoint precedes it).

        It may be the current checkpoint or one a newer one replaced: those are kept, so a
        state deep in a long run is a checkpoint and at most one interval of events away.
        The caller checks it against the journal as it checks the current one.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            seq: The last event wanted; the checkpoint is older.
        """
        ...

    def kept_checkpoints(self, tenant_id: str, run_id: str) -> list[tuple[int, bytes]]:
        """The run's kept checkpoints (the ones a newer one replaced) as (seq, stored
        bytes), oldest first. The blob collector follows what they refer to: a blob only a
        kept checkpoint names is still needed by a state read at its place in the run.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
        """
        ...
