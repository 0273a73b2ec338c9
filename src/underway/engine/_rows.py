"""Runs rows healed from their journal.

A row the journal contradicts can stop its run for good: a finished status on a sleeping
run, a wake time that is no time, a lease nobody holds. A worker heals such a row once,
from the journal (:mod:`underway.journal.projection` says what it should be), and logs one
warning naming what was wrong. It meets such rows two ways: a claimed run whose row
disagrees with its journal (:func:`repair_leased`), and the rows no claim can reach,
found by :meth:`~underway.store.leases.LeaseStore.suspect_runs` (:func:`heal_rows`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

from ..codec import Codec, run_error_where
from ..errors import ConfigurationError
from ..journal.projection import (
    Disagreement,
    disagreements,
    expected_update,
    good_time,
    lease_problem,
)
from ..journal.state import RunState
from ..store.leases import MAX_LEASE_TTL
from ..store.records import FINAL, RowRepair, RunRecord, RunUpdate

if TYPE_CHECKING:
    from ._activation import Activation
    from ._services import StepServices

log = logging.getLogger("underway.engine")

SUSPECTS_PER_ROUND = 100
"""Suspect rows a worker checks at a time."""


def row_update(codec: Codec, s: RunState, row: RunRecord, now: float) -> RunUpdate:
    """What the row of a run nobody advances should say: the journal's projection (a
    ready run keeps the due time the row had; one with signals waiting is due now), with
    the error sealed like a payload."""
    due = row.next_wake_at if good_time(row.next_wake_at) else None
    update = expected_update(s, now, due)
    if s.status not in FINAL and row.control_pending:
        wake = update.next_wake_at
        update = dataclasses.replace(update, next_wake_at=now if wake is None else min(wake, now))
    if update.error is not None and codec.sealer is not None:
        update = dataclasses.replace(update, error=codec.seal_text(
            update.error, run_error_where(s.tenant_id, s.run_id, s.subject)))
    return update


def _report(row: RunRecord, found: list[Disagreement]) -> None:
    log.warning(
        "run %s (tenant %s): its runs row disagreed with the journal and was rewritten "
        "from it: %s", row.run_id, row.tenant_id, "; ".join(d.describe() for d in found))


def repair_leased(act: Activation) -> bool:
    """Rewrite the row of a run ``act`` holds, with nothing to commit, from its journal
    when the two disagree, and hand the run back in the same write. True when it did."""
    lease, row, s, head = act.lease, act.row, act.state, act.last_hash
    if row is None:
        return False
    svc = act.services
    now = svc.clock.now()
    found = [d for d in disagreements(row, s, now=now) if d.field != "lease"]
    if not found:
        return False
    update = row_update(svc.journal.codec, s, row, now)
    repair = RowRepair(lease.tenant_id, lease.run_id, row, s.seq, head, update,
                       token=lease.token)
    if not svc.store.repair_run(repair, now=now):
        return False
    _report(row, found)
    return True


def heal_row(
    svc: StepServices, tenant_id: str, run_id: str, *, dead: Collection[str] = (),
) -> list[Disagreement]:
    """Heal the row of a run no live worker holds, if the journal contradicts it (a lease
    of an owner in ``dead``, known dead, is held by no live worker).

    Args:
        svc: The engine's store, journal and clock.
        tenant_id: The run's tenant.
        run_id: The run.

    Returns:
        What was wrong (empty: nothing, or a worker holds the run and will write the row).
    """
    store, now = svc.store, svc.clock.now()
    row = store.get_run(tenant_id, run_id)
    if row is None:
        return []
    suspect_lease = lease_problem(row, now=now) is not None
    live = row.lease_owner is not None and good_time(row.lease_expires_at) \
        and row.lease_expires_at is not None and row.lease_expires_at >= now \
        and row.lease_owner not in dead
    if live and not suspect_lease:
        return []
    s, head, _ = svc.journal.load_head(tenant_id, run_id)
    found = disagreements(row, s, now=now)
    if row.last_seq != s.seq or row.last_hash != head:
        # Nobody holds the run: its row should record the journal's head.
        found.append(Disagreement("last_seq", row.last_seq, repr(s.seq)))
    if not found:
        return []
    update = row_update(svc.journal.codec, s, row, now)
    repair = RowRepair(tenant_id, run_id, row, s.seq, head, update, clear_lease=suspect_lease)
    if not store.repair_run(repair, now=now):
        return []
    _report(row, found)
    return found


def heal_rows(
    svc: StepServices, unhealed: set[tuple[str, str]], *, limit: int = SUSPECTS_PER_ROUND,
    dead: Collection[str] = (), since: float | None = None,
) -> int:
    """Heal the suspect rows the store finds; how many were rewritten.

    A row that cannot be read or folded is logged once and left for the audit to report.

    Args:
        svc: The engine's store, journal and clock.
        unhealed: The runs whose rows could not be healed, and were logged; grows.
        limit: How many suspect rows to check, at most.
        dead: Lease owners known dead: their leases hold no row back from healing.
        since: Check only the rows written at or after this time (None: every row).
    """
    return heal_found(svc, unhealed, svc.store.suspect_runs(
        now=svc.clock.now(), limit=limit, since=since), dead=dead)


def heal_found(
    svc: StepServices, unhealed: set[tuple[str, str]], found: list[tuple[str, str]], *,
    dead: Collection[str] = (),
) -> int:
    """Heal the suspect rows ``found`` (as :func:`heal_rows`); how many were rewritten."""
    healed = 0
    for tenant_id, run_id in found:
        try:
            healed += bool(heal_row(svc, tenant_id, run_id, dead=dead))
        except Exception as exc:  # one bad journal must not stop the others' healing
            if (tenant_id, run_id) in unhealed:
                continue  # said once; the audit says it again whenever asked
            unhealed.add((tenant_id, run_id))
            log.warning("run %s (tenant %s): its runs row looks wrong and its journal "
                        "cannot be folded to heal it (%s: %s); `underway audit verify` "
                        "reports it", run_id, tenant_id, type(exc).__name__, exc)
    return healed


class RowCheck:
    """Where a worker's looks for suspect rows stand, so that a look reads only the rows
    written since the one before.

    The first look checks every row; so does one every ``full_every`` seconds after it.
    Each look between checks the rows written since the previous look began, less
    ``margin`` seconds (the clocks of the hosts that write rows may be that far apart) and
    less :data:`~underway.store.leases.MAX_LEASE_TTL`: some rows turn suspect only when
    the lease they were written under runs out, with no write. A look that finds
    ``limit`` suspects may have left some unread: the next look starts where it started.
    A row changed without its write time (by hand, say) waits for a look at every row.

    Args:
        margin: Seconds the window of a look reaches back before the previous look.
        full_every: Seconds between looks that check every row.
    """

    def __init__(self, *, margin: float, full_every: float) -> None:
        if not full_every > 0:
            raise ConfigurationError(
                f"row_full_check_every must be positive seconds, not {full_every}")
        self.margin = margin
        self.full_every = full_every
        self.since: float | None = None
        """Rows written at or after this time are the next look's (None: every row)."""
        self.full_due: float | None = None
        """When the next look checks every row (None: the first look does)."""
        self.full_looks = 0
        """Looks that checked every row."""

    def look(
        self, svc: StepServices, unhealed: set[tuple[str, str]], *,
        limit: int = SUSPECTS_PER_ROUND, dead: Collection[str] = (),
    ) -> int:
        """Check the rows due a look and heal the suspects; how many were rewritten."""
        now = svc.clock.now()
        full = self.since is None or self.full_due is None or now >= self.full_due
        since = None if full else self.since
        found = svc.store.suspect_runs(now=now, limit=limit, since=since)
        healed = heal_found(svc, unhealed, found, dead=dead)
        if len(found) < limit:  # every suspect of the window was read
            self.since = now - self.margin - MAX_LEASE_TTL
            if full:
                self.full_due = now + self.full_every
                self.full_looks += 1
        return healed
