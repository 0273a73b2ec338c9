"""LangGraph, the way its persistence documentation makes a graph durable: a
``StateGraph`` compiled with a checkpointer (``SqliteSaver`` / ``PostgresSaver``, and their
async twins for runs in flight) and invoked with ``durability="sync"``, so each step's
checkpoint is written before the next step starts.

A run is a thread; a step is one super-step of a node that loops to itself, returning the
~200-byte result into the state (one field, replaced each step, so checkpoints do not grow
with the run). A killed run is resumed the documented way: a fresh process invokes the graph
with ``None`` as input on the same thread, which continues from the last checkpoint.
Runs in the peers' virtual environment; see ``protocol.py`` for the modes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from importlib.metadata import version
from typing import Any, TypedDict

import protocol
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from protocol import CLOCK, step_result
from psycopg import Connection
from psycopg.rows import dict_row


class LoopState(TypedDict):
    """The run's state: which run, how far, how far to go, the last step's result."""

    run: str
    i: int
    n: int
    last: dict[str, Any]


def step(state: LoopState) -> dict[str, Any]:
    """One step: its result replaces the last one in the state."""
    i = state["i"]
    CLOCK.enter(i)
    return {"i": i + 1, "last": step_result(state["run"], i)}


def route(state: LoopState) -> str:
    """Loop until ``n`` steps have run."""
    return "step" if state["i"] < state["n"] else END


def build() -> StateGraph[LoopState]:
    """The graph: ``step`` and back, until done."""
    graph = StateGraph(LoopState)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", route, ["step", END])
    return graph


def config(run_id: str, steps: int) -> dict[str, Any]:
    """The run's thread, and room for its steps under the recursion limit."""
    return {"configurable": {"thread_id": run_id}, "recursion_limit": steps + 10}


class LangGraphPeer:
    """LangGraph on one database."""

    def __init__(self, db: str, url: str) -> None:
        self.db, self.url = db, url
        if db == "sqlite":
            self.saver: Any = SqliteSaver(sqlite3.connect(url, check_same_thread=False))
        else:
            conn = Connection.connect(url, autocommit=True, prepare_threshold=0,
                                      row_factory=dict_row)
            self.saver = PostgresSaver(conn)
        self.saver.setup()
        self.graph = build().compile(checkpointer=self.saver)

    def _run(self, run_id: str, steps: int) -> None:
        out = self.graph.invoke({"run": run_id, "i": 0, "n": steps}, config(run_id, steps),
                                durability="sync")
        if out["i"] != steps:
            raise RuntimeError(f"thread {run_id} ran {out['i']} steps, not {steps}")

    def sequential(self, runs: int, steps: int) -> None:
        for _ in range(runs):
            self._run(f"seq-{uuid.uuid4().hex}", steps)

    def in_flight(self, runs: int, steps: int) -> None:
        asyncio.run(self._in_flight(runs, steps))

    async def _in_flight(self, runs: int, steps: int) -> None:
        saver_cm: Any = (AsyncSqliteSaver.from_conn_string(self.url) if self.db == "sqlite"
                         else AsyncPostgresSaver.from_conn_string(self.url))
        async with saver_cm as saver:
            graph = build().compile(checkpointer=saver)
            ids = [f"fly-{uuid.uuid4().hex}" for _ in range(runs)]
            outs = await asyncio.gather(*(
                graph.ainvoke({"run": r, "i": 0, "n": steps}, config(r, steps),
                              durability="sync") for r in ids))
        if any(o["i"] != steps for o in outs):
            raise RuntimeError(f"a thread in flight did not run {steps} steps")

    def crash(self, run_id: str, steps: int) -> None:
        self._run(run_id, steps)

    def resume(self, run_id: str, steps: int) -> Any:
        out = self.graph.invoke(None, config(run_id, steps), durability="sync")
        return out["i"]

    def close(self) -> None:
        conn = self.saver.conn
        conn.close()


if __name__ == "__main__":
    protocol.main(LangGraphPeer, f"langgraph {version('langgraph')}, "
                  f"langgraph-checkpoint-sqlite {version('langgraph-checkpoint-sqlite')}, "
                  f"langgraph-checkpoint-postgres {version('langgraph-checkpoint-postgres')}")
