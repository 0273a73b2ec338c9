"""The metrics seam: what the engine tells about the runs it drives. The base class does
nothing, and the engine holds it unless given another, so metrics cost one call per commit
and import nothing when unused; :class:`underway.telemetry.PrometheusMetrics` (loaded only
when named) counts into a Prometheus registry."""

from __future__ import annotations

from collections.abc import Sequence

from .. import events as ev


class Metrics:
    """The engine's metrics seam; this base records nothing. ``enabled`` is False on the
    base, so the engine skips even computing what it would report."""

    enabled: bool = False

    def activated(self, *, tenant_id: str, flow: str, wake_latency: float | None,
                  takeover: bool) -> None:
        """A leased run was loaded: ``wake_latency`` is seconds from when it was due (its
        row's wake-up time) to now; ``takeover`` is true when its journal shows a step
        started and not ended (the worker that held it died or lost its lease)."""

    def committed(self, tenant_id: str, run_id: str, flow: str,
                  events: Sequence[tuple[int, float, ev.RunEvent]]) -> None:
        """Events ``(seq, at, event)`` of one run were appended durably."""


NO_METRICS = Metrics()
"""The engine's default: records nothing."""
