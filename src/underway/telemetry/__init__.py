"""Telemetry: the engine's metrics seam and Prometheus metrics.

- :class:`Metrics`: the seam the engine reports through (the base records nothing);
- :class:`PrometheusMetrics`: steps, step, tool and model latencies, model tokens and cost,
  runs that ended, wake-up latency, lease takeovers, counted into its own registry
  (``underway worker --metrics-port``);
- :class:`DatabaseCollector`: what the database says — runs by status, pending approvals,
  dead runs — computed on each scrape (``/metrics`` of ``underway serve``);
- :func:`serve_metrics`: a registry served over HTTP from a background thread;
- :class:`Tracing`: OpenTelemetry spans of runs, steps, tool and model calls, policy
  decisions and approval waits, one trace per run, exported from the journal;
- :func:`span_exporter`: an OpenTelemetry SDK exporter sending spans over OTLP or to the
  console (the ``otel`` extra);
- :func:`gen_ai_provider`: the ``gen_ai.provider.name`` a model's id tells;
- :class:`Fanout`: several seams as one.

``prometheus_client`` and OpenTelemetry are imported only when a name that needs them is
first read: an engine without telemetry loads neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._seam import NO_METRICS, Fanout, Metrics

# The engine loads the seam only: Prometheus and OpenTelemetry load when first named.
if TYPE_CHECKING:
    from ._export import span_exporter
    from ._prometheus import DatabaseCollector, PrometheusMetrics, serve_metrics
    from ._spans import gen_ai_provider
    from ._tracing import Tracing
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "DatabaseCollector": "._prometheus", "PrometheusMetrics": "._prometheus",
        "serve_metrics": "._prometheus", "Tracing": "._tracing",
        "gen_ai_provider": "._spans", "span_exporter": "._export",
    }, globals())

__all__ = ["NO_METRICS", "DatabaseCollector", "Fanout", "Metrics", "PrometheusMetrics",
           "Tracing", "gen_ai_provider", "serve_metrics", "span_exporter"]
