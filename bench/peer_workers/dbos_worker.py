"""DBOS Transact, the way its documentation writes a durable workflow: ``@DBOS.workflow``
calling ``@DBOS.step`` functions, on its system database (SQLite file or PostgreSQL).

Runs in the peers' virtual environment; see ``protocol.py`` for the modes. A killed
workflow is recovered the documented way: a fresh process's ``DBOS.launch()`` finds the
workflows its executor left pending and runs them again from their recorded steps.
"""

from __future__ import annotations

import uuid
from importlib.metadata import version
from typing import Any

import protocol
from dbos import DBOS, DBOSConfig, SetWorkflowID
from protocol import CLOCK, step_result


@DBOS.step()
def step(run_id: str, i: int) -> dict[str, Any]:
    """One durable step: its ~200-byte result is recorded before the workflow goes on."""
    CLOCK.enter(i)
    return step_result(run_id, i)


@DBOS.workflow()
def loop(run_id: str, steps: int) -> int:
    """A workflow of ``steps`` steps, one after another."""
    for i in range(steps):
        step(run_id, i)
    return steps


class DBOSPeer:
    """DBOS on one system database."""

    def __init__(self, db: str, url: str) -> None:
        sys_url = f"sqlite:///{url}" if db == "sqlite" else url.replace(
            "postgresql://", "postgresql+psycopg://", 1)
        config: DBOSConfig = {"name": "peers-bench", "system_database_url": sys_url,
                              "log_level": "WARNING"}
        DBOS(config=config)
        DBOS.launch()

    def sequential(self, runs: int, steps: int) -> None:
        for _ in range(runs):
            run_id = f"seq-{uuid.uuid4().hex}"
            with SetWorkflowID(run_id):
                if loop(run_id, steps) != steps:
                    raise RuntimeError(f"workflow {run_id} did not run {steps} steps")

    def in_flight(self, runs: int, steps: int) -> None:
        handles = []
        for _ in range(runs):
            run_id = f"fly-{uuid.uuid4().hex}"
            with SetWorkflowID(run_id):
                handles.append(DBOS.start_workflow(loop, run_id, steps))
        for h in handles:
            if h.get_result() != steps:
                raise RuntimeError(f"workflow {h.get_workflow_id()} did not run {steps} steps")

    def crash(self, run_id: str, steps: int) -> None:
        with SetWorkflowID(run_id):
            loop(run_id, steps)

    def resume(self, run_id: str, steps: int) -> Any:
        # launch() has already started recovering the pending workflow in the background.
        return DBOS.retrieve_workflow(run_id).get_result()

    def close(self) -> None:
        DBOS.destroy()


if __name__ == "__main__":
    protocol.main(DBOSPeer, f"dbos {version('dbos')}")
