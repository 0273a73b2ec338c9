"""Typed journal events, their canonical encoding, upcasters and the hash chain.

An event is a frozen pydantic model with a stable ``type`` name and a schema version
(``VERSION``). On disk an event is the canonical JSON of its *envelope*::

    {"at": <epoch seconds>, "data": {...}}

(``"v": n`` too for a version other than 1) — its seq and type live in its row, and its
data is in the lean form of ``_lean`` — and each stored event carries
``hash = sha256(prev_hash || "<seq>,<len(type)>:<type>," || stored bytes)``
(:func:`event_hash`). Events stored before named their seq, type and version in the
envelope and chain by ``sha256(prev_hash || stored bytes)`` (:func:`chain_hash`); they read
and verify as they always did (:func:`link_hash`, :func:`placed`). The first event of a run
chains from :func:`genesis_hash`, which binds the chain to its tenant and run, so an event
spliced in from another run or tenant breaks verification.

The events live in private modules by family (``_run``, ``_steps``, ``_calls``,
``_approvals``, ``_signals``), the union and the envelope in ``_union``, canonical JSON and
the chain in ``_chain``, what a retention purge leaves of an event in ``_purged`` (the
skeleton; :class:`PayloadPurged`, what readers meet in its place) and ``_tombstone`` (the
stored bytes that keep its place in the chain); this module is where they are imported
from.
"""

from __future__ import annotations

from ._approvals import (
    ApprovalExpired,
    ApprovalGranted,
    ApprovalInvalid,
    ApprovalRejected,
    ApprovalRequested,
    Escalated,
    EscalationAnswered,
    EscalationExpired,
    EscalationResolved,
)
from ._base import JSON, Encrypted, Event
from ._calls import (
    BudgetExceeded,
    ModelResponded,
    PolicyDecided,
    RetryScheduled,
    SchemaValidationFailed,
    ToolFailed,
    ToolOutcomeUnknown,
    ToolReconciled,
    ToolRefused,
    ToolShadowed,
    ToolStarted,
    ToolSucceeded,
    ToolTimedOut,
)
from ._chain import (
    canonical_json,
    chain_hash,
    event_hash,
    genesis_hash,
    link_hash,
    placed,
)
from ._lean import full as full_data
from ._purged import PURGED, SKELETON, PayloadPurged, skeleton
from ._run import (
    CheckpointRefused,
    ForkOrigin,
    InputChecked,
    RunCancelled,
    RunCompleted,
    RunDeadLettered,
    RunFailed,
    RunForked,
    RunLabeled,
    RunResumed,
    RunStarted,
)
from ._signals import (
    ChildAwaited,
    ChildFinished,
    ChildStarted,
    SignalAwaited,
    SignalIgnored,
    SignalReceived,
)
from ._steps import (
    PlanCreated,
    PlanRevised,
    StepCompleted,
    StepStarted,
    TimerFired,
    TimerSet,
    ToolSelected,
    ValueRecorded,
    VersionMarked,
)
from ._tombstone import Tombstone, is_tombstone, read_tombstone
from ._union import (
    EVENT_TYPES,
    AnyEvent,
    Upcaster,
    envelope,
    from_envelope,
    upcaster,
)
from ._union import (
    RunEvent as RunEvent,  # the union of the event types (not in __all__, as before)
)

# Type checkers read only a literal __all__, so the event types are named here again, as
# in RunEvent (_union); tests/unit/test_events.py keeps the two the same.
__all__ = [
    "EVENT_TYPES",
    "JSON",
    "PURGED",
    "SKELETON",
    "AnyEvent",
    "ApprovalExpired",
    "ApprovalGranted",
    "ApprovalInvalid",
    "ApprovalRejected",
    "ApprovalRequested",
    "BudgetExceeded",
    "CheckpointRefused",
    "ChildAwaited",
    "ChildFinished",
    "ChildStarted",
    "Encrypted",
    "Escalated",
    "EscalationAnswered",
    "EscalationExpired",
    "EscalationResolved",
    "Event",
    "ForkOrigin",
    "InputChecked",
    "ModelResponded",
    "PayloadPurged",
    "PlanCreated",
    "PlanRevised",
    "PolicyDecided",
    "RetryScheduled",
    "RunCancelled",
    "RunCompleted",
    "RunDeadLettered",
    "RunFailed",
    "RunForked",
    "RunLabeled",
    "RunResumed",
    "RunStarted",
    "SchemaValidationFailed",
    "SignalAwaited",
    "SignalIgnored",
    "SignalReceived",
    "StepCompleted",
    "StepStarted",
    "TimerFired",
    "TimerSet",
    "Tombstone",
    "ToolFailed",
    "ToolOutcomeUnknown",
    "ToolReconciled",
    "ToolRefused",
    "ToolSelected",
    "ToolShadowed",
    "ToolStarted",
    "ToolSucceeded",
    "ToolTimedOut",
    "Upcaster",
    "ValueRecorded",
    "VersionMarked",
    "canonical_json",
    "chain_hash",
    "envelope",
    "event_hash",
    "from_envelope",
    "full_data",
    "genesis_hash",
    "is_tombstone",
    "link_hash",
    "placed",
    "read_tombstone",
    "skeleton",
    "upcaster",
]
