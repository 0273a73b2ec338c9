"""``underway policy``: validate a policy file, and show what it decides for one call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from ..effects import Tool
from ..events import JSON
from ..guard import decide_with_money
from ..guard.policy import Amount, PolicyContext, load_policy
from ..guard.policy.context import to_decimal
from ..money import Money, Unreadable, read_money
from ..store.base import ConsentRecord
from ._common import Problem, app_code, handle_errors, parse_json

app = typer.Typer(help="Validate policy files and explain their decisions.",
                  no_args_is_help=True)

FileArg = Annotated[
    Path, typer.Argument(help="A policy file: .toml, .yaml or .yml.", show_default=False)
]


@app.command("check")
@handle_errors
def check(path: FileArg) -> None:
    """Load a policy file and report its version, rules and digest (exit 2 if invalid)."""
    policy = load_policy(path)
    typer.echo(
        f"{path}: ok: version {policy.version!r}, {len(policy.rules)} rules, "
        f"default {policy.default}"
        + (", unlisted mutating tools denied" if policy.deny_unlisted_mutating else "")
        + f", digest {policy.digest}"
    )


def _amount(text: str | None) -> Amount | None:
    if text is None:
        return None
    parts = text.split()
    value = to_decimal(parts[0]) if len(parts) == 2 else None
    if value is None:
        raise Problem(f"--amount takes 'VALUE CURRENCY' such as '10000 INR', not {text!r}")
    return Amount(value, parts[1])


def _app_tool(spec: str, name: str) -> Tool:
    flows, tools = app_code(spec)
    known = {t.name: t for f in flows for t in f.declared_tools} | {t.name: t for t in tools}
    if name not in known:
        raise Problem(f"--app {spec!r} declares no tool {name!r}; it declares "
                      f"{', '.join(sorted(known)) or 'none'}")
    return known[name]


def _money(
    tool: str, args: dict[str, JSON], *, app: str | None, amount_arg: str,
    currency: str | None, stated: Amount | None,
) -> Money | Unreadable | None:
    """The money the call moves, read from ``args`` by the worker's own reader: through
    the tool's declaration (``--app``), or a declaration built from ``--amount-arg`` and
    ``--currency`` when the arguments carry an amount. ``--amount`` fills in for
    arguments that carry none, and must agree with arguments that do."""
    declared: Tool | None
    if app is not None:
        declared = _app_tool(app, tool)
        if declared.args_model is not None:
            try:
                declared.args_model.model_validate(args)
            except ValidationError as exc:
                raise Problem(f"--args do not match the schema of tool {tool!r}, so the "
                              f"worker would refuse the call before its policy: {exc}") from None
    else:
        # A throwaway declaration, never run, asks only whether --args carry an amount
        # (XXX is ISO 4217's "no currency").
        probe = read_money(Tool(tool, fn=print, amount=amount_arg, currency="XXX"), args)
        carries = not (isinstance(probe, Unreadable) and probe.field == amount_arg
                       and probe.value == "missing")
        declared = Tool(
            tool, fn=print, amount=amount_arg,
            currency=currency or (stated.currency if stated else "arg:currency"),
        ) if carries else None
    money = read_money(declared, args) if declared is not None else None
    if stated is None:
        return money
    if money is None:
        return Money(stated.currency, stated.value)
    if isinstance(money, Money) and (money.currency, money.amount) != (
        stated.currency, stated.value
    ):
        raise Problem(f"--amount says {stated.value} {stated.currency} but --args say "
                      f"{money.amount} {money.currency}; give one, or make them agree")
    return money


def _counters(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise Problem(f"--counter takes NAME=NUMBER such as run.tool_calls=3, not {item!r}")
    return out


@app.command("explain")
@handle_errors
def explain(
    path: FileArg,
    tool: Annotated[str, typer.Option("--tool", help="The tool called.", show_default=False)],
    args: Annotated[
        str | None, typer.Option("--args", help="The call's arguments as a JSON object.")
    ] = None,
    role: Annotated[
        list[str] | None, typer.Option("--role", help="A role of the caller (repeatable).")
    ] = None,
    env: Annotated[str, typer.Option("--env", help="The environment.")] = "prod",
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant.")] = "default",
    principal: Annotated[
        str | None, typer.Option("--principal", help="Whom the run acts for.")
    ] = None,
    flow: Annotated[str, typer.Option("--flow", help="The flow making the call.")] = "",
    mutating: Annotated[
        bool, typer.Option("--mutating/--read-only", help="Whether the tool changes anything.")
    ] = True,
    irreversible: Annotated[
        bool, typer.Option("--irreversible", help="The tool cannot be undone.")
    ] = False,
    label: Annotated[
        list[str] | None,
        typer.Option("--label", help="A label of the call's inputs, e.g. personal, untrusted "
                     "(repeatable)."),
    ] = None,
    permission: Annotated[
        list[str] | None,
        typer.Option("--permission", help="A permission the tool requires (repeatable)."),
    ] = None,
    amount: Annotated[
        str | None,
        typer.Option("--amount", help="Money the call moves, '10000 INR', for arguments "
                     "that do not carry it (it must agree with arguments that do)."),
    ] = None,
    app: Annotated[
        str | None,
        typer.Option("--app", help="module:attr of the flows and tools (as for `underway "
                     "worker`): the money is read through the tool's own declaration."),
    ] = None,
    amount_arg: Annotated[
        str, typer.Option("--amount-arg", help="Without --app: the argument holding the "
                          "amount (the tool's amount=).")
    ] = "amount",
    currency: Annotated[
        str | None,
        typer.Option("--currency", help="Without --app: the tool's currency=, a code (INR) "
                     "or arg:<path>; default arg:currency, or the currency of --amount."),
    ] = None,
    counter: Annotated[
        list[str] | None,
        typer.Option("--counter", help="A usage counter, NAME=NUMBER (repeatable)."),
    ] = None,
    subject: Annotated[
        str | None, typer.Option("--subject", help="The data subject the run is about.",
                                 show_default=False)
    ] = None,
    purpose: Annotated[str, typer.Option("--purpose", help="What the run is for.")]
    = "operations",
    consented: Annotated[
        list[str] | None,
        typer.Option("--consented", help="A purpose the subject consents to (repeatable; "
                     "others have no consent recorded)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision as JSON.")] = False,
) -> None:
    """Print what the policy decides for one call, and which rule decided it.

    The money the call moves is read from --args as the worker reads it: through the
    tool's declaration with --app; otherwise an `amount` argument (--amount-arg) in the
    currency given by a `currency` argument (--currency). An amount or currency that
    cannot be read is a deny, as in the worker.
    """
    policy = load_policy(path)
    parsed = parse_json(args, "--args")
    if parsed is None:
        parsed = {}
    if not isinstance(parsed, dict):
        raise Problem(f"--args must be a JSON object, not {args}")
    money = _money(tool, parsed, app=app, amount_arg=amount_arg, currency=currency,
                   stated=_amount(amount))
    ctx = PolicyContext(
        tenant_id=tenant, principal=principal, roles=frozenset(role or []), environment=env,
        flow=flow, tool=tool, mutating=mutating or irreversible, irreversible=irreversible,
        permissions=frozenset(permission or []), args=parsed, labels=frozenset(label or []),
        amount=None, counters=_counters(counter or []), subject=subject, purpose=purpose,
        consents={p: ConsentRecord(tenant, subject or "", p, "granted", None, "explain", 0.0)
                  for p in consented or []},
    )
    d = decide_with_money(policy, ctx, money)
    if as_json:
        typer.echo(json.dumps({
            "outcome": d.outcome, "rule_id": d.rule_id, "policy_version": d.policy_version,
            "reason": d.reason, "approver_role": d.approver_role, "expires_in": d.expires_in,
            "digest": policy.digest,
        }, indent=2))
        return
    if isinstance(money, Unreadable) and app is None:
        typer.echo("note: without --app the amount is read from --amount-arg in the currency "
                   "of --currency (default: a 'currency' argument); pass --app to read the "
                   "tool's own declaration, defaults included", err=True)
    rule = f"rule {d.rule_id!r}" if d.rule_id else "no rule"
    typer.echo(f"{d.outcome} ({rule}, policy {d.policy_version})")
    typer.echo(f"reason: {d.reason}")
    if d.outcome == "require_approval":
        typer.echo(f"approver: {d.approver_role or 'anyone allowed to approve'}, "
                   f"expires in {d.expires_in:g} s")
