"""The executor: activates leased runs and executes their steps.

Modules, each named for what it holds: ``_executor`` (:class:`Engine`: claiming, the
activation loop, leaving the worker), ``_options`` (:class:`EngineOptions` and the
keywords that build it), ``_services`` (``StepServices``: what a step's execution uses of
the engine), ``_activation`` (a leased run's buffered events and its fenced commit),
``_group`` (:class:`GroupCommit`: concurrent activations' commits written together),
``_calls`` (step execution and the call path: the one door every tool call passes),
``_finish`` (a step's end and a run's finish), ``_inbox`` (control signals and signed
decisions read at a step boundary), ``_notices`` (telling people a run waits for them),
``_children`` (child runs), ``_eager`` (eager start: runs leased to the worker serving the
engine in their start's transaction), ``_versions`` (``ctx.version`` patch markers),
``_registry`` (flows and tools by name), ``_operator`` (the operator actions an engine
takes from its client) and ``_stops`` (how a step stops short).
Operator actions live in :mod:`underway.client`; an engine's own ``start``, ``signal``...
are its client's. Step execution never holds the engine: it holds a ``StepServices``.
"""

from __future__ import annotations

from ..control import CANCEL, RESOLVE, RESUME
from ..guard import GuardOptions
from ..journal.projection import question_expiry
from ._calls import StepExecution
from ._children import StepWithChildren, child_run_id
from ._eager import EagerStart
from ._executor import IDLE_CLAIM_BACKOFF, Engine
from ._group import GROUP_LIMIT, GroupCommit
from ._options import EngineOptions
from ._registry import Registry

__all__ = [
    "CANCEL",
    "GROUP_LIMIT",
    "IDLE_CLAIM_BACKOFF",
    "RESOLVE",
    "RESUME",
    "EagerStart",
    "Engine",
    "EngineOptions",
    "GroupCommit",
    "GuardOptions",
    "Registry",
    "StepExecution",
    "StepWithChildren",
    "child_run_id",
    "question_expiry",
]
