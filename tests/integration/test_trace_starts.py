"""One trace per run from every start path, on SQLite and PostgreSQL: a run started from
the command line without a trace context gets one minted and journaled, and its spans,
across a wait and a second activation, are one trace under its root span; a run started
from Python with a ``traceparent`` keeps it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway import events as ev
from underway.cli import app
from underway.lineage import root_span_id, trace_parent
from underway.runner import Runner
from underway.telemetry import Tracing

CALLER = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


class Invoice(BaseModel):
    invoice: str


class Notes(BaseModel):
    pass


reminders: uw.Flow[Notes, Invoice] = uw.Flow("reminders", state=Notes, input=Invoice,
                                             signals=["paid"])


@reminders.step
async def remind(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    return ctx.wait("paid", then=settle)


@reminders.step
async def settle(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    return ctx.done(ctx.signal)


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
def store(url: str) -> Iterator[Any]:
    s = uw.connect(url)
    yield s
    s.close()


def started(store: Any, run_id: str) -> ev.RunStarted:
    first = uw.Client(store).history(run_id)[0].event
    assert isinstance(first, ev.RunStarted)
    return first


def test_a_run_started_from_the_cli_is_one_trace_across_its_activations(
    url: str, store: Any
) -> None:
    code, out = cli("runs", "start", "reminders", "--input", '{"invoice": "INV-1"}',
                    "--json", "--db", url)
    assert code == 0, out
    run_id = json.loads(out)["run_id"]
    context = started(store, run_id).trace_context
    found = trace_parent(context)
    assert found is not None, context
    # Minted: it names the run's own root span, which has no parent.
    assert found[1] == root_span_id(run_id)

    exporter = InMemorySpanExporter()
    tracing = Tracing(store, exporter, flows=[reminders], recover_window=None)
    engine = uw.Engine(store, flows=[reminders], metrics=tracing)
    asyncio.run(Runner(engine).run_until_idle())
    code, out = cli("runs", "signal", run_id, "paid", "--payload", '{"ok": 1}', "--db", url)
    assert code == 0, out
    asyncio.run(Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "completed"
    tracing.shutdown()

    spans = exporter.get_finished_spans()
    assert {format(s.context.trace_id, "032x") for s in spans if s.context} == {found[0]}
    root = [s for s in spans if s.name == "underway.run reminders"]
    assert len(root) == 1 and root[0].parent is None
    steps = sorted(s.name for s in spans if s.name.startswith("underway.step "))
    assert steps == ["underway.step remind", "underway.step settle"]
    for s in spans:
        if s is not root[0]:
            assert s.parent is not None
            assert format(s.parent.span_id, "016x") == root_span_id(run_id)


def test_a_run_started_from_python_with_a_traceparent_keeps_it(store: Any) -> None:
    run_id, _ = uw.Client(store).start(reminders, {"invoice": "INV-2"},
                                       trace_context=dict(CALLER))
    assert started(store, run_id).trace_context == CALLER
