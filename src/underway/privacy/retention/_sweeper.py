"""Sweeping on a schedule beside a worker or a runner, off the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

from ...clock import Clock, SystemClock
from ...codec import Codec
from ...store._offload import run_io
from ...store.base import Store
from ._report import SweepReport
from ._rules import Retention
from ._sweep import sweep

log = logging.getLogger("underway.retention")


class RetentionSweeper:
    """Sweeps ``store`` by ``retention`` every ``retention.every`` seconds.

    The first sweep is at once. Sweeps run on the store's I/O threads, so the steps of the
    runs on the same event loop never wait for them::

        sweeper = RetentionSweeper(store, retention, codec=engine.journal.codec)
        stop = asyncio.Event()
        await asyncio.gather(runner.serve(stop), sweeper.run(stop))

    A sweep that fails (the database restarting, say) is logged and tried again at the next
    interval. ``sweeps`` counts the sweeps that ended, ``purged`` the runs they purged,
    ``forgotten`` the purged runs they forgot.
    ``last`` is the report of the latest.

    Args:
        store: The store.
        retention: The retention periods.
        codec: How the runs are read; None means like the store's.
        clock: Says the time now; None means the system clock.
        by: Who sweeps (logged).
    """

    def __init__(
        self, store: Store, retention: Retention, *, codec: Codec | None = None,
        clock: Clock | None = None, by: str = "sweeper",
    ) -> None:
        self.store = store
        self.retention = retention
        self.codec = codec
        self.clock: Clock = clock or SystemClock()
        self.by = by
        self.sweeps = 0
        self.purged = 0
        self.forgotten = 0
        self.last: SweepReport | None = None
        self._stopping = threading.Event()

    def run_once(self) -> SweepReport:
        """Sweep now (this blocks: async code calls it through ``run_io``)."""
        report = sweep(self.store, self.retention, by=self.by, clock=self.clock,
                       codec=self.codec, stop=self._stopping.is_set)
        self.sweeps += 1
        self.purged += report.purged
        self.forgotten += report.forgotten
        self.last = report
        return report

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Sweep at once and then every ``retention.every`` seconds, until ``stop`` is set
        (or the task is cancelled: a sweep in progress then ends after the run it is at)."""
        stop = stop or asyncio.Event()
        self._stopping.clear()
        while not stop.is_set():
            try:
                report = await run_io(self.store, self.run_once)
            except asyncio.CancelledError:
                self._stopping.set()
                raise
            except Exception:
                log.exception("retention sweep failed; trying again in %gs",
                              self.retention.every)
            else:
                for t in report.tenants:
                    if t.outcomes or t.forgets or t.blobs_deleted:
                        log.info("retention sweep of tenant %r: %d purged, %d held, %d "
                                 "skipped, %s blobs deleted, %d forgotten", t.tenant_id,
                                 t.count("purged"), t.count("held"), t.count("skipped"),
                                 t.blobs_deleted or 0, t.forgotten)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.retention.every)
