"""What a step's execution uses of its executor, as one frozen record.

The engine builds a :class:`StepServices` once and hands it to every activation.
Executing a step reaches the store, the journal, the clock, the guard and the flows
through it. It never holds the engine, so nothing below the engine imports it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..store._offload import run_io

if TYPE_CHECKING:
    from ..clock import Clock
    from ..flow import Flow
    from ..guard import Guard
    from ..journal import Journal
    from ..redaction import Redactor
    from ..store.base import NewRun, RunRecord
    from ..store.features import EngineStore
    from ..telemetry import Metrics
    from ._group import GroupCommit
    from ._registry import Registry

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepServices:
    """The executor's services a step's execution uses, built once by the engine.

    The guard, the registry and the redactor are the engine's own objects, so a policy
    set on the guard or a flow registered later is seen. The settings are copies: the
    engine builds a new record when one of them changes.
    """

    store: EngineStore
    """Where runs, their journals and the guard's ledgers are."""
    journal: Journal
    """Encodes and reads the events the store holds."""
    clock: Clock
    """The engine's time."""
    guard: Guard
    """Allow-list, budgets, policy, approvals and shadow mode."""
    registry: Registry
    """The flows and tools the engine runs, by name."""
    redactor: Redactor
    """Learns the values hidden fields held, to keep them out of logs and notices."""
    committer: GroupCommit | None
    """Where commits are written together (None: each on its own)."""
    create_run: Callable[[NewRun], tuple[str, bool, RunRecord]]
    """Creates a run, eagerly to the worker serving the engine when it has a free slot:
    its id, whether this call created it, and its row."""
    metrics: Metrics
    """Where steps, calls and commits are reported."""
    checkpoint_every: int
    """Write a checkpoint at least every this many events."""
    retry_budget: int | None
    """Retries one run may spend (None: no limit)."""
    notify_timeout: float
    """Seconds the notifier may take."""

    async def io(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)``, a call that reaches the store, run on its I/O threads."""
        return await run_io(self.store, fn, *args)

    def flow(self, name: str) -> Flow[Any, Any]:
        """The registered flow named ``name``."""
        return self.registry.flow(name)
