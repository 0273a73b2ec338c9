"""Intake: outside events (webhooks, messages, records) turned into runs and signals, once.

An :class:`IntakeEvent` is a normalized outside event: tenant, entity id, event type, when
it occurred, where it came from, the permissions it carries, an idempotency key and a JSON
payload; and, for data protection, the purpose it asks to be acted on for and the
reference of the consent it comes with. :func:`intake` routes it by type (:class:`Routes`):

- if a run that is not finished *owns* the event's entity, the event is delivered to that
  run as a signal (named by the route; the signal id is the idempotency key; the payload is
  the whole event), and the result is ``signalled``;
- otherwise a :class:`StartFlow` route starts a run of its flow, which becomes the entity's
  owner (``started``); a :class:`Signal` route has nobody to tell, and the event is
  ``ignored``;
- an event type without a route is ``ignored``, with the reason;
- an idempotency key already acted on is a ``duplicate``: nothing happens again, and the
  result names the run it started or signalled the first time.

Ownership ends when the owning run completes, fails or is cancelled; the next event for the
entity starts a new run.

**Crash safety.** The intake record (tenant, idempotency key, what it did), the entity's
owner and the effect — the new run with its first event, or the signal in the owner's
inbox — are written in one transaction. So there is no moment at which the key is recorded
but the run not started (or the signal not queued), nor the reverse:

- a crash before the commit leaves nothing; the sender's redelivery acts as if it were the
  first delivery;
- a crash after the commit, before the sender heard back, leaves the effect in place; the
  redelivery answers ``duplicate`` with the same run id;
- the started run itself is durable from its first event on; workers run it.

Events for one entity are serialized, so two different events can never both find the
entity unowned and start two runs. One case remains outside intake's reach: an event
signalled to an owner that then finishes without waiting for that signal stays unread in
the finished run's inbox; flows that own entities should keep waiting for their events
until they are done with the entity.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from .. import inputs
from ..client import Client
from ..codec import signal_where
from ..errors import ConfigurationError, FieldProblem, InvalidInput
from ..events import JSON, canonical_json
from ..flow import Flow
from ..labels import LabelValue, check_key, check_labels
from ..lineage import INTAKE_KEY_PREFIX, INTAKE_TAINT, Lineage
from ..store.base import CoreStore, IntakeRequest, NewRun
from ..store.features import scheduling
from ..subjects import DEFAULT_PURPOSE, check_purpose, check_reference, check_subject

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = [
    "IntakeError",
    "IntakeEvent",
    "IntakeResult",
    "Route",
    "Routes",
    "Signal",
    "StartFlow",
    "intake",
    "run_key",
]


class IntakeError(ConfigurationError):
    """An event or routing table that intake cannot use; the message says which part.

    Args:
        message: What is wrong, naming the part.
        errors: Each bad field, when the event's input does not fit its flow's model
            (as :attr:`~underway.errors.InvalidInput.errors`).
    """

    def __init__(self, message: str, *, errors: Sequence[FieldProblem] = ()) -> None:
        super().__init__(message)
        self.errors = tuple(errors)


class IntakeEvent(BaseModel):
    """A normalized outside event.

    ``occurred_at`` needs a time zone (an ISO 8601 time with an offset, an aware
    ``datetime``, or epoch seconds). ``permissions`` travel with the event to the run (in
    the signal payload, or in the input with ``input_from="event"``).

    Every event, from any source, is checked here with :mod:`underway.inputs` before
    anything is read or stored. Each id, name and permission is text a database can hold
    (no NUL, no lone surrogate, at most :data:`~underway.inputs.MAX_NAME` characters).
    The payload is JSON: finite numbers, such text in every string, keys of at most
    :data:`~underway.inputs.MAX_NAME` characters, at most
    :data:`~underway.inputs.MAX_DEPTH` levels deep. A refusal names the field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: str = Field(min_length=1)
    entity_id: str = Field(min_length=1)
    event_type: str = Field(min_length=1)
    occurred_at: AwareDatetime
    source: str = Field(min_length=1)
    permissions: tuple[str, ...] = ()
    idempotency_key: str = Field(min_length=1)
    payload: JSON = None
    purpose: str | None = None
    """What the event asks to be done for (a run it starts has this purpose; None: the
    route's)."""
    consent: str | None = None
    """The reference of the consent the event comes with (journaled with a run it starts)."""

    @field_validator("tenant_id", "entity_id", "event_type", "source", "idempotency_key",
                     "purpose", "consent")
    @classmethod
    def _storable(cls, value: str | None, info: ValidationInfo) -> str | None:
        # InvalidInput is no ValueError: it leaves pydantic as raised, naming the field.
        if value is None:
            return None
        return inputs.text(str(info.field_name), value, max_length=inputs.MAX_NAME)

    @field_validator("permissions")
    @classmethod
    def _storable_permissions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for i, permission in enumerate(value):
            inputs.text(f"permissions.{i}", permission, max_length=inputs.MAX_NAME)
        return value

    @field_validator("payload", mode="before")
    @classmethod
    def _storable_payload(cls, value: Any) -> Any:
        # Before pydantic's own walk: a hostile depth must not reach its recursion.
        return inputs.json_value("payload", value)

    @field_validator("purpose")
    @classmethod
    def _purpose_is_a_name(cls, value: str | None) -> str | None:
        return None if value is None else _checked(check_purpose, value)

    @field_validator("consent")
    @classmethod
    def _consent_is_a_reference(cls, value: str | None) -> str | None:
        return None if value is None else _checked(check_reference, value)

    @field_validator("payload")
    @classmethod
    def _payload_is_json(cls, value: JSON) -> JSON:
        try:
            canonical_json(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"payload is not JSON: {exc}") from None
        return value

    @classmethod
    def parse(cls, data: Mapping[str, Any] | IntakeEvent) -> IntakeEvent:
        """Validate ``data`` as an event; raise :class:`IntakeError` naming each bad field
        (the first one a database could not hold, see the class)."""
        if isinstance(data, IntakeEvent):
            return data
        if not isinstance(data, Mapping):
            raise IntakeError(
                f"an intake event must be an IntakeEvent or a mapping, not {type(data).__name__}"
            )
        try:
            return cls.model_validate(dict(data))
        except InvalidInput as exc:
            raise IntakeError(f"invalid intake event: {exc}") from None
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'event'}: {err['msg']}"
                for err in exc.errors(include_url=False)
            )
            raise IntakeError(f"invalid intake event: {problems}") from None


def _checked(check: Callable[..., str], value: str) -> str:
    """``check(value)``, its complaint as the ``ValueError`` pydantic reports."""
    try:
        return check(value)
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None


InputFrom = Callable[[IntakeEvent], Any]
"""Builds a new run's input from the event that starts it."""


def _check_signal_name(name: str, where: str) -> None:
    if not isinstance(name, str) or not name:
        raise IntakeError(f"{where}: a signal needs a non-empty name")
    if name.startswith("underway."):
        raise IntakeError(
            f"{where}: signal names starting with 'underway.' are reserved ({name!r})"
        )


@dataclass(frozen=True, slots=True)
class StartFlow:
    """Start a run of ``flow`` for an event whose entity has no live run.

    ``input_from``: ``"payload"`` (the event's payload is the input), ``"event"`` (the whole
    event as JSON), or a function of the event returning the input. ``signal`` names the
    signal used when a live run already owns the entity (default: the event type).
    ``queue`` is the queue the new run belongs to.

    ``subject_from`` names the field of the event that holds the data subject of the run
    it starts, as a dotted path into the event (``entity_id``, ``payload.customer_id``);
    the field must hold an id (a string or an integer) — an event without one is refused,
    naming the path. ``purpose`` is the purpose of the runs the route starts for events
    that name none (``IntakeEvent.purpose`` wins).

    ``labels_from`` maps label names to dotted paths into the event
    (``{"sku": "payload.sku"}``): the run starts with those labels. A path the event does
    not have gives no label; a value no label can hold refuses the event, naming the
    label. ``sensitive_labels`` names labels shown redacted.
    """

    flow: Flow[Any, Any] | str
    input_from: Literal["payload", "event"] | InputFrom = "payload"
    signal: str | None = None
    queue: str = "default"
    subject_from: str | None = None
    purpose: str = DEFAULT_PURPOSE
    labels_from: Mapping[str, str] = field(default_factory=dict)
    sensitive_labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        name = self.flow.name if isinstance(self.flow, Flow) else self.flow
        if not isinstance(name, str) or not name:
            raise IntakeError("StartFlow needs a flow (a Flow or a registered flow name)")
        if self.input_from not in ("payload", "event") and not callable(self.input_from):
            raise IntakeError(
                f"StartFlow({name!r}): input_from must be 'payload', 'event' or a function of "
                f"the event, not {self.input_from!r}"
            )
        if self.signal is not None:
            _check_signal_name(self.signal, f"StartFlow({name!r})")
        if not self.queue:
            raise IntakeError(f"StartFlow({name!r}): queue name must not be empty")
        if self.subject_from is not None and (
            not isinstance(self.subject_from, str)
            or not all(self.subject_from.split("."))
        ):
            raise IntakeError(
                f"StartFlow({name!r}): subject_from must be a dotted path into the event "
                f"('entity_id', 'payload.customer_id'), not {self.subject_from!r}"
            )
        try:
            check_purpose(self.purpose)
            for key in (*self.labels_from, *self.sensitive_labels):
                check_key(key, field="labels_from")
        except ConfigurationError as exc:
            raise IntakeError(f"StartFlow({name!r}): {exc}") from None
        bad = [p for p in self.labels_from.values() if not isinstance(p, str) or not all(
            p.split("."))]
        if bad:
            raise IntakeError(f"StartFlow({name!r}): labels_from maps names to dotted paths "
                              f"into the event ('payload.sku'), not {bad[0]!r}")

    def input_for(self, event: IntakeEvent) -> Any:
        """The input of a run this route starts for ``event``."""
        if self.input_from == "payload":
            return event.payload
        if self.input_from == "event":
            return event.model_dump(mode="json")
        return self.input_from(event)

    def subject_for(self, event: IntakeEvent) -> str | None:
        """The data subject of a run this route starts for ``event`` (None without
        ``subject_from``); :class:`IntakeError` when the event holds no id there."""
        if self.subject_from is None:
            return None
        found = _at(event.model_dump(mode="json"), self.subject_from)
        if isinstance(found, int) and not isinstance(found, bool):
            found = str(found)
        if not isinstance(found, str):
            raise IntakeError(
                f"event type {event.event_type!r}: the route takes the run's subject from "
                f"{self.subject_from!r}, which holds {'nothing' if found is None else 'no id'} "
                "in this event"
            )
        try:
            return check_subject(found, field=f"the subject at {self.subject_from!r}")
        except ConfigurationError as exc:
            raise IntakeError(f"event type {event.event_type!r}: {exc}") from None


    def labels_for(self, event: IntakeEvent) -> dict[str, LabelValue]:
        """The labels of a run this route starts for ``event``; :class:`IntakeError`
        naming the label when the event holds a value no label can hold."""
        if not self.labels_from:
            return {}
        data = event.model_dump(mode="json")
        found = {k: _at(data, path) for k, path in self.labels_from.items()}
        try:
            return check_labels({k: v for k, v in found.items() if v is not None},
                                field="labels")
        except ConfigurationError as exc:
            raise IntakeError(f"event type {event.event_type!r}: {exc}") from None


def _at(data: JSON, path: str) -> JSON:
    """The value at a dotted path into an event's JSON (None: it has none there)."""
    for part in path.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


@dataclass(frozen=True, slots=True)
class Signal:
    """Deliver the event as signal ``signal`` to the live run that owns its entity; when no
    run owns it, the event is ignored."""

    signal: str

    def __post_init__(self) -> None:
        _check_signal_name(self.signal, "Signal route")


Route = StartFlow | Signal
"""What to do with events of one type."""


class Routes(Mapping[str, Route]):
    """An immutable table: event type -> :class:`StartFlow` or :class:`Signal`.

    >>> routes = Routes({"invoice.created": StartFlow(invoice_flow),
    ...                  "invoice.paid": Signal("paid")})
    """

    def __init__(self, routes: Mapping[str, Route] | None = None) -> None:
        table = dict(routes or {})
        for event_type, route in table.items():
            if not isinstance(event_type, str) or not event_type:
                raise IntakeError(f"route keys must be non-empty event types, not {event_type!r}")
            if not isinstance(route, StartFlow | Signal):
                raise IntakeError(
                    f"route for {event_type!r} must be StartFlow(...) or Signal(...), not "
                    f"{type(route).__name__}"
                )
        self._table = table

    def __getitem__(self, event_type: str) -> Route:
        return self._table[event_type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"Routes({self._table!r})"


@dataclass(frozen=True, slots=True)
class IntakeResult:
    """What :func:`intake` did with an event.

    ``started``/``signalled``: this delivery started or signalled ``run_id``.
    ``duplicate``: an earlier delivery of the same key already did; ``run_id`` is that run.
    ``ignored``: nothing was done (``reason`` says why); ``run_id`` is None.
    """

    action: Literal["started", "signalled", "duplicate", "ignored"]
    run_id: str | None
    reason: str = ""


RUN_KEY_PREFIX = INTAKE_KEY_PREFIX
"""How the idempotency key of every run intake starts begins. What marks such a run's
input as outside content is its lineage (:class:`~underway.lineage.Lineage`: the event's
source as its origin, ``intake`` taint), which every run it starts inherits."""


def run_key(idempotency_key: str) -> str:
    """The idempotency key of the run an event with ``idempotency_key`` starts."""
    return f"{RUN_KEY_PREFIX}{idempotency_key}"


def intake(
    engine: Client | Engine,
    event: IntakeEvent | Mapping[str, Any],
    routes: Routes | Mapping[str, Route],
    *,
    trace_context: dict[str, str] | None = None,
) -> IntakeResult:
    """Act on ``event`` once: signal the live run that owns its entity, or start a flow.

    See the module docstring for every case and for what a crash leaves behind.

    Args:
        engine: An :class:`~underway.Engine` or a :class:`~underway.client.Client`. A route's
            flow given as a :class:`~underway.Flow`, or named and known to it, has its input
            checked now. A flow named and unknown to a client is started by name. Its input
            is checked by the first worker that runs it.
        event: The event.
        routes: The routes, by event kind.
        trace_context: The W3C ``traceparent`` and ``tracestate`` of the delivery. It is
            journaled with a run the event starts, so its spans join the sender's trace. A
            signal to a live run stays in that run's trace.
    """
    ev = IntakeEvent.parse(event)
    table = routes if isinstance(routes, Routes) else Routes(routes)
    store = scheduling(engine.store)
    seen = store.get_intake(ev.tenant_id, ev.idempotency_key)
    if seen is not None:
        return _duplicate(seen.action, seen.run_id, ev.idempotency_key)
    route = table.get(ev.event_type)
    if route is None:
        known = ", ".join(sorted(table)) or "none"
        return IntakeResult(
            "ignored", None, f"no route for event type {ev.event_type!r} (routed types: {known})"
        )
    new_run: NewRun | None = None
    if isinstance(route, StartFlow):
        signal = route.signal or ev.event_type
        new_run = _prepare_run(engine, route, ev, trace_context)
    else:
        signal = route.signal
    owner = store.entity_owner(ev.tenant_id, ev.entity_id)
    if owner is not None:
        # The run that would receive the signal must be able to read it. (The owner may
        # change before the intake commits; the check is for the route as configured.)
        try:
            engine.check_signal(owner, signal, tenant_id=ev.tenant_id)
        except ConfigurationError as exc:
            raise IntakeError(f"event type {ev.event_type!r}: {exc}") from None
    # The signal's id is the event's idempotency key; its payload is sealed for it.
    payload = engine.codec.seal(canonical_json(ev.model_dump(mode="json")), signal_where(
        ev.tenant_id, ev.idempotency_key, signal,
        new_run.subject if new_run is not None else _subject_of(engine.store, ev.tenant_id, owner)))
    rec, fresh = store.apply_intake(IntakeRequest(
        tenant_id=ev.tenant_id, idempotency_key=ev.idempotency_key, entity_id=ev.entity_id,
        event_type=ev.event_type, now=engine.clock.now(), signal=signal,
        payload=payload, sender=ev.source, new_run=new_run,
    ))
    if rec is None:
        return IntakeResult(
            "ignored", None,
            f"no unfinished run owns entity {ev.entity_id!r} of tenant {ev.tenant_id!r} to "
            f"receive signal {signal!r}, and the route for {ev.event_type!r} starts none",
        )
    if not fresh:
        return _duplicate(rec.action, rec.run_id, ev.idempotency_key)
    return IntakeResult("started" if rec.action == "started" else "signalled", rec.run_id)


def _subject_of(store: CoreStore, tenant_id: str, run_id: str | None) -> str | None:
    """The data subject of the run that would receive an event's signal (its payload is
    sealed under that subject's key), if there is such a run and it names one."""
    row = None if run_id is None else store.get_run(tenant_id, run_id)
    return None if row is None else row.subject


def _duplicate(action: str, run_id: str, key: str) -> IntakeResult:
    return IntakeResult("duplicate", run_id, f"key {key!r} already {action} run {run_id}")


def _prepare_run(engine: Client | Engine, route: StartFlow, ev: IntakeEvent,
                 trace_context: dict[str, str] | None) -> NewRun:
    """The run ``engine.start`` would create for ``ev`` (input checked, state, first event)."""
    where = f"event type {ev.event_type!r}"
    subject = route.subject_for(ev)
    labels = route.labels_for(ev)
    try:
        data = route.input_for(ev)
    except Exception as exc:
        raise IntakeError(f"{where}: input_from failed: {type(exc).__name__}: {exc}") from exc
    try:
        return engine.prepare_start(
            route.flow, data, tenant_id=ev.tenant_id, idempotency_key=run_key(ev.idempotency_key),
            run_id=str(uuid.uuid4()), queue=route.queue, trace_context=trace_context,
            subject=subject, purpose=ev.purpose or route.purpose, consent=ev.consent,
            lineage=Lineage(origin=ev.source, taint=(INTAKE_TAINT,)),
            labels=labels, sensitive_labels=route.sensitive_labels,
        )
    except ConfigurationError as exc:
        errors = exc.errors if isinstance(exc, InvalidInput) else ()
        raise IntakeError(f"{where}: {exc}", errors=errors) from None
