"""``underway replay``: a historical run — or every run of a flow since a time — executed
again against new code, a new model or a new policy, without side effects, and its
decisions set beside the original's (see :mod:`underway.ops.replay`, docs/evaluation.md)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from typing import Annotated, Any, cast

import typer

from ..client import Client
from ..effects import Model
from ..guard.policy import Policy, load_policy
from ..ops.replay import (
    CHANGES,
    BatchEntry,
    OnDivergence,
    ReplayResult,
    model_from_spec,
    replay_run,
    replay_runs,
)
from ..ops.replay import rows as side_by_side
from ..redaction import Redactor
from ..store.access import DEFAULT_PURPOSE
from ._common import (
    ConfigOption,
    DbOption,
    KeyringOption,
    Problem,
    PurposeOption,
    ReaderOption,
    RevealOption,
    TenantOption,
    app_code,
    find_run,
    handle_check_errors,
    open_store,
    parse_time,
    read_config,
    record_read,
)

app = typer.Typer(add_completion=False)

CHANGED = 1
"""Exit status with ``--fail-on-change`` when a replay decided differently."""


@app.command("replay")
@handle_check_errors
def replay(
    ctx: typer.Context,
    run: Annotated[
        str | None,
        typer.Argument(help="The run to replay (its id or a unique prefix); or give --flow "
                       "and --since to replay many.", show_default=False),
    ] = None,
    app_spec: Annotated[
        str | None,
        typer.Option("--app", help="The new code, as module:attribute (as for `underway "
                     "worker`). Default: worker.app of the config file.", show_default=False),
    ] = None,
    model_spec: Annotated[
        str | None,
        typer.Option("--model", help="Ask this model instead of serving the recorded "
                     "responses: script:FILE.json, openai:<model>, anthropic:<model>, "
                     "openai-compatible:<model>@<url> or module:attribute.",
                     show_default=False),
    ] = None,
    policy_file: Annotated[
        str | None,
        typer.Option("--policy", help="Decide every call by this policy file instead of the "
                     "code's policy and the config file's policy file.", show_default=False),
    ] = None,
    on_divergence: Annotated[
        str,
        typer.Option("--on-divergence", help="At a call the original did not make: stop "
                     "there, or stub it (the original's result of the same tool, else a "
                     "NoRecordedResult failure)."),
    ] = "stop",
    environment: Annotated[
        str | None,
        typer.Option("--environment", help="The environment policies saw when the original "
                     "ran (default: the one each run's journal records, else "
                     "worker.environment of the config file, else dev).",
                     show_default=False),
    ] = None,
    flow: Annotated[
        str | None, typer.Option("--flow", help="Replay the runs of this flow (with --since).",
                                 show_default=False),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="With --flow: runs created at or after this time (ISO "
                     "8601 or epoch seconds).", show_default=False),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="With --flow: runs created before this time.",
                     show_default=False),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="With --flow: at most this "
                                       "many runs, newest first.")] = 100,
    fail_on_change: Annotated[
        bool, typer.Option("--fail-on-change", help="Exit with status 1 when any replay "
                           "decided differently.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    tenant: TenantOption = "default",
    purpose: PurposeOption = DEFAULT_PURPOSE,
    reveal: RevealOption = False,
    by: ReaderOption = None,
    keyring: KeyringOption = None,
    config_file: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Execute a historical run again against new code (--app), a new model (--model) or a
    new policy (--policy), without side effects, and show its decisions beside the
    original's: tool choices, arguments, policy outcomes, approvals needed, how it ended,
    money moved, model cost.

    The replay decides as the worker did: it reads the config file's policy file, budgets,
    environment, secrets bindings and approvals settings, as the worker does (--policy and
    --environment override them). The replay runs on its own in-memory journal; nothing is
    written to the original run.
    No tool runs: each call passes the guard and is answered with the original's recorded
    result of the same call (tool and arguments, in call order). Model calls get the
    recorded responses unless --model is given. Signals, answers and timers are given as
    the original got them, in the journal's order, and approvals decided as the
    original's were (one the original never needed is assumed granted, and said so).

    With --flow and --since, replays every run of the flow created since then and prints
    how many would have decided differently, and how. Reads of the runs' data are written
    to the access log; fields tools declare sensitive show as [redacted] unless --reveal.
    """
    if on_divergence not in ("stop", "stub"):
        raise Problem(f"--on-divergence must be stop or stub, not {on_divergence!r}")
    if (run is None) == (flow is None):
        raise Problem("give a RUN to replay, or --flow F --since TIME to replay many")
    if flow is not None and since is None:
        raise Problem("--flow needs --since: replay the runs created since when?")
    config = read_config(config_file, "replay")
    spec = app_spec or config.worker.app
    if spec is None:
        raise Problem("no app given: pass --app module:attribute (the code to replay "
                      "against) or set worker.app in the config file")
    flows, tools = app_code(spec, config)
    policy: Policy | None = load_policy(policy_file) if policy_file else None
    model: Model | None = model_from_spec(model_spec) if model_spec else None
    # The worker's own guard: [policy], [budgets], environment, [secrets], [approvals].
    guard = config.make_guard_options(environment=environment, notify=False)
    if config.source is None and environment is None:
        typer.echo("underway replay: no config file, so the replay decides as a worker "
                   "without one would (no policy file; each run in the environment its "
                   f"journal records, else {guard.environment}); pass --config with your "
                   "workers' file", err=True)
    mode = cast(OnDivergence, on_divergence)
    with open_store(ctx, db, config=config, keyring=keyring, need_keys=True) as store:
        if run is not None:
            run_id = find_run(Client(store), tenant, run).run_id
            record_read(store, "replay", tenant, [run_id], purpose=purpose, by=by,
                        revealed=reveal)
            result = asyncio.run(replay_run(
                store, run_id, flows=flows, tools=tools, policy=policy, model=model,
                on_divergence=mode, tenant_id=tenant, guard=guard, environment=environment))
            _one(result, reveal=reveal, as_json=as_json)
            changed = result.changed
        else:
            assert flow is not None
            entries = asyncio.run(replay_runs(
                store, flow=flow, since=parse_time(since, "--since") or 0.0,
                until=parse_time(until, "--until"), limit=limit, flows=flows, tools=tools,
                policy=policy, model=model, on_divergence=mode, tenant_id=tenant,
                guard=guard, environment=environment))
            if entries:
                record_read(store, "replay", tenant, [e.run_id for e in entries],
                            purpose=purpose, by=by, revealed=reveal)
            _many(entries, flow, tenant, reveal=reveal, as_json=as_json)
            changed = any(e.result is not None and e.result.changed for e in entries)
    if fail_on_change and changed:
        raise typer.Exit(CHANGED)


def _hider(result: ReplayResult, reveal: bool) -> Redactor:
    return Redactor(reveal=reveal).learn(
        [r.event for r in result.original_events] + [r.event for r in result.replay_events])


def _one(result: ReplayResult, *, reveal: bool, as_json: bool) -> None:
    hide = _hider(result, reveal)
    table = side_by_side(result.original, result.replay, hide.json, result.stopped)
    if as_json:
        typer.echo(json.dumps(_summary(result, hide) | {"rows": [
            {"label": r.label, "original": r.original, "replay": r.replay,
             "changed": r.changed} for r in table]}, indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table

    view = Table(box=None, pad_edge=False, show_edge=False, show_lines=True)
    for header in ("#", "ORIGINAL", "REPLAY", ""):
        view.add_column(header, overflow="fold")
    for r in table:
        view.add_row(r.label, r.original, r.replay, "≠" if r.changed else "")
    typer.echo(f"replay of run {result.run_id} (flow {result.flow}):")
    Console(width=None if sys.stdout.isatty() else 160, highlight=False).print(view)
    for line in _notes(result, hide):
        typer.echo(line)


def _notes(result: ReplayResult, hide: Redactor) -> list[str]:
    out = []
    if result.stopped is not None:
        where = "stopped" if result.stopped.kind != "end" else "ended"
        out.append(f"{where} in step {result.stopped.step or '-'}: "
                   f"{hide.text(result.stopped.what)}"
                   + (f" ({hide.text(result.stopped.detail)})" if result.stopped.detail
                      else ""))
    out += [f"stubbed: {hide.text(d.what)}" + (f" ({hide.text(d.detail)})" if d.detail else "")
            for d in result.divergences]
    out += [f"assumed: {a}" for a in result.assumed]
    if result.changes:
        out.append("changed: " + "; ".join(hide.text(str(c)) for c in result.changes))
    else:
        out.append("no decision changed")
    return out


def _summary(result: ReplayResult, hide: Redactor) -> dict[str, Any]:
    return {
        "run_id": result.run_id, "flow": result.flow, "changed": result.changed,
        "changes": [{"kind": c.kind, "text": hide.text(str(c))} for c in result.changes],
        "stopped": None if result.stopped is None else {
            "kind": result.stopped.kind, "step": result.stopped.step,
            "what": hide.text(result.stopped.what),
            "detail": hide.text(result.stopped.detail)},
        "stubbed": [{"kind": d.kind, "step": d.step, "what": hide.text(d.what),
                     "detail": hide.text(d.detail)} for d in result.divergences],
        "assumed": list(result.assumed),
        "original": {"status": result.original.status, "money": result.original.money,
                     "cost_usd": result.original.cost_usd,
                     "approvals": result.original.approvals},
        "replay": {"status": result.replay.status, "money": result.replay.money,
                   "cost_usd": result.replay.cost_usd, "approvals": result.replay.approvals},
    }


def _many(entries: list[BatchEntry], flow: str, tenant: str, *, reveal: bool,
          as_json: bool) -> None:
    done = [e for e in entries if e.result is not None]
    changed = [e for e in done if e.result is not None and e.result.changed]
    kinds: Counter[str] = Counter()
    for e in changed:
        assert e.result is not None
        kinds.update({c.kind for c in e.result.changes})
    if as_json:
        typer.echo(json.dumps({
            "flow": flow, "tenant": tenant, "replayed": len(done), "changed": len(changed),
            "by_change": {CHANGES[k]: n for k, n in kinds.most_common()},
            "runs": [_summary(e.result, _hider(e.result, reveal)) for e in done
                     if e.result is not None],
            "errors": {e.run_id: e.error for e in entries if e.error is not None},
        }, indent=2, ensure_ascii=False))
        return
    typer.echo(f"replayed {len(done)} run{'s' if len(done) != 1 else ''} of flow {flow!r} "
               f"(tenant {tenant!r}): {len(changed)} would have decided differently")
    for kind, n in kinds.most_common():
        typer.echo(f"  {n} {CHANGES[kind]}")
    for e in changed:
        assert e.result is not None
        hide = _hider(e.result, reveal)
        typer.echo(f"{e.run_id}  " + "; ".join(hide.text(str(c)) for c in e.result.changes))
    for e in entries:
        if e.error is not None:
            typer.echo(f"{e.run_id}  not replayed: {e.error}", err=True)
