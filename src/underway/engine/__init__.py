"""The executor: activates leased runs and executes their steps.

Modules, each named for what it holds: ``_executor`` (:class:`Engine`: claiming, the
activation loop, finishing a step, leaving the worker), ``_activation`` (a leased run's
buffered events and its fenced commit), ``_group`` (:class:`GroupCommit`: concurrent
activations' commits written together), ``_calls`` (step execution and the call path: the
one door every tool call passes), ``_inbox`` (control signals and signed decisions read at
a step boundary), ``_children`` (child runs), ``_eager`` (eager start: runs leased to
the worker serving the engine in their start's transaction), ``_versions`` (``ctx.version`` patch
markers), ``_registry`` (flows and tools by name), ``_operator`` (the operator actions an engine
takes from its client) and ``_stops`` (how a step stops short).
Operator actions live in :mod:`underway.client`; an engine's own ``start``, ``signal``...
are its client's.
"""

from __future__ import annotations

from ..control import CANCEL, RESOLVE, RESUME
from ..journal.projection import question_expiry
from ._calls import StepExecution
from ._children import StepWithChildren, child_run_id
from ._eager import EagerStart
from ._executor import IDLE_CLAIM_BACKOFF, Engine
from ._group import GROUP_LIMIT, GroupCommit
from ._registry import Registry

__all__ = [
    "CANCEL",
    "GROUP_LIMIT",
    "IDLE_CLAIM_BACKOFF",
    "RESOLVE",
    "RESUME",
    "EagerStart",
    "Engine",
    "GroupCommit",
    "Registry",
    "StepExecution",
    "StepWithChildren",
    "child_run_id",
    "question_expiry",
]
