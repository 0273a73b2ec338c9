"""An OpenTelemetry span exporter that survives SIGKILL: each ended span is one JSON line,
written to the process's own file with one ``write(2)`` before the span's ``end()``
returns (under ``SimpleSpanProcessor``). A process killed a moment later has lost nothing
it ended; an in-memory exporter would have to be dumped, which a killed process cannot do.

- :func:`tracer_provider`: a provider exporting this way into a directory;
- :func:`read_spans`: every span every process wrote there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class FileSpanExporter(SpanExporter):
    """Appends each span to ``directory/spans-<pid>.jsonl`` as it ends."""

    def __init__(self, directory: Path) -> None:
        path = directory / f"spans-{os.getpid()}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write the spans, one line each, now."""
        for span in spans:
            os.write(self._fd, (json.dumps(record(span)) + "\n").encode())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Close the file."""
        os.close(self._fd)


def record(span: ReadableSpan) -> dict[str, Any]:
    """What a test reads of a span: names, ids, times, status, attributes and events."""
    assert span.context is not None
    return {
        "name": span.name,
        "pid": os.getpid(),
        "trace_id": format(span.context.trace_id, "032x"),
        "span_id": format(span.context.span_id, "016x"),
        "parent_id": None if span.parent is None else format(span.parent.span_id, "016x"),
        "start": span.start_time,
        "end": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})}
                   for e in span.events],
    }


def tracer_provider(directory: Path) -> TracerProvider:
    """A tracer provider whose spans are written to ``directory`` as they end."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(directory)))
    return provider


def read_spans(directory: Path) -> list[dict[str, Any]]:
    """Every span written to ``directory``, by every process."""
    return [json.loads(line) for path in sorted(directory.glob("spans-*.jsonl"))
            for line in path.read_text().splitlines() if line]
