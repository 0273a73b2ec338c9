"""Forking a run: a new run that starts from another run's state at one event of its
journal, for recovery or a what-if. Both journals hold the link: the fork's first event
names its parent (``RunStarted.fork``), and the parent gets a ``RunForked`` event naming
the fork, written in the same transaction."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..clock import Clock
from ..control import CHILD
from ..errors import ConfigurationError, ConflictError, IntegrityError, RunNotFound
from ..events import JSON, canonical_json, genesis_hash
from ..flow import Flow
from ..journal import Journal
from ..journal.patch import apply_patch
from ..journal.projection import stored_labels
from ..journal.state import APPROVAL_SIGNAL, RunState, usage_counters
from ..store.base import ForkLink, NewRun, Store
from ._starting import started_with

if TYPE_CHECKING:
    from ._transport import Transport

MAX_REASON = 500
"""The longest reason a fork is given (journaled in both runs)."""

_RACES = 3
"""How many times a fork is tried again when the parent's journal moved meanwhile."""


@dataclass(frozen=True, slots=True)
class Fork:
    """A run made by :meth:`~underway.client.Client.fork`: its ``run_id``; the parent it
    was forked from, the parent's event ``seq`` whose state it starts from, and the step
    the parent stood at there (``parent_step``) with its status then; the ``step`` the
    fork starts at; ``redone``: the calls the parent had made in that step before ``seq``
    (``tool (status)``), which the fork, running the step from its start, makes again
    under keys of its own; ``notes``: what else the fork does not inherit."""

    run_id: str
    parent_run_id: str
    seq: int
    step: str
    parent_step: str | None
    parent_status: str
    redone: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


class Forks:
    """What :class:`~underway.client.Client` does to fork runs."""

    _transport: Transport

    def fork(
        self, run_id: str, *, at_seq: int, by: str, reason: str = "",
        step: str | None = None, state_patch: JSON = None, tenant_id: str = "default",
    ) -> Fork:
        """Start a new run from a run's state at one of its events.

        It is for recovery or a what-if. A run that went wrong is continued from before the
        mistake, or with its state corrected.

        The fork has a new id, in the same tenant and on the same queue. It starts with:

        - the run's input, and its state then, with ``state_patch`` applied;
        - the same principal, roles and lineage (subject, purpose, consent, outside origin,
          taint, shadow mode, trace, labels: :mod:`underway.lineage`);
        - the run's usage counters and version markers then, so budgets and counter rules keep
          counting.

        It never inherits approvals, pending requests, waits, timers or escalations. A forked
        call that needs an approval asks for its own. Both journals hold the link, written in
        one transaction: the fork's ``RunStarted.fork``, and a ``RunForked`` appended to the
        run. The run is not changed otherwise, whatever its status.

        Args:
            run_id: The run.
            at_seq: The event whose state the fork starts from.
            by: Who forks it; kept in ``RunForked``.
            reason: Why; kept in ``RunForked``.
            step: The step the fork starts ready at. By default, the step the run stood at after
                that event, run from its start.
            state_patch: An RFC 7386 merge patch object, or a list of RFC 6902 JSON Patch
                operations, applied to the state.
            tenant_id: The run's tenant.

        Raises:
            ConfigurationError: A seq the run has no event at, a run whose payloads were purged,
                an ended run without ``step``, or a patch that does not apply. Also, when this
                client has the flow's code, a step the flow lacks or a state that does not fit
                its model.
            ConflictError: A worker holds the run's lease. It is being advanced: fork it when
                handed back.
        """
        return self._transport.fork(self._transport.tenant(tenant_id), run_id,
                                    at_seq=at_seq, step=step, state_patch=state_patch, by=by,
                                    reason=reason)


def fork_run(
    store: Store, journal: Journal, clock: Clock, flows: Mapping[str, Flow[Any, Any]],
    run_id: str, *, at_seq: int, step: str | None, state_patch: JSON, by: str, reason: str,
    tenant_id: str,
) -> Fork:
    """Fork run ``run_id`` at its event ``at_seq`` (see :meth:`Client.fork`)."""
    if not by or not by.strip():
        raise ConfigurationError("a fork must say who made it (by)")
    if len(reason) > MAX_REASON:
        raise ConfigurationError(f"a fork's reason is at most {MAX_REASON} characters, "
                                 f"not {len(reason)}")
    if at_seq < 1:
        raise ConfigurationError(f"a run's events start at seq 1, not {at_seq}")
    row = store.get_run(tenant_id, run_id)
    if row is None:
        raise RunNotFound(tenant_id, run_id)
    _, _, at = journal.states_at(tenant_id, run_id, at_seq)
    if at.purged:
        raise ConfigurationError(
            f"run {run_id}: retention purged its payloads, so there is no state to fork from")
    if not at.input_checked or not at.flow:
        raise ConfigurationError(
            f"run {run_id} had not started a step at seq {at_seq} (its input was not checked "
            "yet); fork it at a later seq")
    start = step or at.step
    if not start:
        raise ConfigurationError(
            f"run {run_id} had ended at seq {at_seq} ({at.status}); name the step the fork "
            "starts at (step=..., --step)")
    state = _patched(at.state, state_patch)
    code = flows.get(at.flow)
    if code is not None:
        code.get_step(start)
        start = code.resolve_step(start)
        code.parse_state(state)
    fork_id = str(uuid.uuid4())
    for attempt in range(_RACES):
        new, link = _records(journal, clock, at, row.queue, fork_id, at_seq, start,
                             state, by, reason)
        try:
            store.fork_run(new, link)
            break
        except ConflictError:
            # Tried again only when the parent's journal moved on meanwhile (a worker
            # committed): a run being advanced right now, or a taken id, is refused.
            if attempt == _RACES - 1 or store.load_events(
                    tenant_id, run_id, after_seq=link.expected_seq) == []:
                raise
    redone = tuple(f"{c.tool} ({c.status})" for c in at.calls if c.tool) \
        if start == at.step else ()
    return Fork(fork_id, run_id, at_seq, start, at.step, at.status, redone, _notes(at))


def _patched(state: JSON, patch: JSON) -> JSON:
    """``state`` with ``patch`` applied: a list is an RFC 6902 JSON Patch, an object an
    RFC 7386 merge patch; None changes nothing."""
    doc = copy.deepcopy(state)
    if patch is None:
        return doc
    if isinstance(patch, dict):
        return _merge(doc, patch)
    if not isinstance(patch, list) or not all(
            isinstance(op, dict) and isinstance(op.get("op"), str)
            and isinstance(op.get("path"), str) for op in patch):
        raise ConfigurationError(
            "a state patch is a JSON object (a merge patch: {\"field\": value, ...}) or a "
            "list of JSON Patch operations ([{\"op\": \"replace\", \"path\": \"/field\", "
            "\"value\": ...}])")
    try:
        return apply_patch(doc, patch)
    except (KeyError, IndexError, ValueError, TypeError, IntegrityError) as exc:
        raise ConfigurationError(
            f"the state patch does not apply to the run's state: {type(exc).__name__}: {exc}"
        ) from None


def _merge(target: JSON, patch: dict[str, JSON]) -> JSON:
    """RFC 7386: ``patch``'s members replace ``target``'s, null removes one, objects merge."""
    out = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            out.pop(name, None)
        elif isinstance(value, dict):
            out[name] = _merge(out.get(name), value)
        else:
            out[name] = copy.deepcopy(value)
    return out


def _records(
    journal: Journal, clock: Clock, at: RunState, queue: str, fork_id: str,
    at_seq: int, start: str, state: JSON, by: str, reason: str,
) -> tuple[NewRun, ForkLink]:
    """The fork to create and the event to append to its parent, encoded now (the
    parent's head read just before)."""
    tenant_id, parent = at.tenant_id, at.run_id
    now = clock.now()
    # The parent's head now: what its RunForked chains from.
    now_state, head_hash, _ = journal.load_head(tenant_id, parent)
    head = now_state.seq
    try:
        canonical_json(state)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"the forked state is not JSON: {exc}") from None
    started = ev.RunStarted(
        flow=at.flow, input=copy.deepcopy(at.input), state=state, first_step=start,
        # The key the parent was started with stays what ctx.idempotency_key says (an
        # agent treats a run started by intake as untrusted input); the fork's row has
        # none, so it is never found by it.
        idempotency_key=at.idempotency_key, principal=at.principal, roles=list(at.roles),
        signals=None if at.signals is None else list(at.signals),
        # The fork inherits the run's lineage as a child would (the one record: origin,
        # taint, shadow mode, subject, purpose, consent, trace, labels), with the taint of
        # the child outcomes the run had received: its state may hold them.
        **started_with(at.lineage.descend(parent, taint=at.child_taint),
                       tenant_id=tenant_id, run_id=fork_id), forked_from=parent,
        fork=ev.ForkOrigin(run_id=parent, seq=at_seq, step=at.step, by=by, reason=reason,
                           usage=usage_counters(at), versions=dict(at.versions)),
    )
    blobs: dict[str, bytes] = {}
    first = journal.encode(tenant_id, fork_id, [(1, now, started)],
                           genesis_hash(tenant_id, fork_id), blobs)[0]
    linked = journal.encode(tenant_id, parent, [(head + 1, now, ev.RunForked(
        run_id=fork_id, seq=at_seq, step=start, by=by, reason=reason))], head_hash, blobs)[0]
    new = NewRun(
        tenant_id=tenant_id, run_id=fork_id, flow=at.flow, idempotency_key=None,
        first_event=first, blobs=blobs, step=start, now=now, next_wake_at=now, queue=queue,
        subject=at.subject, purpose=at.purpose, labels=stored_labels(started.lineage),
    )
    return new, ForkLink(tenant_id, parent, head, linked, now)


def _notes(at: RunState) -> tuple[str, ...]:
    """What the fork does not take over of the parent's situation at the seq."""
    notes = []
    if at.pending_approval is not None or at.approvals:
        notes.append("approvals and pending approval requests are not inherited: a "
                     "forked call that needs one asks for its own")
    if at.status == "waiting" and at.waiting_signal == APPROVAL_SIGNAL:
        notes.append("the parent was waiting for that approval; the fork starts ready")
    elif at.status == "waiting" and at.waiting_signal == CHILD:
        notes.append("the parent was waiting for a child run; the fork starts ready, "
                     "without it")
    elif at.status == "waiting" and at.waiting_signal:
        notes.append(f"the parent was waiting for signal {at.waiting_signal!r}; the fork "
                     "starts ready, without that wait")
    elif at.status == "waiting":
        notes.append("the parent was waiting on a timer; the fork starts at once")
    if at.status == "escalated":
        notes.append("the parent was escalated to a person; the fork starts without the "
                     "escalation")
    return tuple(notes)
