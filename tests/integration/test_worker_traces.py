"""``underway worker --traces`` as run in production, on SQLite and PostgreSQL: a real
worker process sends the spans of a run it finished to a real OTLP/HTTP receiver (named by
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, the exporter being OTLP when none is configured),
one trace with the run's root span and its steps and calls, and sends the last ones when
it stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.otlp_receiver import OtlpReceiver
from underway import Client, connect
from underway.lineage import root_span_id

HERE = Path(__file__).resolve().parent
UNDERWAY = Path(sys.executable).with_name("underway")
PATIENCE_S = 120.0
"""Against a hang only."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def test_a_worker_with_traces_sends_each_run_as_one_trace(url: str) -> None:
    store = connect(url)
    try:
        run_id, _ = Client(store).start("job", {"n": 21})
    finally:
        store.close()
    with OtlpReceiver() as receiver:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url}
        proc = subprocess.Popen(
            [str(UNDERWAY), "worker", "--db", url, "--app", "worker_app:app", "--traces"],
            cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # The run's span is sent once it ended: the worker finished it.
            deadline = time.monotonic() + PATIENCE_S
            while not any(s["name"] == "underway.run job" for s in receiver.spans):
                assert proc.poll() is None, proc.communicate()[1][-4000:]
                assert time.monotonic() < deadline, "the run's span never came"
                receiver.wait_for(len(receiver.spans) + 1, timeout=1.0)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=PATIENCE_S)
            assert proc.returncode == 0, err[-4000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        spans = list(receiver.spans)

    (root,) = [s for s in spans if s["name"] == "underway.run job"]
    assert root["span_id"] == root_span_id(run_id) and root["parent_id"] is None
    assert {s["trace_id"] for s in spans} == {root["trace_id"]}
    assert {s["service"] for s in spans} == {"underway"}
    steps = [s for s in spans if s["name"].startswith("underway.step ")]
    assert steps and all(s["parent_id"] == root["span_id"] for s in steps)
    tools = [s for s in spans if s["name"] == "execute_tool compute"]
    assert tools and all(s["parent_id"] in {x["span_id"] for x in steps} for s in tools)
    assert len({s["span_id"] for s in spans}) == len(spans)
