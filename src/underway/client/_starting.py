"""Building the run a start creates: its first event, checked against the flow's code when
the caller has it, journaled raw when it does not."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .. import events as ev
from .. import inputs
from ..errors import ConfigurationError
from ..events import JSON, canonical_json, genesis_hash
from ..flow import Flow
from ..journal import Journal
from ..journal.projection import stored_labels
from ..lineage import Lineage, minted_context, trace_parent
from ..store.base import NewRun
from ..subjects import check_purpose, check_reference, check_subject
from ._options import StartKeywords, StartOptions


def new_run(
    journal: Journal,
    flow: Flow[Any, Any] | None,
    name: str,
    input: JSON | BaseModel,
    options: StartOptions,
    *,
    now: float,
    run_id: str,
    parent_run_id: str | None = None,
) -> NewRun:
    """The run to create for flow ``name`` (``flow``: its code, when known here), started
    with ``options`` as run ``run_id``.

    With the flow's code the input is parsed now (a bad input raises
    :class:`ConfigurationError` and nothing is stored) and the run starts with its state
    and first step. Without it the raw input is journaled unchecked: the first worker that
    has the flow checks it before any step runs, and fails the run, naming the problem,
    when it does not match. The subject, purpose and consent the run ends up with are
    checked (:mod:`underway.subjects`) and journaled. Every run is built here, so this is
    where a run gets its whole lineage: what ``options.lineage`` holds (a child's, a
    fork's, a replay's: :meth:`Lineage.descend`), with the other options added
    (:meth:`Lineage.join`).

    Args:
        journal: what encodes the run's first event.
        flow: the flow's code, or None when this process does not have it.
        name: the flow's name.
        input: the run's input.
        options: how the run is started (:class:`~underway.client.StartOptions`).
        now: the time the run is created.
        run_id: the new run's id.
        parent_run_id: the run starting this one as its child.
    """
    o = options
    inherited = started_with(o.lineage, Lineage(
        subject=o.subject, purpose=o.purpose, consent=o.consent,
        trace_context=o.trace_context, labels=dict(o.labels or {}),
        sensitive_labels=tuple(o.sensitive_labels)), tenant_id=o.tenant_id, run_id=run_id)
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
            idempotency_key=o.idempotency_key, deadline=o.deadline, principal=o.principal,
            roles=sorted(set(o.roles)),
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
            idempotency_key=o.idempotency_key, deadline=o.deadline, principal=o.principal,
            roles=sorted(set(o.roles)), parent_run_id=parent_run_id, **inherited,
        )
    blobs: dict[str, bytes] = {}
    stored = journal.encode(o.tenant_id, run_id, [(1, now, event)],
                            genesis_hash(o.tenant_id, run_id), blobs, event.subject)
    return NewRun(
        tenant_id=o.tenant_id, run_id=run_id, flow=event.flow,
        idempotency_key=o.idempotency_key, first_event=stored[0], blobs=blobs,
        step=event.first_step, now=now,
        next_wake_at=o.start_at if o.start_at is not None else now, queue=o.queue,
        subject=event.subject, purpose=event.purpose,
        labels=stored_labels(event.lineage),
    )


def started_with(inherited: Lineage | None, adds: Lineage | None = None, *,
                 tenant_id: str, run_id: str) -> dict[str, Any]:
    """The fields of a :class:`~underway.events.RunStarted` that hold a run's lineage:
    ``inherited`` (what it inherits, or starts with) with ``adds`` joined
    (:meth:`Lineage.join`), as its ``subject``, ``purpose``, ``consent``,
    ``trace_context`` and ``lineage`` (the rest). Every start writes them through here:
    a run's start, a child's, a fork's. A run given no valid trace context starts a trace
    of its own (:func:`~underway.lineage.minted_context`): every run has one trace.

    Args:
        inherited: the lineage the run inherits or is started with.
        adds: what the start adds to it.
        tenant_id: the run's tenant.
        run_id: the run's id.
    """
    whole = (inherited or Lineage()).join(adds)
    if trace_parent(whole.trace_context) is None:
        whole = whole.model_copy(update={"trace_context": minted_context(tenant_id, run_id)})
    return {"subject": whole.subject, "purpose": whole.purpose, "consent": whole.consent,
            "trace_context": whole.trace_context, "lineage": whole.journaled()}


def check_start(flow: str, input: object, options: StartOptions | None,
                keywords: StartKeywords) -> StartOptions:
    """The options of a start of ``flow`` (:meth:`StartOptions.of`), checked with the
    flow's name and the input: what no run can hold raises
    :class:`~underway.errors.InvalidInput` naming the field.

    Args:
        flow: the flow's name.
        input: the run's input.
        options: a ready :class:`StartOptions`, or None.
        keywords: the start's keyword arguments.
    """
    inputs.text("flow", flow, max_length=inputs.MAX_NAME)
    checked = StartOptions.of(options, keywords)
    if not isinstance(input, BaseModel):
        inputs.json_value("input", input)
    return checked
