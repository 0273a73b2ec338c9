"""``underway worker --metrics-port N --traces``: a real worker process serves the metrics
of the runs it drives over HTTP."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from test_worker import WorkerProcess, wait_until
from worker_app import jobs

from underway import Engine, connect


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_worker_serves_the_metrics_of_the_runs_it_drove(sqlite_url: str,
                                                          tmp_path: Path) -> None:
    connect(sqlite_url).close()
    store = connect(sqlite_url)
    engine = Engine(store, flows=[jobs])
    port = free_port()
    worker = WorkerProcess(sqlite_url, "--metrics-port", str(port), "--traces")
    try:
        worker.expect("ready")
        ids = [engine.start(jobs, {"n": i})[0] for i in range(3)]
        wait_until(lambda: all(engine.state(r).status == "completed" for r in ids),
                   "the runs to complete")
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
        summary = worker.stop()
    finally:
        worker.close()
        store.close()
    assert "3 activations" in summary
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for f in text_string_to_metric_families(text) for s in f.samples}
    for step in ("begin", "middle", "end"):
        assert found[("underway_steps_total", (("flow", "job"), ("step", step)))] == 3
    assert found[("underway_tool_calls_total",
                  (("outcome", "succeeded"), ("tool", "compute")))] == 6
    assert found[("underway_runs_ended_total", (("flow", "job"), ("status", "completed")))] == 3
    assert found[("underway_activations_total", (("flow", "job"),))] == 3
