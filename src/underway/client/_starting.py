"""Building the run a start creates: its first event, checked against the flow's code when
the caller has it, journaled raw when it does not."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from .. import events as ev
from .. import inputs
from ..errors import ConfigurationError
from ..events import JSON, canonical_json, genesis_hash
from ..flow import Flow
from ..journal import Journal
from ..lineage import Lineage
from ..store.base import NewRun
from ..subjects import DEFAULT_PURPOSE, check_purpose, check_reference, check_subject


def new_run(
    journal: Journal,
    flow: Flow[Any, Any] | None,
    name: str,
    input: JSON | BaseModel,
    *,
    now: float,
    tenant_id: str,
    run_id: str,
    idempotency_key: str | None,
    start_at: float | None,
    queue: str,
    deadline: float | None,
    principal: str | None,
    roles: Iterable[str],
    parent_run_id: str | None = None,
    trace_context: dict[str, str] | None = None,
    subject: str | None = None,
    purpose: str = DEFAULT_PURPOSE,
    consent: str | None = None,
    lineage: Lineage | None = None,
) -> NewRun:
    """The run to create for flow ``name`` (``flow``: its code, when known here).

    With the flow's code the input is parsed now (a bad input raises
    :class:`ConfigurationError` and nothing is stored) and the run starts with its state
    and first step. Without it the raw input is journaled unchecked: the first worker that
    has the flow checks it before any step runs, and fails the run, naming the problem,
    when it does not match. ``parent_run_id``: the run starting this one as its child;
    ``trace_context``: the W3C trace context its spans join. ``subject``, ``purpose`` and
    ``consent`` are checked (:mod:`underway.subjects`) and journaled. ``lineage``: what
    the run inherits (a child's, a fork's, a replay's: :meth:`Lineage.descend`) or starts
    with (an outside origin, taint, shadow mode, labels); the other arguments add to it
    and never replace what it has (:meth:`Lineage.join`). Every run is built here, so
    this is where a run gets its whole lineage.
    """
    if not queue:
        raise ConfigurationError("queue name must not be empty")
    inherited = started_with(lineage, Lineage(
        subject=subject, purpose=purpose, consent=consent, trace_context=trace_context))
    if inherited["subject"] is not None:
        check_subject(inherited["subject"])
    check_purpose(inherited["purpose"])
    if inherited["consent"] is not None:
        check_reference(inherited["consent"])
    if flow is not None:
        if flow.start_step is None:
            raise ConfigurationError(f"flow {flow.name!r} has no steps")
        parsed = flow.parse_input(input)
        state = flow.initial_state(parsed)
        event = ev.RunStarted(
            flow=flow.name, input=parsed.model_dump(mode="json"),
            state=state.model_dump(mode="json"), first_step=str(flow.start_step),
            idempotency_key=idempotency_key, deadline=deadline, principal=principal,
            roles=sorted(set(roles)),
            signals=None if flow.signals is None else sorted(flow.signals),
            parent_run_id=parent_run_id, **inherited,
        )
    else:
        Flow.check_name(name)
        raw = input.model_dump(mode="json") if isinstance(input, BaseModel) else input
        try:
            canonical_json(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"input for flow {name!r} is not JSON: {exc}") from None
        event = ev.RunStarted(
            flow=name, input=raw, state=None, first_step="", checked=False,
            idempotency_key=idempotency_key, deadline=deadline, principal=principal,
            roles=sorted(set(roles)), parent_run_id=parent_run_id, **inherited,
        )
    blobs: dict[str, bytes] = {}
    stored = journal.encode(tenant_id, run_id, [(1, now, event)],
                            genesis_hash(tenant_id, run_id), blobs, event.subject)
    return NewRun(
        tenant_id=tenant_id, run_id=run_id, flow=event.flow, idempotency_key=idempotency_key,
        first_event=stored[0], blobs=blobs, step=event.first_step, now=now,
        next_wake_at=start_at if start_at is not None else now, queue=queue,
        subject=event.subject, purpose=event.purpose,
    )


def started_with(inherited: Lineage | None, adds: Lineage | None = None) -> dict[str, Any]:
    """The fields of a :class:`~underway.events.RunStarted` that hold a run's lineage:
    ``inherited`` (what it inherits, or starts with) with ``adds`` joined
    (:meth:`Lineage.join`), as its ``subject``, ``purpose``, ``consent``,
    ``trace_context`` and ``lineage`` (the rest). Every start writes them through here:
    a run's start, a child's, a fork's.

    Args:
        inherited: the lineage the run inherits or is started with.
        adds: what the start adds to it.
    """
    whole = (inherited or Lineage()).join(adds)
    return {"subject": whole.subject, "purpose": whole.purpose, "consent": whole.consent,
            "trace_context": whole.trace_context, "lineage": whole.journaled()}


def check_start(flow: str, input: object, *, run_id: str | None,
                idempotency_key: str | None, queue: str, start_at: float | None,
                deadline: float | None) -> None:
    """Refuse (:class:`~underway.errors.InvalidInput`) a start no run can hold."""
    for field, value in (("flow", flow), ("run_id", run_id),
                         ("idempotency_key", idempotency_key), ("queue", queue)):
        if value is not None:
            inputs.text(field, value, max_length=inputs.MAX_NAME)
    for field, when in (("start_at", start_at), ("deadline", deadline)):
        if when is not None:
            inputs.when(field, when)
    if not isinstance(input, BaseModel):
        inputs.json_value("input", input)
