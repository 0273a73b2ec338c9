"""The evaluation as one self-contained HTML page (``underway eval --html FILE``): the
figures, the per-flow, per-tool and per-model tables, and charts drawn as inline SVG by
:mod:`underway.ops.charts` — no script, no external stylesheet, font or image: the file can
be mailed, archived or opened offline."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ..charts import Chart, Series, columns, count, duration, rows, svg
from ._eval import Evaluation
from ._text import ms, pct, read_line, seconds, usd, when

_STYLE = """
:root { --fg: #1d2330; --muted: #5d6778; --line: #dde2ea; --card: #f7f9fc;
  --accent: #3b6fe0; --ok: #2e9d5b; --warn: #d99a1e; --bad: #cf4a3c; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  margin: 24px auto; max-width: 1100px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
p.muted, .muted { color: var(--muted); margin: 0 0 8px; }
.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(160px, 1fr));
  gap: 10px; margin: 16px 0; }
.tiles div { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
  padding: 10px 12px; }
.tiles dt { color: var(--muted); font-size: 12px; text-transform: uppercase; }
.tiles dd { margin: 2px 0 0; font-size: 20px; font-weight: 600; }
.tiles dd.good { color: var(--ok); } .tiles dd.bad { color: var(--bad); }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr));
  gap: 16px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; overflow-x: auto;
  padding: 12px 14px; }
.card h2 { margin-top: 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: right;
  white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
th { color: var(--muted); font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
.empty { color: var(--muted); font-style: italic; text-align: center; padding: 28px 0;
  margin: 0; border: 1px dashed var(--line); border-radius: 6px; }
svg.chart { display: block; width: 100%; height: auto; }
svg.chart .grid { stroke: var(--line); stroke-width: 1; }
svg.chart .axis { stroke: #b8c0cc; stroke-width: 1; }
svg.chart text { font-size: 11px; fill: var(--muted); }
svg.chart .tick.y { text-anchor: end; dominant-baseline: middle; }
svg.chart .tick.x { text-anchor: middle; }
svg.chart .tick.name { text-anchor: end; dominant-baseline: middle; fill: var(--fg);
  font-size: 12px; }
svg.chart .value { dominant-baseline: middle; fill: var(--fg); }
.legend { list-style: none; display: flex; flex-wrap: wrap; gap: 4px 14px; padding: 0;
  margin: 6px 0 0; font-size: 12px; color: var(--muted); }
.legend .swatch { width: 10px; height: 10px; margin-right: 5px; vertical-align: -1px; }
.bar.st-open { fill: var(--accent); } .bar.st-completed, .bar.ok { fill: var(--ok); }
.bar.st-failed, .bar.failed { fill: #e59a90; } .bar.st-dead, .bar.lost { fill: var(--bad); }
.bar.st-cancelled { fill: #a7afbb; } .bar.timeout { fill: var(--warn); }
.bar.refused { fill: #6f42c1; } .bar.cost { fill: #6f42c1; }
.bar.p50, .bar.rate { fill: var(--accent); } .bar.p90 { fill: #a9c0f7; }
"""

STATUSES = ("completed", "failed", "cancelled", "dead", "open")


def eval_html(e: Evaluation) -> str:
    """The evaluation as a complete HTML document."""
    o, s, c = e.outcomes, e.safety, e.cost
    scope = f"flow {e.flow}" if e.flow else "every flow"
    title = f"underway evaluation: tenant {e.tenant_id}, {scope}"
    tiles = [
        ("runs started", str(o.started), ""),
        ("completion", pct(o.completion_rate), ""),
        ("resolution p50", duration(e.resolution_s.p50) if e.resolution_s.n else "-", ""),
        ("needed a person", pct(e.takeover.rate), ""),
        ("unsafe stopped", str(s.attempts), ""),
        ("executed unsafe", str(s.executed_unsafe), "good" if not s.executed_unsafe
         else "bad"),
        ("duplicate effects", str(len(e.effects.duplicates)),
         "good" if not e.effects.duplicates else "bad"),
        ("cost per completed", usd(c.cost_per_completed_usd), ""),
    ]
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">runs created from {escape(when(e.since))} to '
        f'{escape(when(e.until, "now"))}; {escape(read_line(e.reading))}</p>',
        '<dl class="tiles">' + "".join(
            f'<div><dt>{escape(k)}</dt><dd class="{cls}">{escape(v)}</dd></div>'
            for k, v, cls in tiles) + "</dl>",
        '<section class="charts">',
        *(_card(name, svg(chart)) for name, chart in _charts(e)),
        "</section>",
        _card("figures", _facts(e)),
    ]
    for title, first, figures in (("per flow", "flow", e.flows),
                                  (f"per label {e.group_by}", e.group_by, e.groups)):
        if first is None or not figures:
            continue
        parts.append(_card(title, _html_table(
            [first, "runs", "completed", "rate", "p50", "p90", "needed a person",
             "unsafe stopped", "executed unsafe", "duplicates", "takeovers", "model cost",
             "per completed"],
            [[f.flow, f.outcomes.started, f.outcomes.completed,
              pct(f.outcomes.completion_rate), duration(f.resolution_s.p50),
              duration(f.resolution_s.p90), pct(f.takeover_rate), f.unsafe_attempts,
              f.executed_unsafe, f.duplicates, f.takeovers, usd(f.model_cost_usd),
              usd(f.cost_per_completed_usd)] for f in figures])))
    if e.tools:
        parts.append(_card("per tool", _html_table(
            ["tool", "ok", "failed", "timed out", "lost", "schema", "refused", "denied",
             "held", "shadowed", "executed unsafe", "duplicates", "p50 ms", "p90 ms"],
            [[u.tool, u.succeeded, u.failed, u.timed_out, u.unknown, u.schema_failures,
              u.refused, u.denied, u.held, u.shadowed, u.executed_unsafe, u.duplicates,
              f"{u.latency_ms.p50:,.0f}", f"{u.latency_ms.p90:,.0f}"] for u in e.tools])))
    if e.models:
        parts.append(_card("per model", _html_table(
            ["model", "calls", "tokens in", "tokens out", "cost", "p50 ms", "p90 ms"],
            [[m.model, m.calls, f"{m.tokens_in:,}", f"{m.tokens_out:,}", usd(m.cost_usd),
              f"{m.latency_ms.p50:,.0f}", f"{m.latency_ms.p90:,.0f}"] for m in e.models])))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _charts(e: Evaluation) -> list[tuple[str, Chart]]:
    o = e.outcomes
    found = [("how the runs stand", rows(
        [(status, float(getattr(o, status))) for status in STATUSES],
        cls="rate", label="runs by status"))]
    if len(e.started_per_day) > 1:
        days = list(e.started_per_day)
        found.append(("runs started per day, by status now", columns(
            [d[5:] for d in days],
            [Series(f"st-{status}", status,
                    [float(e.started_per_day[d].get(status, 0)) for d in days])
             for status in STATUSES], stacked=True, label="runs started per day")))
    if e.flows:
        found.append(("completion rate per flow", rows(
            [(f.flow, 100 * f.outcomes.completion_rate) for f in e.flows], cls="rate",
            fmt=lambda v: f"{v:.0f}%", label="completion rate per flow")))
        found.append(("model cost per flow", rows(
            [(f.flow, f.model_cost_usd) for f in e.flows], cls="cost", fmt=usd,
            label="model cost per flow")))
    if e.tools:
        names = [u.tool for u in e.tools]
        found.append(("tool calls by outcome", columns(names, [
            Series("ok", "succeeded", [float(u.succeeded) for u in e.tools]),
            Series("failed", "failed", [float(u.failed) for u in e.tools]),
            Series("timeout", "timed out", [float(u.timed_out) for u in e.tools]),
            Series("lost", "outcome lost", [float(u.unknown) for u in e.tools]),
            Series("refused", "refused", [float(u.refused) for u in e.tools]),
        ], stacked=True, label="tool calls by outcome", every=1)))
        found.append(("tool latency (ms)", columns(names, [
            Series("p50", "median", [u.latency_ms.p50 for u in e.tools]),
            Series("p90", "90th percentile", [u.latency_ms.p90 for u in e.tools]),
        ], label="tool latency", every=1, fmt=count)))
    return found


def _card(title: str, body: str) -> str:
    return f'<div class="card"><h2>{escape(title)}</h2>{body}</div>'


def _facts(e: Evaluation) -> str:
    t, s, x, rec, c = e.takeover, e.safety, e.effects, e.recovery, e.cost
    items = [
        ("resolution", f"{seconds(e.resolution_s)} ({e.resolution_s.n} runs ended)"),
        ("approvals", f"{t.approvals_requested} requested: {t.approvals_granted} granted, "
                      f"{t.approvals_rejected} rejected, {t.approvals_expired} expired, "
                      f"{t.approvals_invalid} invalid decisions; waited "
                      f"{seconds(t.approval_wait_s)}"),
        ("escalations", ", ".join(f"{k} {v}" for k, v in t.escalations.items()) or "none"),
        ("decided by", "; ".join(f"{who}: " + ", ".join(f"{k} {v}" for k, v in what.items())
                                 for who, what in t.decided_by.items()) or "nobody"),
        ("policy denials", ", ".join(f"{k} {v}" for k, v in s.denials.items()) or "none"),
        ("refusals", ", ".join(f"{k} {v}" for k, v in s.refusals.items()) or "none"),
        ("shadowed, taint holds", f"{s.shadowed}, {s.taint_holds}"),
        ("tainted results", f"{e.outcomes.tainted} of {e.outcomes.completed} completed"
                            + "".join(f", {k} {v}" for k, v in e.outcomes.tainted_by.items())),
        ("marked answers", f"{e.outcomes.answers_marked} of {e.outcomes.completed} completed, "
                           f"{e.outcomes.answers_repeating} repeating untrusted text"
                           + "".join(f", {k} {v}" for k, v in e.outcomes.repeated_from.items())),
        ("executed unsafe", ", ".join(f"{u.tool} {u.key} (run {u.run_id})"
                                      for u in s.unsafe_calls) or "none"),
        ("duplicate effects", ", ".join(f"{d.tool} {d.key} x{d.times}"
                                        for d in x.duplicates) or
         f"none of {x.mutating_keys} mutating keys"),
        ("outcomes lost", ", ".join(f"{k} {v}" for k, v in x.unknown_outcomes.items())
         or "none"),
        ("settled by", ", ".join(f"{k} {v}" for k, v in x.settled.items()) or "-"),
        ("recovery", f"{rec.takeovers} takeovers in {rec.runs_taken_over} runs, last write "
                     f"to resumed step {seconds(rec.gap_s)}; {rec.dead_lettered} "
                     f"dead-letterings, {rec.resumes} operator resumes"),
        ("model", f"{c.model_calls} calls, {c.tokens_in:,} tokens in, {c.tokens_out:,} "
                  f"out, {usd(c.model_cost_usd)}; {ms(c.model_latency_ms)}"),
        ("money moved", ", ".join(f"{v:,.2f} {cur}" for cur, v in c.money.items())
         or "none"),
        ("tool latency", ms(c.tool_latency_ms)),
    ]
    return '<dl class="facts">' + "".join(
        f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in items) + "</dl>"


def _html_table(head: Sequence[str], body: Sequence[Sequence[object]]) -> str:
    return ("<table><thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(
                "<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in row) + "</tr>"
                for row in body) + "</tbody></table>")
