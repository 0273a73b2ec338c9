"""A readable timeline of one run: a header with where the run stands, then either one row
per step attempt (its worker, how long it took, its calls and the wait it ended in, with the
lines of its notable events under it: :mod:`underway.ops.overview`) or one line per event
(sequence number, time, type and a one-line summary, from :mod:`underway.ops.timeline`).

Plain text on purpose: ``underway runs show`` prints it (the examples print what that
command prints), and it needs nothing beyond the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..client import Recorded, RunState, waiting_words
from ..codec import ENCRYPTED
from ..events import PURGED, Encrypted
from ..ops.overview import Attempt, Overview, overview, short_worker
from ..ops.timeline import counts, duration, format_time, lines, preview
from ..redaction import Redactor
from ..store.records import PurgedRun


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def purged_by(purge: PurgedRun | None) -> str:
    """What purged a run's payloads, as its timeline says it: an erasure of its data
    subject on request (with the erasure's reference), or retention."""
    if purge is not None and purge.erasure is not None:
        return f"erased on request, erasure {purge.erasure}"
    return "retention"


def _where(state: RunState, hide: Redactor, purge: PurgedRun | None) -> str:
    if state.purged:
        if purge is not None and purge.erasure is not None:
            return f"payloads {PURGED}: {purged_by(purge)} ({purge.rule})"
        return f"payloads {PURGED} by retention"
    if state.status == "waiting":
        return f"on {waiting_words(state)}"
    if state.status == "escalated" and state.escalation:
        return f"on {waiting_words(state)}: {hide.text(state.escalation.reason)}"
    if state.status == "completed":
        return f"result {preview(hide.json(state.result))}"
    if state.status in ("failed", "cancelled"):
        return hide.text(state.error or "")
    return ""


def render(state: RunState, records: Sequence[Recorded],
           children: Mapping[str, str] | None = None, hide: Redactor | None = None,
           purge: PurgedRun | None = None, *, compact: bool = False) -> str:
    """The run's header and its timeline, as text (no trailing newline).

    Args:
        state: The run's folded state.
        records: The run's events.
        children: The status of each child run as its row says now (else what this run's
            journal knows).
        hide: What the reader may not see (:mod:`underway.redaction`; None: a redactor
            that learns ``records`` and reveals nothing).
        purge: The record of the run's purge, when it was purged (it says whether
            retention or an erasure did it).
        compact: One row per step attempt instead of one line per event.
    """
    hide = hide if hide is not None else Redactor().learn(r.event for r in records)
    records = [Recorded(r.seq, r.at, hide.event(r.event)) for r in records]
    c = counts(records)
    detail = _where(state, hide, purge)
    head = [
        f"run      {state.run_id}",
        f"tenant   {state.tenant_id}",
        f"flow     {state.flow}",
        f"status   {state.status}" + (f" - {detail}" if detail else ""),
        f"step     {state.step or '-'}",
        f"started  {format_time(state.created_at)}   last event {format_time(state.updated_at)}",
        (
            f"counts   {_n(c['events'], 'event')}, {_n(c['steps'], 'step')}, "
            f"{_n(c['tool_calls'], 'tool call')} ({c['tool_failures']} failed), "
            f"{_n(c['model_calls'], 'model call')}, {_n(c['signals'], 'signal')}, "
            f"{_n(c['escalations'], 'escalation')}, "
            f"{_n(c['interrupted_steps'], 'step')} resumed after an interruption"
        ),
    ]
    if state.status == "completed" and state.tainted_by:
        head.append(f"tainted  result shaped by untrusted content from "
                    f"{', '.join(state.tainted_by)}")
    if state.status == "completed":
        head += [f"marked   {mark_words(m)}" for m in state.marks]
    shown = hide.json(dict(state.lineage.labels))
    if isinstance(shown, dict) and shown:
        head.append("labels   " + ", ".join(
            f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in shown.items()))
    if state.parent_run_id:
        head.append(f"parent   {state.parent_run_id}")
    for run_id, child in state.children.items():
        status = (children or {}).get(run_id) or child.status or "not ended"
        detached = ", detached" if child.detached else ""
        head.append(f"child    {run_id} ({child.flow}{detached}): {status}")
    if state.model_calls:
        head.append(
            f"usage    {state.tokens_in} tokens in, {state.tokens_out} out, "
            f"${state.cost_usd:.4f}"
        )
    sealed = sum(isinstance(r.event, Encrypted) for r in records)
    if sealed:
        head.append(f"payloads {ENCRYPTED}: {_n(sealed, 'event')} encrypted, and no key here "
                    "opens them (give --keyring, or set UNDERWAY_KEYRING or UNDERWAY_KEK)")
    if compact:
        seen = overview(records, purged_by=purged_by(purge))
        if seen.workers:
            head.append("workers  " + ", ".join(
                f"{short_worker(w)} ({_n(n, 'attempt')})" for w, n in seen.workers.items()))
        return "\n".join([*head, "", *_compact(seen)])
    body = lines(records, purged_by=purged_by(purge))
    width = max((len(line.type) for line in body), default=4)
    seq_w = max(3, len(str(body[-1].seq)) if body else 3)
    table = [f"{'seq':>{seq_w}}  {'time (UTC)':<23}  {'event':<{width}}  summary"]
    table += [
        f"{line.seq:>{seq_w}}  {format_time(line.at):<23}  {line.type:<{width}}  {line.summary}"
        for line in body
    ]
    return "\n".join([*head, "", *table])


def _took(start: float, end: float | None) -> str:
    return "running" if end is None else duration(max(0.0, end - start))


def _compact(seen: Overview) -> list[str]:
    """One row per attempt (seqs, start, duration, what, worker), its notable lines under
    it: each call's with its duration, and the wait it ended in."""
    rows = seen.attempts
    seq_w = max(3, len(f"{rows[-1].first_seq}-{rows[-1].last_seq}") if rows else 3)
    out = [f"{'seqs':>{seq_w}}  {'started (UTC)':<23}  {'took':>8}  step, worker",
           "(one row per step attempt; --events prints every event)"]
    for row in rows:
        took = _took(row.start, row.end) if row.step else ""
        out.append(f"{row.first_seq}-{row.last_seq}".rjust(seq_w) + "  "
                   f"{format_time(row.start):<23}  {took:>8}  {_what(row)}")
        pad = " " * (seq_w + 2)
        calls = {c.seq: c for c in row.calls}
        for note in row.notes:
            call = calls.get(note.seq)
            took = f" [{_took(call.start, call.end)}]" if call is not None else ""
            out.append(f"{pad}{note.seq:>5}  {note.summary}{took}")
        if row.wait is not None:
            w = row.wait
            then = f", then {w.outcome}" if w.outcome else ""
            out.append(f"{pad}       waiting for {w.what}: "
                       f"{_took(w.start, w.end) if w.end is not None else 'still waiting'}{then}")
    return out


def _what(row: Attempt) -> str:
    if not row.step:
        return "run"
    outcome = f" {row.outcome}" if row.outcome else " (running)"
    worker = f", worker {short_worker(row.worker)}" if row.worker else ""
    calls = f", {_n(len(row.calls), 'call')}" if row.calls else ""
    return f"{row.title}{outcome}{calls}{worker}"


def mark_words(mark: Mapping[str, Any]) -> str:
    """A marked part of a run's result in words: its path, its sources, and whether it
    repeats their text (``result repeats untrusted text from read_email``).

    Args:
        mark: The mark, ``{"path", "sources", "repeats"}``.
    """
    sources = ", ".join(map(str, mark.get("sources") or [])) or "an unknown source"
    how = "repeats untrusted text from" if mark.get("repeats") else "not accounted for; from"
    return f"{mark.get('path')} {how} {sources}"
