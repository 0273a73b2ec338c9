"""underway: a durable runtime for long-running AI agents.

Write a :class:`Flow` of async steps over a typed state, perform effects through
``ctx.call``, and run it with an :class:`Engine` (the executor, driven by a :class:`Worker`
or :class:`Runner`) on SQLite, PostgreSQL or memory; or give an :class:`Agent` a goal, a
model and typed tools. Start, signal, cancel, resolve, decide and read runs from anywhere
with a :class:`Client` (``Client(store)`` or ``Client.connect(url)``), which needs no flow
code; :func:`connect` opens a :class:`Store` from a URL. A step may start child runs of
other flows (``ctx.start``) and wait for their :class:`ChildOutcome` (``ctx.wait_for``).
Every call passes the guard: allow-list, schema, :class:`Policy`, signed approvals and
:class:`Budget` limits. Subpackages:
``underway.models`` (model adapters), ``underway.sandbox`` (isolated shell and code tools),
``underway.knowledge`` (long-term memory), ``underway.approvals`` (keys and decisions). The
journal is the truth: kill the process at any moment and a fresh one continues the run
where it stood, without repeating a completed step or effect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _moved
from ._lazy import lazy_exports
from .clock import ManualClock, SystemClock
from .effects import CallInfo, Model, ModelReply, Reconciled, Tool, tool
from .errors import (
    ConfigurationError,
    ConflictError,
    FencedError,
    IntegrityError,
    KeyUnavailable,
    NonDeterminismError,
    OutcomeUnknown,
    ResultInvalid,
    RunNotFound,
    ServiceError,
    StoreError,
    ToolCallError,
    UnderwayError,
)
from .flow import ChildOutcome, Flow, Next, RunContext
from .retry import CircuitBreaker, RetryPolicy
from .secrets import CallbackSecrets, EnvSecrets, FileSecrets

# What a flow is written with loads with the package; what runs, reads or stores runs
# (the client, the executor, the stores, the worker, the agent, policies, budgets) loads
# the first time its name is read, which keeps `import underway` quick for short-lived
# processes (PEP 562).
if TYPE_CHECKING:
    from .agent import Agent
    from .client import Client, StartOptions
    from .engine import Engine
    from .guard.budgets import Budget
    from .guard.policy import Policy, load_policy
    from .journal.state import RunState
    from .runner import Runner, run
    from .store import Store, connect
    from .worker import Worker
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "Agent": ".agent", "Budget": ".guard.budgets", "Client": ".client",
        "Engine": ".engine", "Policy": ".guard.policy", "load_policy": ".guard.policy",
        "Runner": ".runner", "run": ".runner", "RunState": ".journal.state",
        "StartOptions": ".client", "Store": ".store", "connect": ".store",
        "Worker": ".worker",
    }, globals())

_moved.install()

__all__ = [
    "Agent",
    "Budget",
    "CallInfo",
    "CallbackSecrets",
    "ChildOutcome",
    "CircuitBreaker",
    "Client",
    "ConfigurationError",
    "ConflictError",
    "Engine",
    "EnvSecrets",
    "FencedError",
    "FileSecrets",
    "Flow",
    "IntegrityError",
    "KeyUnavailable",
    "ManualClock",
    "Model",
    "ModelReply",
    "Next",
    "NonDeterminismError",
    "OutcomeUnknown",
    "Policy",
    "Reconciled",
    "ResultInvalid",
    "RetryPolicy",
    "RunContext",
    "RunNotFound",
    "RunState",
    "Runner",
    "ServiceError",
    "StartOptions",
    "Store",
    "StoreError",
    "SystemClock",
    "Tool",
    "ToolCallError",
    "UnderwayError",
    "Worker",
    "connect",
    "load_policy",
    "run",
    "tool",
]
