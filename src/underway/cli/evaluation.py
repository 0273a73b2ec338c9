"""``underway eval``: how well a tenant's agents did; ``underway drift``: whether they behave
now as they did before. Both computed from the journal (:mod:`underway.ops.evaluation`), each
saying what it read; each read is written to the access log as one of run ``*``."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Annotated

import typer

from ..labels import parse_labels
from ..ops.evaluation import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_SAMPLES,
    DEFAULT_THRESHOLDS,
    TAINT_RULES,
    drift_notice,
    drift_text,
    eval_html,
    eval_text,
    evaluate,
    measure_drift,
)
from ..store.access import ALL_RUNS, DEFAULT_PURPOSE
from ._common import (
    ConfigOption,
    DbOption,
    LabelFilterOption,
    Problem,
    PurposeOption,
    ReaderOption,
    TenantOption,
    handle_check_errors,
    handle_errors,
    open_store,
    parse_time,
    read_config,
    record_read,
)

eval_app = typer.Typer(add_completion=False)
drift_app = typer.Typer(add_completion=False)

DRIFTED = 1
"""Exit status of ``underway drift --fail-on-drift`` when a metric drifted."""

FlowOption = Annotated[str | None, typer.Option(
    "--flow", help="Only runs of this flow.", show_default=False)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}


def parse_duration(text: str, option: str) -> float:
    """Seconds from a duration like ``30d``, ``12h``, ``90m``, ``45s`` or ``2w``."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if found is None or float(found.group(1)) <= 0:
        raise Problem(f"{option} {text!r} is not a duration: give a positive number and a "
                      "unit, s, m, h, d or w (30d, 12h, 90m)")
    return float(found.group(1)) * _UNITS[found.group(2)]


def parse_thresholds(given: list[str]) -> dict[str, float]:
    """``NAME=VALUE`` pairs of ``--threshold``, checked against the metrics' names."""
    out: dict[str, float] = {}
    for item in given:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in DEFAULT_THRESHOLDS:
            raise Problem(f"--threshold {item!r}: give NAME=VALUE with NAME one of "
                          f"{', '.join(DEFAULT_THRESHOLDS)}")
        try:
            out[name] = float(value)
        except ValueError:
            raise Problem(f"--threshold {item!r}: {value!r} is not a number") from None
    return out


@eval_app.command("eval")
@handle_errors
def eval_command(
    ctx: typer.Context,
    flow: FlowOption = None,
    tenant: TenantOption = "default",
    since: Annotated[str | None, typer.Option(
        "--since", help="Only runs created at or after this time: ISO 8601 (UTC unless it "
        "has an offset) or epoch seconds. Default: the first run.",
        show_default=False)] = None,
    until: Annotated[str | None, typer.Option(
        "--until", help="Only runs created before this time, each as it stood then (what "
        "they journaled later is not counted). Default: now.", show_default=False)] = None,
    as_json: JsonOption = False,
    html: Annotated[Path | None, typer.Option(
        "--html", help="Also write the report as one self-contained HTML file (charts as "
        "inline SVG) to this path.", show_default=False, dir_okay=False)] = None,
    taint_rule: Annotated[list[str] | None, typer.Option(
        "--taint-rule", help="A policy rule whose approval holds count as taint holds "
        f"(repeat for several; default: {', '.join(sorted(TAINT_RULES))}).",
        show_default=False)] = None,
    group_by: Annotated[str | None, typer.Option(
        "--group-by", help="Also give the figures per value of a label, as label:NAME "
        "(label:sku).", show_default=False)] = None,
    label: LabelFilterOption = None,
    purpose: PurposeOption = DEFAULT_PURPOSE,
    by: ReaderOption = None,
    db: DbOption = None,
) -> None:
    """How well the tenant's agents did, from their journals: runs started, completed,
    failed, dead and cancelled; completion rate; time to resolution; how often a person
    stepped in and who decided; unsafe actions stopped and any that ran; duplicate
    effects; recovery after crashes; cost per completed run; per flow, tool and model.

    The runs are those created in the window, each as it stood at the window's end. It
    reads a few kinds of event of those runs, never their conversations or states, and
    says what it read."""
    start = parse_time(since, "--since")
    end = parse_time(until, "--until")
    key = None
    if group_by is not None:
        kind, sep, key = group_by.partition(":")
        if kind != "label" or not sep:
            raise Problem(f"--group-by {group_by!r}: give label:NAME, as label:sku")
    wanted = parse_labels(label or (), field="--label")
    with open_store(ctx, db) as store:
        found = evaluate(store, tenant_id=tenant, flow=flow, since=start, until=end,
                         taint_rules=taint_rule or TAINT_RULES, group_by=key,
                         labels=wanted)
        record_read(store, "eval", tenant, [ALL_RUNS], purpose=purpose, by=by)
    if html is not None:
        try:
            html.write_text(eval_html(found), encoding="utf-8")
        except OSError as exc:
            raise Problem(f"--html {html}: cannot write the report: {exc.strerror}") from None
    if as_json:
        typer.echo(json.dumps(found.to_json(), sort_keys=True))
    else:
        typer.echo(eval_text(found))
        if html is not None:
            typer.echo(f"\nreport written to {html}")


@drift_app.command("drift")
@handle_check_errors
def drift_command(
    ctx: typer.Context,
    flow: FlowOption = None,
    tenant: TenantOption = "default",
    baseline: Annotated[str, typer.Option(
        "--baseline", help="How long the baseline before the window lasts (s, m, h, d, "
        "w).")] = "30d",
    window: Annotated[str, typer.Option(
        "--window", help="How long the recent window lasts, ending at --until.")] = "1d",
    until: Annotated[str | None, typer.Option(
        "--until", help="Where the window ends: ISO 8601 or epoch seconds. Default: now.",
        show_default=False)] = None,
    threshold: Annotated[list[str] | None, typer.Option(
        "--threshold", help="NAME=VALUE: how far a metric must move to drift (repeat for "
        "several). Defaults: " + ", ".join(f"{k}={v:g}" for k, v in
                                           DEFAULT_THRESHOLDS.items()) + ".",
        show_default=False)] = None,
    min_samples: Annotated[int, typer.Option(
        "--min-samples", min=1, help="The fewest calls, decisions, choices or tasks each "
        "period needs for a metric to be judged.")] = DEFAULT_MIN_SAMPLES,
    alpha: Annotated[float, typer.Option(
        "--alpha", help="A move counts when a test of no change gives a p-value under "
        "this.")] = DEFAULT_ALPHA,
    fail_on_drift: Annotated[bool, typer.Option(
        "--fail-on-drift", help=f"Exit with status {DRIFTED} when a metric drifted.")]
    = False,
    notify: Annotated[bool, typer.Option(
        "--notify", help="When a metric drifted, send a notice through the [notifier] of "
        "the config file (webhook, e-mail).")] = False,
    config_path: ConfigOption = None,
    as_json: JsonOption = False,
    purpose: PurposeOption = DEFAULT_PURPOSE,
    by: ReaderOption = None,
    db: DbOption = None,
) -> None:
    """Whether the agents behave now as before: a recent window against a baseline, from
    their journals — tool error and timeout rates, schema failures, policy denials and
    approvals, the model's choice of tools, tokens and cost per completed run.

    A metric drifts when it moves past its threshold and the move is unlikely to be noise
    (enough samples in both periods, a test's p-value under --alpha)."""
    end = parse_time(until, "--until")
    limits = parse_thresholds(threshold or [])
    config = read_config(config_path, "drift") if notify or config_path else None
    notifier = config.make_notifier() if config is not None and notify else None
    if notify and notifier is None:
        raise Problem("--notify needs a [notifier] in the config file (a webhook or SMTP; "
                      "docs/configuration.md), and there is none")
    with open_store(ctx, db, config=config) as store:
        found = measure_drift(
            store, until=time.time() if end is None else end, tenant_id=tenant, flow=flow,
            window=parse_duration(window, "--window"),
            baseline=parse_duration(baseline, "--baseline"), thresholds=limits,
            min_samples=min_samples, alpha=alpha,
        )
        record_read(store, "drift", tenant, [ALL_RUNS], purpose=purpose, by=by)
    if as_json:
        typer.echo(json.dumps(found.to_json(), sort_keys=True))
    else:
        typer.echo(drift_text(found))
    if notifier is not None and found.drifted:
        asyncio.run(notifier.notify(drift_notice(found)))
        moved = ", ".join(m.label for m in found.drifted)
        typer.echo(f"underway drift: notice sent (drifted: {moved})", err=True)
    if fail_on_drift and found.drifted:
        raise typer.Exit(DRIFTED)
