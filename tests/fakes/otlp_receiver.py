"""A real OTLP/HTTP trace receiver, local to a test: it accepts what an OpenTelemetry
exporter posts to ``/v1/traces`` (protobuf, gzip or not), decodes it with the OTLP
protobuf definitions, and keeps every span it received, duplicates included.

    with OtlpReceiver() as receiver:
        ... export to receiver.url ...
        receiver.spans  # every span received, in order

``OtlpReceiver(refuse=n)`` answers the first ``n`` posts 503, as a collector that is down.
"""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

_KINDS = {Span.SPAN_KIND_INTERNAL: "internal", Span.SPAN_KIND_CLIENT: "client",
          Span.SPAN_KIND_SERVER: "server", Span.SPAN_KIND_CONSUMER: "consumer",
          Span.SPAN_KIND_PRODUCER: "producer"}


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return None if which is None else getattr(v, which)


def decoded(span: Span, service: str) -> dict[str, Any]:
    """What a test reads of a received span."""
    return {
        "name": span.name,
        "service": service,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_id": span.parent_span_id.hex() or None,
        "kind": _KINDS.get(span.kind, "unspecified"),
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "status": "ERROR" if span.status.code == Status.STATUS_CODE_ERROR else "UNSET",
        "attributes": {a.key: _value(a.value) for a in span.attributes},
    }


class OtlpReceiver:
    """An OTLP/HTTP receiver on 127.0.0.1, on a free port, in a thread."""

    def __init__(self, *, refuse: int = 0) -> None:
        self.spans: list[dict[str, Any]] = []
        self.posts = 0
        self._refuse = refuse
        self._lock = threading.Lock()
        self._received = threading.Condition(self._lock)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                status = receiver._take(self.path, body)
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The traces URL to export to."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1/traces"

    def _take(self, path: str, body: bytes) -> int:
        if path != "/v1/traces":
            return 404
        with self._lock:
            self.posts += 1
            if self.posts <= self._refuse:
                return 503
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for rs in request.resource_spans:
                service = next((a.value.string_value for a in rs.resource.attributes
                                if a.key == "service.name"), "")
                for ss in rs.scope_spans:
                    self.spans += [decoded(s, service) for s in ss.spans]
            self._received.notify_all()
        return 200

    def wait_for(self, count: int, *, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The spans received, once there are at least ``count`` (or the timeout passed)."""
        with self._lock:
            self._received.wait_for(lambda: len(self.spans) >= count, timeout=timeout)
            return list(self.spans)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
