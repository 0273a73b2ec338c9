"""What a run's commit sends to other runs, in the same transaction: a child's end to the
run that started it, a cancel to the children of a run being cancelled; and what a child's
end means to its parent when it arrives."""

from __future__ import annotations

from .. import events as ev
from .._next import checked_marks
from ..codec import Codec, signal_where
from ..control import CANCEL
from ..control import CHILD as CHILD_SIGNAL
from ..errors import ConfigurationError
from ..events import JSON, canonical_json
from ..journal.state import FINAL_STATUSES, RunState
from ..store.base import SignalRecord


def child_finished(s: RunState, payload: JSON) -> ev.ChildFinished | None:
    """The ``ChildFinished`` event a child's signal means to run ``s`` (with what shaped a
    completed child's result): None when the signal names no child of the run, or one
    whose end is journaled already."""
    if not isinstance(payload, dict):
        return None
    run_id, status = payload.get("run_id"), payload.get("status")
    child = s.children.get(str(run_id))
    if child is None or child.ended or status not in FINAL_STATUSES:
        return None
    error, taint = payload.get("error"), payload.get("tainted_by")
    sources = [str(t) for t in taint] if isinstance(taint, list) else []
    try:
        marks = [dict(m) for m in checked_marks(payload.get("marks") or [])]
    except ConfigurationError:
        marks = []  # not what a child's end sends: nothing is marked rather than a guess
    return ev.ChildFinished(run_id=str(run_id), status=status, result=payload.get("result"),
                            error=None if error is None else str(error), tainted_by=sources,
                            marks=marks)


def outbox(
    s: RunState, events: list[ev.Event], now: float, codec: Codec
) -> list[SignalRecord]:
    """Signals to other runs that must commit with ``events``: the end of this run to the
    run that started it; a cancel to each non-detached child of a run being cancelled
    (payloads sealed through ``codec``)."""
    if not s.parent_run_id and not s.children:
        return []  # no run to tell: most commits
    out: list[SignalRecord] = []
    for e in events:
        if isinstance(e, ev.RunCompleted | ev.RunFailed | ev.RunCancelled) and s.parent_run_id:
            status = {"RunCompleted": "completed", "RunFailed": "failed"}.get(
                type(e).__name__, "cancelled")
            error = None if isinstance(e, ev.RunCompleted) else s.error
            payload: dict[str, JSON] = {
                "run_id": s.run_id, "status": status,
                "result": e.result if isinstance(e, ev.RunCompleted) else None, "error": error}
            if isinstance(e, ev.RunCompleted) and e.tainted_by:
                # What shaped the result goes up with it; an untainted end is sent as it was.
                payload["tainted_by"] = list(e.tainted_by)
            if isinstance(e, ev.RunCompleted) and e.marks:
                payload["marks"] = [dict(m) for m in e.marks]
            signal_id = f"child:{s.run_id}"
            out.append(SignalRecord(
                s.tenant_id, s.parent_run_id, signal_id, CHILD_SIGNAL,
                codec.seal(canonical_json(payload),
                           signal_where(s.tenant_id, signal_id, CHILD_SIGNAL, s.subject)),
                s.run_id, now,
            ))
        if isinstance(e, ev.RunCancelled):
            reason = f"parent run {s.run_id} was cancelled" + (f": {e.reason}" if e.reason
                                                                 else "")
            for run_id, child in s.children.items():
                if child.detached or child.ended:
                    continue
                signal_id = f"cancel:{s.run_id}"
                out.append(SignalRecord(
                    s.tenant_id, run_id, signal_id, CANCEL,
                    codec.seal(canonical_json({"by": e.by, "reason": reason}),
                               signal_where(s.tenant_id, signal_id, CANCEL)),
                    e.by, now,
                ))
    return out
