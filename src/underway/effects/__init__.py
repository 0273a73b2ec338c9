"""Tools, model calls and the write-ahead effect ledger's vocabulary.

A :class:`Tool` wraps an async (or sync) function. A *mutating* tool gets an intent
(``ToolStarted``) committed before it runs and its outcome after; on recovery an intent
without an outcome is an *unknown outcome*, handled by :func:`resolution_for`: an
idempotent tool is retried with the same idempotency key, a tool with a ``reconcile`` hook
is asked what happened, any other tool escalates to a person. Read-only tools skip the
intent. The idempotency key is ``{run_id}:{ordinal}:{step}:{index}``: the same on every
attempt, and new each time a loop visits the step again.
"""


from ._declare import ToolDecorator, ToolOptions, tool, tool_options
from ._ledger import (
    COMPENSATE_SUFFIX,
    FENCE_STRIDE,
    CallInfo,
    Reconciled,
    ReconcileFn,
    ToolFn,
    args_hash,
    fence_of,
    idempotency_key,
)
from ._model import Emit, Model, ModelQuote, ModelReply, StreamingModel
from ._tool import NoArgs, Tool

__all__ = [
    "COMPENSATE_SUFFIX",
    "FENCE_STRIDE",
    "CallInfo",
    "Emit",
    "Model",
    "ModelQuote",
    "ModelReply",
    "NoArgs",
    "ReconcileFn",
    "Reconciled",
    "StreamingModel",
    "Tool",
    "ToolDecorator",
    "ToolFn",
    "ToolOptions",
    "args_hash",
    "fence_of",
    "idempotency_key",
    "tool",
    "tool_options",
]
