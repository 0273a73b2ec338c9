"""Forgetting purged runs: once a run's ``forget_after`` period is over, its skeleton
(row, tombstones, purge record) is deleted in one transaction that appends a line to its
tenant's forget log (:meth:`~underway.store.retention.RetentionStore.forget_run`).

A run is left as it is (``held``) while a legal hold stands on it or its subject, and
(``skipped``) when it was not purged, when its journal does not verify (a forget must
never hide what the audit would find), or while a run its journal names as parent, fork
origin, child or fork is not finished: a live relative may still send it a signal, a
child's end or a cancel, and those must not land on a run that is gone. A finished
relative sends nothing more, so a run whose relatives all ended (or are forgotten too) is
forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from ... import faults
from ...clock import Clock
from ...errors import ConflictError
from ...events import is_tombstone, read_tombstone
from ...journal import Journal
from ...store.base import FINAL, Forget, RunRecord, Store, StoredEvent
from ...store.features import privacy
from ._report import Outcome
from ._rules import Retention, Rule

log = logging.getLogger("underway.retention")

PAGE = 100
"""Candidate runs read at a time."""

_RELATIVES = {
    "RunStarted": ("parent_run_id", "forked_from"),
    "ChildStarted": ("run_id",),
    "RunForked": ("run_id",),
}
"""The fields of a journal's events (kept by their tombstones) that name related runs."""


def forget_candidates(store: Store, retention: Retention, tenant: str,
                      now: float) -> Iterator[tuple[RunRecord, Rule]]:
    """Every purged run of the tenant past its ``forget_after`` period, each with the rule
    that applies: a query per flow with a rule of its own, and one for the other flows."""
    named = retention.named_flows(tenant)
    queries: list[tuple[str | None, Rule | None]] = [
        (flow, retention.forget_rule(tenant, flow)) for flow in sorted(named)]
    queries.append((None, retention.forget_rule(tenant, "")))
    for flow, rule in queries:
        if rule is None:
            continue
        after = None
        while True:
            page = privacy(store).forget_candidates(
                tenant, ended_before=now - rule.period, flow=flow, after=after, limit=PAGE)
            for row in page:
                if flow is not None or row.flow not in named:
                    yield row, rule
            if len(page) < PAGE:
                break
            after = (page[-1].updated_at, page[-1].run_id)


def relatives(stored: list[StoredEvent]) -> set[str]:
    """The runs a journal names as its parent, fork origin, children and forks."""
    found: set[str] = set()
    for event in stored:
        if event.type not in _RELATIVES or not is_tombstone(event.payload):
            continue
        kept = read_tombstone(event.payload).kept
        for name in _RELATIVES[event.type]:
            value = kept.get(name)
            if isinstance(value, str) and value:
                found.add(value)
    return found


def forget_one(journal: Journal, row: RunRecord, rule: Rule, held: dict[str, str], *,
               sweep_id: str, dry_run: bool, clock: Clock,
               begin: Callable[[], None]) -> Outcome:
    """Forget one purged run (dry: only check that it could be); ``begin`` is called
    before anything changes."""
    def outcome(action: str, reason: str = "") -> Outcome:
        return Outcome(row.run_id, row.flow, row.status, row.updated_at, action,
                       rule.describe(), row.last_seq, reason)

    store, t, r = journal.store, row.tenant_id, row.run_id
    if r in held:
        return outcome("held", held[r])
    stored = store.load_events(t, r)
    if stored and not all(is_tombstone(s.payload) for s in stored):
        return outcome("skipped", "events were added after its purge")
    checked = journal.verify_events(t, r, stored, row)
    if not checked.ok:
        return outcome("skipped", f"its journal fails verification at seq {checked.bad_seq} "
                                  f"({checked.reason}); run `underway audit verify`")
    for other in sorted(relatives(stored) - {r}):
        rel = store.get_run(t, other)
        if rel is not None and rel.status not in FINAL:
            return outcome("skipped", f"related run {other} is {rel.status}, not finished")
    if dry_run:
        return outcome("forgotten")
    begin()
    faults.point("retention.before_forget")
    try:
        result = privacy(store).forget_run(Forget(t, r, row.last_seq, row.last_hash,
                                                  sweep_id, clock.now()))
    except ConflictError as exc:
        return outcome("skipped", str(exc))
    if result == "held":
        return outcome("held", "a legal hold was placed while the sweep ran")
    if result != "forgotten":
        return outcome("skipped", f"another sweep changed it meanwhile ({result})")
    log.debug("run %s (tenant %s) forgotten", r, t)
    return outcome("forgotten")
