"""The runs row as the journal says it should be, and how a stored row disagrees with it.

The runs row is a projection of the journal: claims, wake-ups, listings, the API and the
console read it, and none of them can tell a wrong row from a right one. This module is
the one place that says what the row should be (:func:`expected_update`) and what is wrong
with a row that is stored (:func:`disagreements`). The audit reports each disagreement
(``underway audit verify``); a worker that meets one heals the row from the journal
(:mod:`underway.engine._rows`).

What the journal cannot say is not checked: the queue is not journaled, and the row's
wake time may be earlier than the journal's (a signal or a hand-back makes a run due).
The row's data subject and purpose (what erasures, legal holds and consent checks find a
run by) are checked by the audit alone (:func:`identity_disagreements`): a worker does
not rewrite them, so it would meet the same disagreement on every claim.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .. import events as ev
from ..labels import label_kind, label_text
from ..lineage import Lineage
from ..store.leases import MAX_LEASE_TTL
from ..store.records import FINAL, RunRecord, RunUpdate, StoredLabel
from .state import RunState

__all__ = ["Disagreement", "disagreements", "expected_update", "identity_disagreements",
           "label_disagreements", "labels_set", "lease_problem", "request_kind",
           "stored_labels"]

FINAL_EVENTS = ("RunCompleted", "RunFailed", "RunCancelled")
"""The types of the event a finished run's journal ends with."""


def good_time(value: object) -> bool:
    """Whether ``value`` can stand in a time column: None or a finite number. SQLite keeps
    whatever type is written, so a column may hold text; PostgreSQL may hold NaN."""
    if value is None:
        return True
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]


def wake_time(value: object) -> float | None:
    """``value`` as a time a reader can show (None when it is not one)."""
    return float(value) if value is not None and good_time(value) else None  # type: ignore[arg-type]


def question_expiry(s: RunState) -> float | None:
    """When the question the run waits on expires (None: it is no question, or it never
    expires)."""
    esc = s.escalation
    if s.status != "escalated" or esc is None or not esc.is_question:
        return None
    return esc.expires_at


def journal_wake(s: RunState) -> float | None:
    """When the journal says a run that is not ready is due next (None: never by itself;
    a signal, a person or an operator moves it)."""
    if s.status == "waiting":
        wake = s.wake_at
        if s.deadline is not None and not s.deadline_escalated:
            wake = s.deadline if wake is None else min(wake, s.deadline)
        return wake
    if s.status == "escalated":
        return question_expiry(s)
    return None


def request_kind(s: RunState) -> str | None:
    """What the run waits for a person to do, as its row records it: ``approval`` (a held
    call), ``question`` (``ctx.ask``), ``resolution`` (an escalation or a dead run to
    settle), or None. The same kinds :func:`underway.client.Client.pending_request` names.
    """
    if s.status == "waiting" and s.pending_approval is not None:
        return "approval"
    esc = s.escalation
    if s.status == "escalated" and esc is not None:
        if esc.is_question:
            return "question"
        if esc.request_id:
            return "resolution"
    if s.status == "dead" and s.dead_request is not None:
        return "resolution"
    return None


def expected_update(s: RunState, now: float, due_at: float | None) -> RunUpdate:
    """What the row of a run in state ``s`` should say.

    Args:
        s: The run's state.
        now: The time now.
        due_at: The due time of a ready run; None means ``now``.
    """
    if s.status == "ready":
        # A ready run keeps the due time it was claimed with: it stays claimable if this
        # worker dies, and an unchanged indexed column spares index writes on every step.
        return RunUpdate("ready", s.step, due_at if due_at is not None else now)
    if s.status == "waiting":
        return RunUpdate("waiting", s.step, journal_wake(s), s.waiting_signal,
                         request_kind=request_kind(s))
    if s.status == "escalated":
        reason = s.escalation.reason if s.escalation else None
        # A question that expires is woken then, to tell the step nobody answered.
        return RunUpdate("escalated", s.step, journal_wake(s), None, str(reason),
                         request_kind(s))
    return RunUpdate(s.status, s.step, None, None, s.error, request_kind(s))


def stored_labels(lineage: Lineage | None) -> tuple[StoredLabel, ...]:
    """The rows of the label index a run's lineage says it has (its labels, sorted by
    name): what a start writes, and what rebuilding the index from a journal writes.

    Args:
        lineage: The run's lineage (None: no labels).
    """
    if lineage is None:
        return ()
    hidden = set(lineage.sensitive_labels)
    return tuple(StoredLabel(key=k, value=label_text(v), kind=label_kind(v),
                             sensitive=k in hidden) for k, v in sorted(lineage.labels.items()))


def labels_set(events: Iterable[ev.Event], lineage: Lineage | None) -> tuple[StoredLabel, ...]:
    """The rows of the label index an append writes: the labels its ``RunLabeled`` events
    set, as ``lineage`` (the run's, after these events) has them now.

    Args:
        events: The events appended.
        lineage: The run's lineage once they are applied.
    """
    named = {k for e in events if type(e) is ev.RunLabeled for k in e.labels}
    if not named:
        return ()
    return tuple(x for x in stored_labels(lineage) if x.key in named)


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One field of a runs row that the journal contradicts."""

    field: str
    row: object
    """What the row holds."""
    journal: object
    """What the journal says it should hold."""

    def describe(self) -> str:
        """One sentence naming the field and both values."""
        return f"the runs row says {self.field} {self.row!r}; the journal says {self.journal}"


def lease_problem(row: RunRecord, *, now: float) -> str | None:
    """Why the row's lease cannot be held by a live worker (None: it may be)."""
    owner, expires = row.lease_owner, row.lease_expires_at
    if owner is None:
        return None
    if expires is None or not good_time(expires):
        return f"a lease held by {owner!r} that never expires ({expires!r})"
    if expires > now + MAX_LEASE_TTL:
        return (f"a lease held by {owner!r} for {expires - now:.0f}s more, longer than any "
                f"worker's lease ({MAX_LEASE_TTL:.0f}s)")
    if expires >= now and row.status in FINAL:
        return f"a lease held by {owner!r} on a {row.status} run"
    return None


def disagreements(row: RunRecord, s: RunState, *, now: float) -> list[Disagreement]:
    """Every field of ``row`` that ``s`` contradicts. Empty when the row can be trusted.

    Args:
        row: The run's row.
        s: The run's state, folded up to the row's head (``row.last_seq``).
        now: The time now.
    """
    out: list[Disagreement] = []

    def differ(name: str, stored: object, truth: object, shown: str | None = None) -> None:
        out.append(Disagreement(name, stored, shown if shown is not None else repr(truth)))

    if row.flow != s.flow and s.flow:
        differ("flow", row.flow, s.flow)
    if row.status != s.status:
        differ("status", row.status, s.status)
    elif row.status != "ready" and row.step != s.step:
        differ("step", row.step, s.step)
    if s.status == "waiting" and row.waiting_signal != s.waiting_signal:
        differ("waiting_signal", row.waiting_signal, s.waiting_signal)
    if row.status == s.status and row.request_kind != request_kind(s):
        differ("request_kind", row.request_kind, request_kind(s))
    wake = row.next_wake_at
    if not good_time(wake):
        differ("next_wake_at", wake, None, "a time or nothing")
    elif s.final:
        if wake is not None:
            differ("next_wake_at", wake, None, "nothing: the run has ended")
    elif s.status == "ready":
        if wake is None:
            differ("next_wake_at", wake, None, "a time: the run is ready")
    else:
        due = journal_wake(s)
        if due is not None and (wake is None or wake > due + 1e-6):
            differ("next_wake_at", wake, due, f"{due!r} at the latest")
    problem = lease_problem(row, now=now)
    if problem is not None:
        differ("lease", (row.lease_owner, row.lease_expires_at), None,
               f"no live worker can hold it: {problem}")
    return out


def label_disagreements(stored: Sequence[StoredLabel], s: RunState) -> list[Disagreement]:
    """The label index's rows of a run where its whole journal (folded into ``s``) says
    otherwise, one per label name. A purged run's journal no longer says them.

    Args:
        stored: The run's labels as the index holds them.
        s: The run's state, folded from every event of its journal.
    """
    if s.purged:
        return []
    have = {x.key: x for x in stored}
    want = {x.key: x for x in stored_labels(s.lineage_record)}
    return [Disagreement(f"label {k}", have.get(k), repr(want.get(k)))
            for k in sorted(have.keys() | want.keys()) if have.get(k) != want.get(k)]


def identity_disagreements(row: RunRecord, s: RunState) -> list[Disagreement]:
    """The row's data subject and purpose where the journal's start says otherwise. A
    purged run's start no longer says them, and is not checked."""
    out: list[Disagreement] = []
    if s.purged:
        return out
    if row.subject != s.subject:
        out.append(Disagreement("subject", row.subject, repr(s.subject)))
    if row.purpose != s.purpose:
        out.append(Disagreement("purpose", row.purpose, repr(s.purpose)))
    return out
