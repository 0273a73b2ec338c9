"""Where spans go: an OpenTelemetry SDK span exporter, OTLP or console, for
:class:`~underway.telemetry.Tracing` (``underway worker`` with traces in its config file).

The SDK and the OTLP exporters are optional (the ``otel`` extra); they are imported only
when an exporter is made here, and their absence is reported naming what to install.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from .._extras import needs_extra
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

Exporter = Literal["otlp", "console"]
Protocol = Literal["http/protobuf", "grpc"]

def span_exporter(
    exporter: Exporter,
    *,
    endpoint: str | None = None,
    protocol: Protocol = "http/protobuf",
) -> SpanExporter:
    """An SDK span exporter sending to ``exporter``; give it to
    :class:`~underway.telemetry.Tracing`, which batches.

    ``otlp`` sends to a collector at ``endpoint`` over ``protocol``. For ``http/protobuf``,
    that is the collector's base URL (``http://collector:4318``) or the full traces URL.
    ``/v1/traces`` is added when the URL has no path. For ``grpc``, it is the collector's
    address (``http://collector:4317``). Without ``endpoint`` the exporter's own default
    applies: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, else
    localhost. So do ``OTEL_EXPORTER_OTLP_HEADERS`` and the other ``OTEL_EXPORTER_OTLP_*``
    variables. ``console`` writes each span as JSON on stderr (stdout is the worker's).

    Args:
        exporter: Where spans go: ``otlp`` or ``console``.
        endpoint: The collector's URL or address, for ``otlp``.
        protocol: ``http/protobuf`` or ``grpc``, for ``otlp``.

    Raises:
        MissingExtra: The SDK or the OTLP/HTTP exporter is missing; it names the otel
            extra.
        ConfigurationError: The gRPC exporter is missing; it names the package.
    """
    with needs_extra("otel", "traces"):
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
    if exporter == "console":
        return ConsoleSpanExporter(out=sys.stderr)
    return _otlp(endpoint, protocol)


def _otlp(endpoint: str | None, protocol: Protocol) -> SpanExporter:
    if protocol == "grpc":
        try:
            # Not in the otel extra (it brings grpcio), so not known to the type checker.
            grpc = importlib.import_module(
                "opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
        except ModuleNotFoundError as exc:
            raise ConfigurationError(
                f"OTLP over gRPC needs its exporter ({exc.name} is missing): pip install "
                "opentelemetry-exporter-otlp-proto-grpc (or use protocol http/protobuf, "
                "which the otel extra brings)"
            ) from None
        found: SpanExporter = grpc.OTLPSpanExporter(endpoint=endpoint)
        return found
    with needs_extra("otel", "traces over OTLP/HTTP"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )
    return HttpExporter(endpoint=None if endpoint is None else traces_url(endpoint))


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of ``endpoint``: a base URL (no path) gets
    ``/v1/traces``, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` does; a URL with a path is kept."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(
            f"OTLP endpoint {endpoint!r} must be an http:// or https:// URL")
    if parts.path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint
