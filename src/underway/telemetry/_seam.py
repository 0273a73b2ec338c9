"""The metrics seam: what the engine tells about the runs it drives. The base class does
nothing, and the engine holds it unless given another, so metrics cost one call per commit
and import nothing when unused; :class:`underway.telemetry.PrometheusMetrics` (loaded only
when named) counts into a Prometheus registry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import events as ev
from ..events import JSON
from ..journal.state import RunState

if TYPE_CHECKING:
    from ..effects import Tool


class Metrics:
    """The engine's metrics seam; this base records nothing. ``enabled`` is False on the
    base, so the engine skips even computing what it would report."""

    enabled: bool = False
    wants_interrupted: bool = False
    """Whether :meth:`interrupted` is wanted: the engine reads the journal for it only
    then."""

    def activated(self, state: RunState, *, wake_latency: float | None,
                  takeover: bool) -> None:
        """A leased run was loaded.

        The worker that held a taken-over run died or lost its lease.

        Args:
            state: The run, as its journal says.
            wake_latency: Seconds from when it was due (its row's wake-up time) to now.
            takeover: True when its journal shows a step started and not ended.
        """

    def interrupted(self, tenant_id: str, run_id: str, flow: str,
                    events: Sequence[tuple[int, float, ev.RunEvent]]) -> None:
        """Told after :meth:`activated` on a takeover, when :attr:`wants_interrupted`.

        The events are those of the step attempt that an earlier activation began and never
        ended. Its worker died or lost its lease.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            flow: The run's flow.
            events: The journaled events ``(seq, at, event)``, from its ``StepStarted`` on.
        """

    def calling(self, tenant_id: str, run_id: str, key: str, tool: Tool,
                args: JSON) -> None:
        """A step calls a tool.

        Told only for a tool that lets traces record its arguments or results
        (:attr:`Tool.traced`). Also told for a call whose journaled result is returned again.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            key: The call's idempotency key.
            tool: The tool called.
            args: The call's arguments.
        """

    def committed(self, tenant_id: str, run_id: str, flow: str,
                  events: Sequence[tuple[int, float, ev.RunEvent]]) -> None:
        """Events of one run were appended durably.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            flow: The run's flow.
            events: The events ``(seq, at, event)``.
        """

    def abandoned(self, tenant_id: str, run_id: str) -> None:
        """The activation ends without handing the run back (its lease was lost, the
        database failed, the worker was cancelled); :meth:`left` follows. What it began and
        did not end is the next activation's to finish (see :meth:`interrupted`)."""

    def left(self, tenant_id: str, run_id: str) -> None:
        """The activation of the run ended (the run was handed back, or the worker lost or
        gave up its lease)."""


class Fanout(Metrics):
    """Several seams as one (say, Prometheus metrics and traces)."""

    def __init__(self, *seams: Metrics) -> None:
        self.seams = [s for s in seams if s.enabled]
        self.enabled = bool(self.seams)
        self.wants_interrupted = any(s.wants_interrupted for s in self.seams)

    def activated(self, state: RunState, *, wake_latency: float | None,
                  takeover: bool) -> None:
        """Tell every seam.

        Args:
            state: The run loaded.
            wake_latency: Seconds from when it was due to now.
            takeover: True when the run was taken over.
        """
        for s in self.seams:
            s.activated(state, wake_latency=wake_latency, takeover=takeover)

    def interrupted(self, tenant_id: str, run_id: str, flow: str,
                    events: Sequence[tuple[int, float, ev.RunEvent]]) -> None:
        """Tell every seam.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            flow: The run's flow.
            events: The unended attempt's events ``(seq, at, event)``.
        """
        for s in self.seams:
            s.interrupted(tenant_id, run_id, flow, events)

    def calling(self, tenant_id: str, run_id: str, key: str, tool: Tool,
                args: JSON) -> None:
        """Tell every seam.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            key: The call's idempotency key.
            tool: The tool called.
            args: The call's arguments.
        """
        for s in self.seams:
            s.calling(tenant_id, run_id, key, tool, args)

    def committed(self, tenant_id: str, run_id: str, flow: str,
                  events: Sequence[tuple[int, float, ev.RunEvent]]) -> None:
        """Tell every seam.

        Args:
            tenant_id: The run's tenant.
            run_id: The run's id.
            flow: The run's flow.
            events: The committed events ``(seq, at, event)``.
        """
        for s in self.seams:
            s.committed(tenant_id, run_id, flow, events)

    def abandoned(self, tenant_id: str, run_id: str) -> None:
        """Tell every seam."""
        for s in self.seams:
            s.abandoned(tenant_id, run_id)

    def left(self, tenant_id: str, run_id: str) -> None:
        """Tell every seam."""
        for s in self.seams:
            s.left(tenant_id, run_id)


NO_METRICS = Metrics()
"""The engine's default: records nothing."""
