"""The engine's metrics seam costs nothing unused: an engine loads neither Prometheus nor
OpenTelemetry until a name that needs them is read."""

from __future__ import annotations

import subprocess
import sys


def test_an_engine_loads_neither_prometheus_nor_opentelemetry() -> None:
    code = (
        "import sys, underway.engine, underway.worker, underway.telemetry as t\n"
        "assert not [m for m in sys.modules if m.startswith(('prometheus_client', "
        "'opentelemetry'))], sorted(sys.modules)\n"
        "t.Tracing; assert 'opentelemetry.trace' in sys.modules\n"
        "t.PrometheusMetrics; assert 'prometheus_client' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
