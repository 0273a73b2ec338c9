"""underway: a durable runtime for long-running AI agents.

Write a :class:`Flow` of async steps over a typed state, perform effects through
``ctx.call``, and run it with an :class:`Engine` on SQLite, PostgreSQL or memory. The
journal is the truth: kill the process at any moment and a fresh one continues the run
where it stood, without repeating a completed step or effect.
"""

from __future__ import annotations

from .clock import ManualClock, SystemClock
from .effects import CallInfo, Model, ModelReply, Reconciled, Tool, tool
from .engine import Engine
from .errors import (
    ConfigurationError,
    ConflictError,
    FencedError,
    IntegrityError,
    NonDeterminismError,
    RunNotFound,
    StoreError,
    ToolCallError,
    UnderwayError,
)
from .flow import Flow, RunContext
from .runner import Runner, run
from .state import RunState
from .store import Store, connect

__all__ = [
    "CallInfo",
    "ConfigurationError",
    "ConflictError",
    "Engine",
    "FencedError",
    "Flow",
    "IntegrityError",
    "ManualClock",
    "Model",
    "ModelReply",
    "NonDeterminismError",
    "Reconciled",
    "RunContext",
    "RunNotFound",
    "RunState",
    "Runner",
    "Store",
    "StoreError",
    "SystemClock",
    "Tool",
    "ToolCallError",
    "UnderwayError",
    "connect",
    "run",
    "tool",
]
