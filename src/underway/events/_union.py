"""Every event type as one union, and the stored envelope: encoding an event, upcasting
old versions, decoding it back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeAlias, cast, get_args

from pydantic import Field

from ..errors import IntegrityError
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
from ._base import JSON, Event
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
from ._lean import full, lean
from ._purged import PayloadPurged
from ._run import (
    CheckpointRefused,
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

RunEvent: TypeAlias = (
    RunStarted
    | InputChecked
    | StepStarted
    | StepCompleted
    | ToolStarted
    | ToolSucceeded
    | ToolFailed
    | ToolTimedOut
    | ToolOutcomeUnknown
    | ToolReconciled
    | SchemaValidationFailed
    | ModelResponded
    | ValueRecorded
    | VersionMarked
    | TimerSet
    | TimerFired
    | SignalAwaited
    | SignalReceived
    | SignalIgnored
    | Escalated
    | EscalationResolved
    | RetryScheduled
    | RunDeadLettered
    | RunResumed
    | RunCompleted
    | RunFailed
    | RunCancelled
    | RunForked
    | RunLabeled
    | ChildStarted
    | ChildAwaited
    | ChildFinished
    | ToolRefused
    | PolicyDecided
    | ApprovalRequested
    | ApprovalGranted
    | ApprovalRejected
    | ApprovalInvalid
    | ApprovalExpired
    | EscalationAnswered
    | EscalationExpired
    | BudgetExceeded
    | ToolShadowed
    | PlanCreated
    | PlanRevised
    | ToolSelected
    | CheckpointRefused
    | PayloadPurged
)
"""Every event type the journal can hold, listed once. :data:`EVENT_TYPES` is built from
it. The package's ``__all__`` names the same types; a test keeps them equal. A ``match``
over it ends with ``assert_never``."""

AnyEvent = Annotated[RunEvent, Field(discriminator="type")]
"""Every event type the journal can hold, discriminated by ``type``."""

EVENT_TYPES: dict[str, type[Event]] = {
    cls.model_fields["type"].default: cls for cls in get_args(RunEvent)
}
"""Each event type by its name, built from :data:`RunEvent`."""

_NAMES: dict[type[Event], str] = {cls: name for name, cls in EVENT_TYPES.items()}
"""Each event type's name (asking the model for its field's default costs more)."""


Upcaster = Callable[[dict[str, JSON]], dict[str, JSON]]
_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register a function turning ``event_type`` data of ``from_version`` into the next one."""

    def register(fn: Upcaster) -> Upcaster:
        _UPCASTERS[(event_type, from_version)] = fn
        return fn

    return register


def envelope(event: Event, *, seq: int, at: float, run_id: str | None = None
             ) -> dict[str, JSON]:
    """The dict that is canonically encoded and stored for ``event``.

    Its data is in the lean form of :mod:`underway.events._lean`. ``v`` is left out at 1.

    Args:
        event: The event.
        seq: Its seq.
        at: When it happened.
        run_id: The run whose journal holds it; its call keys are stored without it. None
            keeps them whole.
    """
    event_type, env = stored_envelope(event, at=at, run_id=run_id)
    env["seq"], env["type"] = seq, event_type
    return env


def stored_envelope(event: Event, *, at: float, run_id: str | None
                    ) -> tuple[str, dict[str, JSON]]:
    """``event``'s type, and its :func:`envelope` without the seq and type (the stored
    form: its row holds those two)."""
    # model_dump(mode="json", exclude_defaults=True), without its Python wrapper.
    data = lean(event.__pydantic_serializer__.to_python(
        event, mode="json", exclude_defaults=True), run_id)
    data.pop("type", None)
    cls = type(event)
    env: dict[str, JSON] = {"at": at, "data": data}
    if event.VERSION != 1:
        env["v"] = event.VERSION
    return _NAMES.get(cls) or cls.model_fields["type"].default, env


def from_envelope(env: dict[str, JSON], run_id: str | None = None) -> RunEvent:
    """Rebuild an event of run ``run_id`` from its stored envelope, upcasting old versions
    first (an event whose call key was stored without its run id needs ``run_id``)."""
    event_type = env.get("type")
    cls = EVENT_TYPES.get(event_type) if isinstance(event_type, str) else None
    if cls is None:
        raise IntegrityError(f"unknown event type {event_type!r} at seq {env.get('seq')}")
    version = int(env.get("v", 1))
    data: dict[str, JSON] = full(dict(env["data"]), run_id)
    while version < cls.VERSION:
        step = _UPCASTERS.get((cls.__name__, version))
        if step is None:
            raise IntegrityError(
                f"no upcaster for {cls.__name__} v{version} -> v{version + 1}; "
                "register one with @underway.events.upcaster"
            )
        data = step(data)
        version += 1
    if version > cls.VERSION:
        raise IntegrityError(
            f"{cls.__name__} v{version} is newer than this code (v{cls.VERSION}); upgrade underway"
        )
    data["type"] = cls.__name__
    # The type is known: its own validator, built with the class, checks the data. A
    # validator of the whole union would be built on first use, costing a fresh
    # process's first load (a takeover) several milliseconds for the same answer.
    return cast(RunEvent, cls.model_validate(data))
