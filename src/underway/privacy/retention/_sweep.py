"""A retention sweep: in each tenant, every finished run past its period is purged unless a
legal hold stands on it or on its subject; then, when purges since the tenant's last
collection may have left blobs unreferenced, those are collected. The sweep is written to
the sweep log (:meth:`~underway.store.retention.RetentionStore.record_sweep`) when it
starts and when it ends, and each purge is recorded with it.

A sweep killed at any point leaves every run purged wholly or not at all (each purge is
one transaction), and the next sweep goes on where it stopped: purged runs are never
candidates again, and a sweep that did not end is collected after. A tenant where a sweep
found nothing to purge, hold or skip, and nothing to collect, gets no entry in the log.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterator

from ... import faults
from ...clock import Clock, SystemClock
from ...codec import Codec
from ...errors import ConflictError
from ...journal import Journal
from ...store.base import FINAL, RunRecord, Store, SweepRecord, whole
from ...store.features import privacy
from ._blobs import mark_blobs, sweep_blobs
from ._forget import forget_candidates, forget_one
from ._purge import Unpurgeable, prepare
from ._report import Outcome, SweepReport, TenantSweep
from ._rules import STATUSES, Retention, Rule

log = logging.getLogger("underway.retention")

PAGE = 100
"""Candidate runs read at a time."""


def sweep(
    store: Store,
    retention: Retention,
    *,
    tenant_id: str | None = None,
    dry_run: bool = False,
    by: str = "underway",
    clock: Clock | None = None,
    codec: Codec | None = None,
    collect: bool = True,
    stop: Callable[[], bool] | None = None,
) -> SweepReport:
    """Purge every finished run past its retention period (see :class:`Retention`).

    What legal holds hold is kept. Then the blobs the purges left unreferenced are
    collected.

    Args:
        store: The store.
        retention: The retention periods.
        tenant_id: The tenant; None means every tenant.
        dry_run: Change nothing, write no log, report what would be purged.
        by: Who sweeps (logged).
        clock: Says the time now; None means the system clock.
        codec: How the runs are read. By default, like the store's, which opens encrypted
            payloads when encryption is on for the store.
        collect: False leaves the blobs uncollected.
        stop: Asked between runs. Once it says True the sweep ends early (a worker
            stopping). It is logged as ended, with its collection not done.
    """
    clock = clock or SystemClock()
    journal = Journal(store, codec)
    report = SweepReport(str(uuid.uuid4()), dry_run, clock.now())
    tenants = [tenant_id] if tenant_id is not None else store.tenants()
    stopped = stop or (lambda: False)
    for tenant in tenants:
        if stopped():
            break
        report.tenants.append(_sweep_tenant(journal, retention, tenant, report, by, clock,
                                            collect, stopped))
    return report


def _sweep_tenant(journal: Journal, retention: Retention, tenant: str, report: SweepReport,
                  by: str, clock: Clock, collect: bool,
                  stopped: Callable[[], bool]) -> TenantSweep:
    store, done = whole(journal.store, by="a retention sweep"), TenantSweep(tenant)
    log = _Log(store, SweepRecord(report.sweep_id, tenant, report.started_at, by),
               report.dry_run)
    earlier = [] if report.dry_run else store.list_sweeps(tenant, limit=1)
    held = _held_runs(store, tenant)
    now = clock.now()
    for row, rule in _candidates(store, retention, tenant, now):
        if stopped():
            break
        done.outcomes.append(_one(journal, row, rule, held, report, clock, log.begin))
    if not report.dry_run and collect and not stopped() and (
            done.count("purged") or _uncollected(earlier[0] if earlier else None)):
        log.begin()
        faults.point("retention.before_collect")
        collected_at = clock.now()
        marks = mark_blobs(journal, tenant, stopped)
        done.blobs_deleted = None if marks.problem else sweep_blobs(
            journal, marks, grace=retention.blob_grace)
        done.collection_note = marks.problem
        log.record = dataclasses.replace(
            log.record, blobs_deleted=done.blobs_deleted,
            collected_at=None if marks.problem else collected_at)
    if retention.forgets:
        for row, rule in forget_candidates(store, retention, tenant, now):
            if stopped():
                break
            done.forgets.append(forget_one(journal, row, rule, held, sweep_id=report.sweep_id,
                                           dry_run=report.dry_run, clock=clock,
                                           begin=log.begin))
    if done.outcomes or done.forgets or log.begun:
        log.begin()
        log.write(dataclasses.replace(
            log.record, finished_at=clock.now(), purged=done.count("purged"),
            held=done.count("held"), skipped=done.count("skipped"),
            forgotten=done.forgotten,
        ))
    return done


class _Log:
    """A sweep's entry in the sweep log of one tenant: written before the sweep first
    changes anything there (so a sweep killed after that shows as not ended), and again
    when it ends; a tenant where the sweep found nothing gets none. A dry run writes
    nothing."""

    def __init__(self, store: Store, record: SweepRecord, dry: bool) -> None:
        self.store, self.record, self.dry, self.begun = store, record, dry, False

    def begin(self) -> None:
        if not self.begun:
            self.begun = True
            self.write(self.record)

    def write(self, record: SweepRecord) -> None:
        if not self.dry:
            self.store.record_sweep(record)


def _uncollected(previous: SweepRecord | None) -> bool:
    """Whether the tenant's previous sweep may have left blobs to collect: it did not end
    (killed, say), or it purged runs and collected nothing."""
    if previous is None:
        return False
    return previous.finished_at is None or (
        previous.purged > 0 and previous.collected_at is None)


def _held_runs(store: Store, tenant: str) -> dict[str, str]:
    """The tenant's runs that legal holds hold now, each with what holds it (the purge
    itself checks again, in its transaction)."""
    found: dict[str, str] = {}
    for hold in store.list_holds(tenant):
        if hold.kind == "run":
            found.setdefault(hold.target, f"legal hold on the run: {hold.reason}")
        else:
            for run in store.runs_of_subject(tenant, hold.target):
                found.setdefault(run.run_id,
                                 f"legal hold on subject {hold.target}: {hold.reason}")
    return found


def _candidates(store: Store, retention: Retention, tenant: str,
                now: float) -> Iterator[tuple[RunRecord, Rule]]:
    """Every run of the tenant past its period, each with the rule that applies: a query per
    final status and flow with a rule of its own, and one for the other flows."""
    named = retention.named_flows(tenant)
    for status in STATUSES:
        queries: list[tuple[str | None, Rule | None]] = [
            (flow, retention.rule(tenant, flow, status)) for flow in sorted(named)]
        queries.append((None, retention.rule(tenant, "", status)))
        for flow, rule in queries:
            if rule is None:
                continue
            after = None
            while True:
                page = store.retention_candidates(
                    tenant, status=status, ended_before=now - rule.period, flow=flow,
                    after=after, limit=PAGE)
                for row in page:
                    if flow is not None or row.flow not in named:
                        yield row, rule
                if len(page) < PAGE:
                    break
                after = (page[-1].updated_at, page[-1].run_id)


def _one(journal: Journal, row: RunRecord, rule: Rule, held: dict[str, str],
         report: SweepReport, clock: Clock, begin: Callable[[], None]) -> Outcome:
    """Purge one run (dry: only check that it could be); ``begin`` is called before
    anything changes."""
    def outcome(action: str, events: int = 0, reason: str = "") -> Outcome:
        return Outcome(row.run_id, row.flow, row.status, row.updated_at, action,
                       rule.describe(), events, reason)

    if row.run_id in held:
        return outcome("held", reason=held[row.run_id])
    try:
        purge = prepare(journal, row, rule.describe(), sweep_id=report.sweep_id,
                        at=clock.now())
    except Unpurgeable as exc:
        log.warning("run %s (tenant %s) not purged: %s", row.run_id, row.tenant_id, exc)
        return outcome("skipped", reason=str(exc))
    if report.dry_run:
        return outcome("purged", len(purge.tombstones))
    begin()
    faults.point("retention.before_purge")
    try:
        result = privacy(journal.store).purge_run(purge)
    except ConflictError as exc:
        return outcome("skipped", reason=str(exc))
    faults.point("retention.after_purge")
    if result == "held":
        return outcome("held", reason="a legal hold was placed while the sweep ran")
    if result == "already":
        return outcome("skipped", reason="another sweep purged it meanwhile")
    assert row.status in FINAL
    return outcome("purged", len(purge.tombstones))
