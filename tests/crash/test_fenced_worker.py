"""A worker that stalls past its lease and wakes after another worker took its run over
is fenced: its commit is refused, it logs one clear line saying so, and nothing else.
psycopg once logged ``error ignored terminating <psycopg.Pipeline>`` at every refusal:
a slow client received the refusal inside the pipeline, and closing it failed again.
Tried on a real PostgreSQL, with real worker processes paused by SIGSTOP (the store alone:
tests/conformance/test_postgres_pipelines.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from underway import Client, connect

pytestmark = [pytest.mark.postgres, pytest.mark.crash]

UNDERWAY = Path(sys.executable).with_name("underway")
PATIENCE_S = 120.0
"""A guard against hangs, never reached when things work, even on a busy machine."""
NOISE = "error ignored terminating"


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {PATIENCE_S:g}s waiting for {what}")
        time.sleep(0.02)


APP = textwrap.dedent('''
    import os, time
    from pathlib import Path
    from pydantic import BaseModel
    from underway import Flow, RunContext, tool

    HERE = Path(os.environ["FENCE_DIR"])

    @tool(mutating=False)
    def count_stock(args):
        (HERE / f"counting-{os.getpid()}").touch()
        while not (HERE / "go").exists():
            time.sleep(0.02)
        return {"on_hand": 3}

    class Notes(BaseModel):
        on_hand: int = 0

    replenish = Flow("replenish", state=Notes)

    @replenish.step(start=True)
    async def count(ctx: RunContext[Notes, None]):
        ctx.state.on_hand = (await ctx.call(count_stock, {}))["on_hand"]
        return ctx.done({"on_hand": ctx.state.on_hand})

    app = [replenish, count_stock]
''')


class Worker:
    """A real ``underway worker``; its log lines are collected as they come."""

    def __init__(self, url: str, folder: Path) -> None:
        self.proc = subprocess.Popen(
            [str(UNDERWAY), "worker", "--db", url, "--app", "fence_app:app", "--poll", "0.05",
             "--lease-ttl", "2"],
            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "FENCE_DIR": str(folder)})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> list[str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
        self.proc.wait(timeout=PATIENCE_S)
        self._reader.join(timeout=PATIENCE_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return self.lines


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "fence_app.py").write_text(APP)
    yield tmp_path


def test_a_fenced_worker_logs_one_clear_line(pg_url: str, folder: Path) -> None:
    store = connect(pg_url)
    workers: list[Worker] = []
    try:
        run_id, _ = Client(store).start("replenish", None)
        stalled = Worker(pg_url, folder)
        workers.append(stalled)
        mark = folder / f"counting-{stalled.proc.pid}"
        wait_until(mark.exists, "the first worker to run the step")
        stalled.proc.send_signal(signal.SIGSTOP)

        def lease_lapsed() -> bool:
            row = store.get_run("default", run_id)
            return row is not None and (row.lease_expires_at or 0) < time.time()

        wait_until(lease_lapsed, "the stalled worker's lease to lapse")
        taker = Worker(pg_url, folder)
        workers.append(taker)
        wait_until((folder / f"counting-{taker.proc.pid}").exists,
                   "the second worker to take the run over")
        (folder / "go").touch()

        def completed() -> bool:
            row = store.get_run("default", run_id)
            return row is not None and row.status == "completed"

        wait_until(completed, "the second worker to complete the run")
        stalled.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: any("gave up run" in line for line in stalled.lines),
                   "the stalled worker to find it was fenced")
    finally:
        logs = [w.stop() for w in workers]
        store.close()
    fenced, taker_log = logs
    assert [line for line in fenced if NOISE in line] == [], fenced
    gave_up = [line for line in fenced if "gave up run" in line]
    assert len(gave_up) == 1 and run_id in gave_up[0], fenced
    assert "another worker owns this run" in gave_up[0] or "lease" in gave_up[0]
    assert not any(NOISE in line for line in taker_log)
