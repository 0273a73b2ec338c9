"""The schedules role: cron schedules, claimed tick by tick by whichever worker is free."""

from __future__ import annotations

from typing import Protocol

from .records import ScheduleRecord

__all__ = ["ScheduleStore"]


class ScheduleStore(Protocol):
    """Stores schedules and hands each due tick to one scheduler."""

    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Create the schedule, or update the one with its tenant and name, and return it.

        An update keeps the pending tick (``next_fire_at``), ``created_at`` and
        ``last_fired_at`` when the cron expression and time zone are unchanged and the
        schedule was enabled; otherwise ``next_fire_at`` is taken from ``schedule``.
        """
        ...

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """The schedule called ``name``, if any."""
        ...

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """A tenant's schedules by name."""
        ...

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule; False when there was none."""
        ...

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Atomically claim the enabled schedules that are due and that nobody else holds.

        A schedule whose claim ended counts as held by nobody. Each one claimed is marked claimed
        until ``until``.

        Args:
            now: Claim schedules whose ``next_fire_at`` is at or before it.
            until: When the claims end.
            flows: Only schedules of these flows (of any tenant).
            limit: The most schedules claimed.

        Returns:
            The schedules claimed, earliest first.
        """
        ...

    def advance_schedule(
        self, tenant_id: str, name: str, *, expected: float, next_fire_at: float,
        fired_at: float | None,
    ) -> bool:
        """End a claim, only if the schedule still waits for the tick ``expected``.

        Args:
            tenant_id: The schedule's tenant.
            name: The schedule.
            expected: The tick the claim was for.
            next_fire_at: The next tick.
            fired_at: When the tick fired; None leaves ``last_fired_at`` as it is.

        Returns:
            True if the schedule was advanced.
        """
        ...

    def next_schedule_at(self, *, now: float, flows: list[str]) -> float | None:
        """The earliest ``next_fire_at`` of an enabled, unclaimed schedule of ``flows``."""
        ...
