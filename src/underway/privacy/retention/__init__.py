"""Retention: purging the payloads of finished runs once their period is over, keeping a
skeleton that still verifies, collecting the blobs nothing refers to any more, and legal
holds that stop all of it.

* :class:`Retention` holds the rules (``[retention]`` in ``underway.toml``): periods per
  final status, per flow, per tenant and per flow of a tenant; no rule, no purge.
* :func:`sweep` purges every run past its period — each in one transaction: every event's
  payload replaced by a tombstone (:class:`~underway.events.Tombstone`) that keeps its
  skeleton and its place in the hash chain, its checkpoints, signals and error text gone —
  except runs a legal hold stands on (by run, or by the data subject its row names), then
  deletes the blobs no remaining event or checkpoint refers to, and writes the sweep log.
* Once a purged run's ``forget_after`` is over, :func:`sweep` forgets it: its skeleton
  deleted in one transaction that appends its head to the tenant's forget log, unless a
  hold stands on it or a related run has not finished.
* :class:`RetentionSweeper` sweeps on a schedule beside a worker (``Worker(retention=...)``)
  or a runner, off the event loop.

``underway retention sweep|log`` and ``underway hold add|rm|ls`` are the command line;
docs/data-protection.md says what a purge keeps, what it removes and what it proves.
"""

from __future__ import annotations

from ._blobs import Marks, mark_blobs, sweep_blobs
from ._purge import Unpurgeable, prepare
from ._report import Outcome, SweepReport, TenantSweep
from ._rules import (
    BLOB_GRACE,
    DEFAULT_EVERY,
    STATUSES,
    Periods,
    Retention,
    Rule,
    Rules,
    format_period,
    parse_period,
)
from ._sweep import sweep
from ._sweeper import RetentionSweeper

__all__ = [
    "BLOB_GRACE",
    "DEFAULT_EVERY",
    "STATUSES",
    "Marks",
    "Outcome",
    "Periods",
    "Retention",
    "RetentionSweeper",
    "Rule",
    "Rules",
    "SweepReport",
    "TenantSweep",
    "Unpurgeable",
    "format_period",
    "mark_blobs",
    "parse_period",
    "prepare",
    "sweep",
    "sweep_blobs",
]
