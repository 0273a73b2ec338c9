"""What a retention sweep did, or (dry) would do: per tenant, an outcome for each run it
purged, left for a hold or skipped, and for each purged run it forgot, left or skipped."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the sweep did (or, dry, would do) with one run: ``purged`` (or ``forgotten``),
    ``held`` (a legal hold stands on it or its subject) or ``skipped`` (``reason`` says
    why)."""

    run_id: str
    flow: str
    status: str
    ended_at: float
    action: str
    rule: str
    events: int = 0
    reason: str = ""


@dataclass(slots=True)
class TenantSweep:
    """A sweep's work in one tenant."""

    tenant_id: str
    outcomes: list[Outcome] = field(default_factory=list)
    blobs_deleted: int | None = None
    """Unreferenced blobs deleted (None: no collection ran)."""
    collection_note: str = ""
    """Why blobs were not collected, when they were due and were not."""
    forgets: list[Outcome] = field(default_factory=list)
    """What the sweep did with each purged run past its ``forget_after``: ``forgotten``,
    ``held`` or ``skipped``."""

    def count(self, action: str) -> int:
        """How many runs had ``action``."""
        return sum(1 for o in self.outcomes if o.action == action)

    @property
    def forgotten(self) -> int:
        """How many runs were forgotten."""
        return sum(1 for o in self.forgets if o.action == "forgotten")


@dataclass(slots=True)
class SweepReport:
    """What one sweep did (or, with ``dry_run``, would do)."""

    sweep_id: str
    dry_run: bool
    started_at: float
    tenants: list[TenantSweep] = field(default_factory=list)

    @property
    def purged(self) -> int:
        """Runs purged (or that would be) across tenants."""
        return sum(t.count("purged") for t in self.tenants)

    @property
    def forgotten(self) -> int:
        """Runs forgotten (or that would be) across tenants."""
        return sum(t.forgotten for t in self.tenants)
