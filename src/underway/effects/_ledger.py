"""The effect ledger's vocabulary: idempotency keys, fences, what a tool call is told and
what a reconcile hook finds."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..egress import Egress
from ..events import JSON, canonical_json

COMPENSATE_SUFFIX = ".compensate"
"""Added to a tool's name to name the tool that undoes it (:meth:`Tool.compensation`)."""


def idempotency_key(run_id: str, step: str, index: int, *, ordinal: int) -> str:
    """The deterministic key of call ``index`` in ``step`` of ``run_id``.

    A step that a ``goto`` loop visits again gets fresh keys. A re-run after a crash gets
    the same.

    Args:
        run_id: The run.
        step: The step.
        index: The call's index within the step.
        ordinal: How many steps the run completed before this one.
    """
    return f"{run_id}:{ordinal}:{step}:{index}"


def args_hash(tool: str, args: JSON) -> str:
    """SHA-256 of the tool name and its canonical arguments."""
    return hashlib.sha256(tool.encode() + b"\x00" + canonical_json(args)).hexdigest()


@dataclass(frozen=True, slots=True)
class CallInfo:
    """Handed to a tool that accepts a second parameter: who is calling, with which key."""

    key: str
    tenant_id: str
    run_id: str
    step: str
    index: int
    fence: int = 0
    """The run's fence (:func:`fence_of`: the caller's lease token, then the run's journal
    position). It only grows per run; an outside system that remembers the highest
    fence it saw per run and refuses lower ones stops a worker that lost its lease
    (paused, partitioned) from acting after its successor, and a request whose call timed
    out from arriving after the reconcile query that found it had not."""
    principal: str | None = None
    """Who the run acts for."""
    roles: tuple[str, ...] = ()
    """The principal's roles."""
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The secrets the tool declared, fetched from the engine's secret provider for this
    call only; never journaled, logged or traced (``repr`` hides them)."""
    egress: Egress | None = field(default=None, repr=False, compare=False)
    """The hosts this call may reach, when its tool declares them (:mod:`underway.egress`):
    :func:`underway.http.request` refuses any other, and the engine journals the refusal."""


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What a ``reconcile(key)`` hook found out about an effect of unknown outcome.

    ``happened``: the effect took place, ``result`` is its result. ``not_happened``: it
    never took place and is safe to run. ``unknown``: nobody can tell; escalate.
    """

    outcome: Literal["happened", "not_happened", "unknown"]
    result: JSON = None

    @classmethod
    def happened(cls, result: JSON = None) -> Reconciled:
        """The effect took place with this result."""
        return cls("happened", result)

    @classmethod
    def not_happened(cls) -> Reconciled:
        """The effect never took place."""
        return cls("not_happened")

    @classmethod
    def unknown(cls) -> Reconciled:
        """The outside system cannot tell."""
        return cls("unknown")


ToolFn = Callable[..., Awaitable[Any]] | Callable[..., Any]
ReconcileFn = Callable[[str], Awaitable[Reconciled]] | Callable[[str, "CallInfo"],
                                                              Awaitable[Reconciled]]
"""A reconcile hook: ``reconcile(key)``, or ``reconcile(key, info)`` to receive the
:class:`CallInfo` of the query, whose ``fence`` a fence-checking outside system should be
sent (see :func:`fence_of`)."""

FENCE_STRIDE = 1 << 32
"""How far apart the fences of two lease tokens are (see :func:`fence_of`)."""


def fence_of(lease_token: int, seq: int) -> int:
    """The fence of a run's calls: it grows with the lease token (a new holder of the
    run) and, within one lease, with the run's journal (``seq``: its last event,
    committed or about to be). A reconcile query is sent with the fence of ``seq + 1``,
    above the attempt in doubt and at most the fence of every call after it, so an
    outside system that remembers the highest fence per run refuses that attempt if it
    arrives after the query — also when the same worker made it under the same lease (a
    call that timed out while its request was still on its way)."""
    return lease_token * FENCE_STRIDE + min(seq, FENCE_STRIDE - 1)

