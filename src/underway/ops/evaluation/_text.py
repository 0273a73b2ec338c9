"""The evaluation and the drift report as text for a terminal (what ``underway eval`` and
``underway drift`` print), and a drift report as a notice for the configured notifier."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from ...guard.approvals.notify import ApprovalNotice
from ..charts import duration
from ._drift import Drift, DriftMetric
from ._eval import Evaluation
from ._reading import Reading
from ._stats import Spread


def when(t: float | None, default: str = "the beginning") -> str:
    """A time as ISO 8601 in UTC, to the second."""
    if t is None:
        return default
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def pct(value: float) -> str:
    """A share as a percentage."""
    return f"{100 * value:.1f}%"


def usd(value: float | None) -> str:
    """Dollars, with the precision small model costs need."""
    if value is None:
        return "-"
    return f"${value:,.4f}" if value < 100 else f"${value:,.2f}"


def ms(s: Spread) -> str:
    """A latency spread in milliseconds."""
    return f"p50 {s.p50:,.0f} ms, p90 {s.p90:,.0f} ms" if s.n else "none"


def seconds(s: Spread) -> str:
    """A spread of durations."""
    return f"p50 {duration(s.p50)}, p90 {duration(s.p90)}, max {duration(s.max)}" \
        if s.n else "none"


def _counts(counts: Mapping[str, int | float], empty: str = "none") -> str:
    return ", ".join(f"{k} {v:g}" for k, v in counts.items()) or empty


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word``, in the plural unless ``n`` is 1."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


_LOST = {"takeover": "after a takeover", "timeout": "timed out",
         "connection": "connection lost"}
_SETTLED = {"rerun": "run again under its key", "reconciled_happened": "reconcile: happened",
            "reconciled_not_happened": "reconcile: did not happen", "person": "by a person"}


def _named(counts: Mapping[str, int], names: Mapping[str, str]) -> str:
    return ", ".join(f"{v} {names.get(k, k)}" for k, v in counts.items())


def read_line(r: Reading) -> str:
    """What a computation read, in one line."""
    line = (f"read {plural(r.runs, 'run')}: {plural(r.events, 'event')} of "
            f"{len(r.kinds)} kinds ({r.payload_bytes / 1024:,.1f} KiB of payloads, "
            f"{plural(r.blobs, 'blob')}) in {r.seconds:.2f}s")
    if r.unreadable:
        line += (f"; {plural(len(r.unreadable), 'run')} left out, their journals unreadable here "
                 f"(encrypted without a key, or damaged: audit them): "
                 f"{', '.join(r.unreadable[:5])}{' ...' if len(r.unreadable) > 5 else ''}")
    return line


def eval_text(e: Evaluation) -> str:
    """The evaluation as lines of text."""
    o, t, s, x, rec, c = e.outcomes, e.takeover, e.safety, e.effects, e.recovery, e.cost
    scope = f"flow {e.flow}" if e.flow else "every flow"
    lines = [
        f"evaluation of tenant {e.tenant_id}, {scope}: runs created from {when(e.since)} "
        f"to {when(e.until, 'now')}",
        read_line(e.reading),
        "",
        _row("runs", f"{o.started} started: {o.completed} completed, {o.failed} failed, "
             f"{o.dead} dead, {o.cancelled} cancelled, {o.open} still open"),
        _row("completion", f"{pct(o.completion_rate)} ({o.completed}/{o.started})"),
        _row("tainted", f"{o.tainted} of {plural(o.completed, 'completed result')} shaped "
             "by untrusted content" + (f" ({_counts(o.tainted_by)})" if o.tainted_by else "")),
        _row("marked", f"{o.answers_marked} of {plural(o.completed, 'completed result')} "
             f"with marked parts, {o.answers_repeating} repeating untrusted text"
             + (f" ({_counts(o.repeated_from)})" if o.repeated_from else "")),
        _row("resolution", f"{seconds(e.resolution_s)} ({plural(e.resolution_s.n, 'run')} "
             "ended)"),
        _row("takeover", f"{t.runs} of {plural(o.started, 'run')} needed a person "
             f"({pct(t.rate)}): {plural(t.approvals_requested, 'approval')} requested "
             f"({t.approvals_granted} granted, {t.approvals_rejected} rejected, "
             f"{t.approvals_expired} expired), "
             f"{plural(sum(t.escalations.values()), 'escalation')}"
             + (f" ({_counts(t.escalations)})" if t.escalations else "")
             + f"; {t.approvals_per_run:.2f} approvals and {t.escalations_per_run:.2f} "
             "escalations per run"),
    ]
    if t.approval_wait_s.n:
        lines.append(_row("", f"approvals waited {seconds(t.approval_wait_s)}"))
    for who, what in t.decided_by.items():
        lines.append(_row("", f"{who}: {_counts(what)}"))
    lines += [
        _row("unsafe", f"{plural(s.attempts, 'attempt')} stopped: "
             f"{plural(sum(s.denials.values()), 'policy denial')}"
             + (f" ({_counts(s.denials)})" if s.denials else "")
             + f", {s.shadowed} shadowed, {plural(s.taint_holds, 'taint hold')}"),
        _row("executed-unsafe", f"{s.executed_unsafe}" + (
            ": " + ", ".join(f"{u.tool} {u.key}" for u in s.unsafe_calls[:5])
            if s.unsafe_calls else " (calls run while the guard's last word on them was "
            "not a pass)")),
        _row("duplicates", f"{plural(len(x.duplicates), 'effect key')} happened more than "
             f"once, of {plural(x.mutating_keys, 'mutating key')}" + "".join(
                 f"; {d.tool} {d.key} x{d.times}" for d in x.duplicates[:5])),
        _row("lost outcomes", f"{plural(sum(x.unknown_outcomes.values()), 'outcome')} lost"
             + (f" ({_named(x.unknown_outcomes, _LOST)}); settled: "
                f"{_named(x.settled, _SETTLED) or 'not yet'}" if x.unknown_outcomes else "")),
        _row("recovery", f"{plural(rec.takeovers, 'step')} taken over after a crash or a "
             f"lost lease (in {plural(rec.runs_taken_over, 'run')}); from the dead "
             f"attempt's last write to the resumed step {seconds(rec.gap_s)}; "
             f"{plural(rec.dead_lettered, 'dead-lettering')}, {rec.resumes} resumed by an "
             "operator"),
        _row("cost", f"{usd(c.model_cost_usd)} model cost ({plural(c.model_calls, 'call')}, "
             f"{c.tokens_in + c.tokens_out:,} tokens: {c.tokens_in:,} in, "
             f"{c.tokens_out:,} out); per completed run {usd(c.cost_per_completed_usd)}"
             + (f", {c.tokens_per_completed:,.0f} tokens"
                if c.tokens_per_completed is not None else "")),
        _row("money moved", ", ".join(
            f"{v:,.2f} {cur} ({c.money_per_completed.get(cur, 0.0):,.2f} per completed run)"
            for cur, v in c.money.items()) or "none"),
        _row("latency", f"model {ms(c.model_latency_ms)}; tools {ms(c.tool_latency_ms)}"),
    ]
    for title, first, figures in (("per flow:", "flow", e.flows),
                                  (f"per label {e.group_by}:", e.group_by, e.groups)):
        if first is not None and figures:
            lines += ["", title, _table(
                [first, "runs", "done", "rate", "p50", "p90", "person", "unsafe",
                 "unsafe-run", "dup", "takeovers", "cost", "cost/done"],
                [[f.flow, f.outcomes.started, f.outcomes.completed,
                  pct(f.outcomes.completion_rate), duration(f.resolution_s.p50),
                  duration(f.resolution_s.p90), pct(f.takeover_rate), f.unsafe_attempts,
                  f.executed_unsafe, f.duplicates, f.takeovers, usd(f.model_cost_usd),
                  usd(f.cost_per_completed_usd)] for f in figures])]
    if e.tools:
        lines += ["", "per tool:", _table(
            ["tool", "ok", "failed", "timeout", "lost", "schema", "refused", "denied",
             "held", "shadow", "unsafe-run", "dup", "p50 ms", "p90 ms"],
            [[u.tool, u.succeeded, u.failed, u.timed_out, u.unknown, u.schema_failures,
              u.refused, u.denied, u.held, u.shadowed, u.executed_unsafe, u.duplicates,
              f"{u.latency_ms.p50:,.0f}", f"{u.latency_ms.p90:,.0f}"] for u in e.tools])]
    if e.models:
        lines += ["", "per model:", _table(
            ["model", "calls", "tokens in", "tokens out", "cost", "p50 ms", "p90 ms"],
            [[m.model, m.calls, f"{m.tokens_in:,}", f"{m.tokens_out:,}", usd(m.cost_usd),
              f"{m.latency_ms.p50:,.0f}", f"{m.latency_ms.p90:,.0f}"] for m in e.models])]
    return "\n".join(lines)


def _row(name: str, value: str) -> str:
    return f"{name:<16} {value}".rstrip()


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(v) for v in row] for row in [head, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    return "\n".join(
        "    " + "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                           for i, (v, w) in enumerate(zip(row, widths, strict=True)))
        for row in cells)


def _value(m: DriftMetric, v: float | None) -> str:
    if v is None:
        return "-"
    if m.kind == "rate":
        return pct(v)
    if m.name == "cost_per_task":
        return usd(v)
    return f"{v:,.0f}"


def _change(m: DriftMetric) -> str:
    if m.change is None:
        return "-"
    if m.kind == "rate":
        return f"{100 * m.change:+.1f} pp"
    if m.kind == "distance":
        return f"TVD {m.change:.2f}"
    return f"{100 * m.change:+.0f}%"


def _limit(m: DriftMetric) -> str:
    if m.kind == "rate":
        return f"{100 * m.threshold:g} pp"
    if m.kind == "distance":
        return f"{m.threshold:g}"
    return f"{100 * m.threshold:g}%"


def _p(value: float | None) -> str:
    if value is None:
        return "-"
    return "<1e-9" if value < 1e-9 else f"{value:.2g}"


def drift_text(d: Drift) -> str:
    """The drift report as lines of text: every metric judged, what drifted first."""
    scope = f"flow {d.flow}" if d.flow else "every flow"
    lines = [
        f"drift of tenant {d.tenant_id}, {scope}: window {when(d.window_start)} to "
        f"{when(d.until)} against the baseline from {when(d.baseline_start)}",
        read_line(d.reading),
        f"a metric drifts when it moves past its threshold with p < {d.alpha:g}; each "
        f"period needs {d.min_samples} samples",
        "",
    ]
    order = {"drifted": 0, "steady": 1, "too_few": 2}
    # A per-tool rate without enough samples says nothing: it is counted, not listed.
    shown = [m for m in d.metrics if m.tool is None or m.status != "too_few"]
    rows = [[m.label, _value(m, m.baseline), _value(m, m.window),
             f"{m.baseline_n}/{m.window_n}", _change(m), _limit(m),
             _p(m.p_value),
             m.status.replace("_", " ").upper() if m.status == "drifted"
             else m.status.replace("_", " ")]
            for m in sorted(shown, key=lambda m: order[m.status])]
    lines.append(_table(["metric", "baseline", "window", "samples", "change", "threshold",
                         "p", "verdict"], rows))
    if len(shown) < len(d.metrics):
        lines.append(f"    ({plural(len(d.metrics) - len(shown), 'per-tool rate')} with too "
                     "few samples not listed; --json has them)")
    if d.choices_baseline or d.choices_window:
        lines += ["", "tool choices (baseline -> window): " + ", ".join(
            f"{k} {d.choices_baseline.get(k, 0)} -> {d.choices_window.get(k, 0)}"
            for k in sorted({*d.choices_baseline, *d.choices_window}))]
    drifted = d.drifted
    lines += ["", f"{plural(len(drifted), 'metric')} drifted" + (
        ": " + ", ".join(m.label for m in drifted) if drifted else "")]
    return "\n".join(lines)


def drift_notice(d: Drift) -> ApprovalNotice:
    """A notice of what drifted, for the notifier ``underway.toml`` configures (kind
    ``drift``; its ``question`` says what moved, its ``evidence`` holds the report)."""
    drifted = d.drifted
    scope = f"flow {d.flow}" if d.flow else "every flow"
    summary = "; ".join(f"{m.label} {_value(m, m.baseline)} -> {_value(m, m.window)} "
                        f"({_change(m)})" for m in drifted)
    return ApprovalNotice(
        tenant_id=d.tenant_id, run_id="*",
        request_id=f"drift:{d.flow or '*'}:{when(d.until)}", tool="", args=None,
        evidence=d.to_json(), kind="drift",
        question=f"{plural(len(drifted), 'metric')} drifted for {scope} between "
                 f"{when(d.window_start)} and {when(d.until)}: {summary}",
    )
