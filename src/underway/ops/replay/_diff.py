"""The two traces side by side: calls aligned, what changed in words, and the rows a
side-by-side view prints."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import zip_longest

from ...events import JSON, canonical_json
from ._engine import Divergence
from ._trace import APPROVER, Trace, TracedCall

CHANGES: dict[str, str] = {
    "approval_needed": "would have needed approval",
    "approval_dropped": "would no longer have needed approval",
    "refused": "would have been refused",
    "allowed": "would no longer have been refused",
    "money": "would have paid a different amount",
    "calls": "would have made other calls",
    "ending": "would have ended differently",
    "cost": "would have cost a different amount",
    "diverged": "left the original's path",
}
"""Every kind of change a replay reports, and how it is said."""

_EPSILON = 1e-9

Pair = tuple[TracedCall | None, TracedCall | None]


@dataclass(frozen=True, slots=True)
class Change:
    """One way the replay decided differently: ``kind`` (a key of :data:`CHANGES`) and
    ``detail`` (which call, what amount)."""

    kind: str
    detail: str = ""

    def __str__(self) -> str:
        return CHANGES[self.kind] + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the side-by-side view: a ``label``, the original's and the replay's
    cell, and whether they differ."""

    label: str
    original: str
    replay: str
    changed: bool


def align(original: list[TracedCall], replay: list[TracedCall]) -> list[Pair]:
    """The calls of both runs paired: equal calls (tool and arguments) with each other,
    the rest by position within each stretch that differs."""
    a = [(c.tool, c.args_hash) for c in original]
    b = [(c.tool, c.args_hash) for c in replay]
    pairs: list[Pair] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            pairs += list(zip(original[i1:i2], replay[j1:j2], strict=True))
        else:
            pairs += list(zip_longest(original[i1:i2], replay[j1:j2]))
    return pairs


def changes(original: Trace, replay: Trace, stopped: Divergence | None) -> list[Change]:
    """How the replay decided differently from the original.

    A replay that stopped at a divergence is compared up to where it stopped. The original's
    later calls are not counted as missing. One that reached the end of an unfinished
    original is compared as far as the original went.

    Args:
        original: The original's trace.
        replay: The replay's trace.
        stopped: Where the replay stopped, if it did.
    """
    found: list[Change] = []
    complete = stopped is None
    moved_o: dict[str, float] = {}
    moved_r: dict[str, float] = {}
    for o, r in align(original.calls, replay.calls):
        if o is None and r is None:
            continue
        if r is None and not complete:
            continue  # the replay stopped before it came to this call
        if o is None or r is None or (o.tool, o.args_hash) != (r.tool, r.args_hash):
            found.append(Change("calls", _which(o, r)))
        tool = (r or o).tool  # type: ignore[union-attr]
        if r is not None and r.approval is not None and (o is None or o.approval is None):
            found.append(Change("approval_needed", tool))
        if o is not None and o.approval is not None and r is not None and r.approval is None:
            found.append(Change("approval_dropped", tool))
        if r is not None and r.outcome == "stopped":
            continue  # the replay stopped at this call: it came to nothing
        if r is not None:
            _add(moved_r, r.money)
        if o is not None:
            _add(moved_o, o.money)
        if r is not None and r.outcome == "refused" and (o is None or o.outcome != "refused"):
            found.append(Change("refused", f"{tool}: {r.error}"))
        if o is not None and o.outcome == "refused" and r is not None \
                and r.outcome != "refused":
            found.append(Change("allowed", tool))
    if _differs(moved_o, moved_r):
        found.append(Change("money", f"{_money(moved_o)} → {_money(moved_r)}"))
    if stopped is not None and stopped.kind != "end":
        found.append(Change("diverged", stopped.what))
    if complete and original.finished and (
            original.status != replay.status or not _same(original.result, replay.result)):
        found.append(Change("ending", f"{original.status} → {replay.status}"
                            if original.status != replay.status else "another result"))
    if complete and abs(original.cost_usd - replay.cost_usd) > _EPSILON:
        found.append(Change("cost", f"${original.cost_usd:.4f} → ${replay.cost_usd:.4f}"))
    return list(dict.fromkeys(found))


def rows(original: Trace, replay: Trace, show: Callable[[JSON], JSON] = lambda v: v,
         stopped: Divergence | None = None) -> list[Row]:
    """The side-by-side view.

    It has one row per aligned call. Then come how each run ended, the money it moved and its
    model calls.

    Args:
        original: The original's trace.
        replay: The replay's trace.
        show: Hides what a viewer may not see (:meth:`underway.redaction.Redactor.json`).
        stopped: Where the replay stopped, if it did.
    """
    out: list[Row] = []
    for n, (o, r) in enumerate(align(original.calls, replay.calls), start=1):
        step = (o or r).step if (o or r) is not None else ""  # type: ignore[union-attr]
        if o is not None and r is not None and o.args is None and o.args_hash == r.args_hash:
            o.args = r.args  # the same arguments: the original journaled only their hash
        out.append(Row(f"{n} {step}", _cell(o, show), _cell(r, show), _decided_apart(o, r)))
    a, b = _ending(original, show), _ending(replay, show)
    if stopped is not None and not replay.finished:
        b = ("stopped where the original went no further" if stopped.kind == "end"
             else f"stopped: {stopped.what}")
    out.append(Row("ended", a, b, a != b))
    a, b = _money(original.money), _money(replay.money)
    out.append(Row("money moved", a, b, a != b))
    a, b = _models(original), _models(replay)
    out.append(Row("model calls", a, b, a != b))
    return out


def _decided_apart(o: TracedCall | None, r: TracedCall | None) -> bool:
    """Whether two aligned calls differ in a decision: the call itself, the policy's
    outcome (no policy counts as allow), the approval, the outcome or the money."""
    if o is None or r is None:
        return True
    return ((o.tool, o.args_hash, o.policy or "allow", o.approval is None, o.outcome,
             o.error) != (r.tool, r.args_hash, r.policy or "allow", r.approval is None,
                          r.outcome, r.error)) or _differs(o.money, r.money)


def _cell(c: TracedCall | None, show: Callable[[JSON], JSON]) -> str:
    if c is None:
        return "—"
    args = _preview(show(c.args)) if c.args is not None else f"args #{c.args_hash[:12]}"
    lines = [f"{c.tool} {args}"]
    if c.policy is not None:
        lines.append(f"policy: {c.policy}" + (f" ({c.rule})" if c.rule else ""))
    if c.approval is not None and c.approver == APPROVER:
        lines.append(f"approval: needed, assumed {c.approval}")
    elif c.approval is not None:
        lines.append(f"approval: needed, {c.approval}"
                     + (f" by {c.approver}" if c.approver else ""))
    outcome = {"succeeded": "ok", "shadowed": "shadowed (not executed)",
               "unknown": "outcome unknown", "pending": "not run",
               "stopped": "the replay stopped here"}.get(c.outcome, c.outcome)
    lines.append(f"-> {outcome}" + (f" {c.error}" if c.error else ""))
    if c.money:
        lines.append(f"moved {_money(c.money)}")
    return "\n".join(lines)


def _ending(t: Trace, show: Callable[[JSON], JSON] = lambda v: v) -> str:
    if t.status == "completed":
        return f"completed {_preview(show(t.result))}"
    return t.status + (f": {t.error}" if t.error and t.status != "completed" else "")


def _models(t: Trace) -> str:
    return f"{len(t.models)} calls, {t.tokens} tokens, ${t.cost_usd:.4f}"


def _money(moved: dict[str, float]) -> str:
    return ", ".join(f"{cur} {amount:,.2f}" for cur, amount in sorted(moved.items())) \
        or "none"


def _add(total: dict[str, float], moved: dict[str, float]) -> None:
    for cur, amount in moved.items():
        total[cur] = total.get(cur, 0.0) + amount


def _differs(a: dict[str, float], b: dict[str, float]) -> bool:
    return any(abs(a.get(k, 0.0) - b.get(k, 0.0)) > _EPSILON for k in {*a, *b})


def _which(o: TracedCall | None, r: TracedCall | None) -> str:
    if o is None and r is not None:
        return f"{r.tool} added"
    if r is None and o is not None:
        return f"{o.tool} dropped"
    assert o is not None and r is not None
    if o.tool != r.tool:
        return f"{o.tool} became {r.tool}"
    return f"{r.tool} with other arguments"


def _same(a: JSON, b: JSON) -> bool:
    try:
        return canonical_json(a) == canonical_json(b)
    except (TypeError, ValueError):
        return bool(a == b)


def _preview(value: JSON, limit: int = 70) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"
