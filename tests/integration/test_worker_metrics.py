"""``underway worker --metrics-port N --traces``: a real worker process serves the metrics
of the runs it drives over HTTP."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest
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


def test_a_worker_asks_scrapes_for_its_token(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    connect(sqlite_url).close()
    port = free_port()
    config = tmp_path / "underway.toml"
    config.write_text(
        f'[telemetry]\nmetrics_port = {port}\nmetrics_addr = "127.0.0.1"\n'
        'metrics_token_env = "UW_TEST_METRICS_TOKEN"\n', encoding="utf-8")
    monkeypatch.setenv("UW_TEST_METRICS_TOKEN", "s3cret-token")
    worker = WorkerProcess(sqlite_url, "--config", str(config))
    try:
        worker.expect("ready")
        url = f"http://127.0.0.1:{port}/metrics"
        refused = [httpx.get(url, timeout=30, headers=h) for h in (
            {}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"})]
        allowed = httpx.get(url, timeout=30, headers={"Authorization": "Bearer s3cret-token"})
        worker.stop()
    finally:
        worker.close()
    assert [r.status_code for r in refused] == [401, 401, 401]
    assert all("s3cret" not in r.text and "underway_" not in r.text for r in refused)
    assert allowed.status_code == 200 and "underway_steps_total" in allowed.text


def test_a_worker_whose_metrics_token_is_missing_says_which_variable(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "underway.toml"
    config.write_text('[telemetry]\nmetrics_port = 0\n'
                      'metrics_token_env = "UW_TEST_METRICS_TOKEN"\n', encoding="utf-8")
    monkeypatch.delenv("UW_TEST_METRICS_TOKEN", raising=False)
    worker = WorkerProcess(sqlite_url, "--config", str(config))
    try:
        code = worker.proc.wait(timeout=120)
    finally:
        worker.close()
    assert code != 0
    assert "UW_TEST_METRICS_TOKEN" in worker.stderr()
