"""Budgets on the call path: a call over a budget stopped, the tenant's hold of a call
settled once its outcome commits, a model call's quote, and route budgets."""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import TYPE_CHECKING, NoReturn

from .. import events as ev
from ..effects import Model, ModelQuote
from ..events import JSON
from ..guard.budgets import Exceeded, Usage, route_breach
from ..guard.intent import CallIntent
from ..journal.state import REFUSAL_ERRORS, shadow_result
from ..lost_track import lost_track
from ..models.routing import ModelRouter
from ._stops import Escalate, Stop

if TYPE_CHECKING:
    from ..guard.budgets import Budget
    from ._activation import Activation

log = logging.getLogger("underway.engine")

_NEVER_RAN = frozenset({*REFUSAL_ERRORS.values(), "SchemaValidationFailed", "CircuitOpen"})
"""Error types of a call that failed before its tool ran."""


def over_budget(
    act: Activation, step: str, budget: Budget, exceeded: Exceeded, tool: str | None,
) -> NoReturn:
    """Journal that a call would cross ``budget`` and stop: escalate or fail the run, as
    the budget's ``on_exceed`` says."""
    action = budget.on_exceed
    act.buffer(ev.BudgetExceeded(
        metric=exceeded.metric, limit=float(exceeded.limit), used=float(exceeded.used),
        scope=exceeded.scope, action=action, tool=tool, reason=exceeded.reason,
    ))
    if exceeded.reason is not None:
        reason = (f"{exceeded.scope} budget for {exceeded.metric} (limit "
                  f"{exceeded.limit:g}) refuses a call it cannot price: {exceeded.reason}")
    else:
        reason = (f"{exceeded.scope} budget for {exceeded.metric} would be exceeded "
                  f"(limit {exceeded.limit:g}, would reach {exceeded.used:g})")
    reason += f" by a call of {tool!r}" if tool else ""
    if action == "fail":
        raise Stop(ev.RunFailed(reason=reason, error_type="BudgetExceeded", step=step))
    raise Escalate(reason + "; raise the budget and resolve with retry, or cancel",
                   None, tool, None, cause="budget")


def settle_hold(act: Activation, call: CallIntent) -> None:
    """Once this attempt's events commit, settle the call's hold on the tenant's budget by
    what the journal says. It is released when the call did not take effect (refused,
    held for an approval, shadowed, failed before it ran). It becomes one tool call when
    the tool ran and failed. It stays as reserved when the call succeeded or its outcome
    is unknown; a crash before the commit keeps it too."""
    rec = act.state.call(call.index)
    if rec is None or rec.key != call.key or rec.maybe_happened:
        return
    spent: Usage | None
    if rec.status == "succeeded":
        if rec.result != shadow_result(call.tool.name):
            return
        spent = None
    elif rec.status == "failed" and rec.error_type not in _NEVER_RAN:
        spent = Usage(tool_calls=1)
    elif rec.status in ("failed", "awaiting", "retry"):
        spent = None
    else:
        return
    settle_later(act, call.key, spent)


def in_flight(act: Activation) -> Usage:
    """What the calls admitted in this activation and not yet settled may still spend.

    A call leaves once the journal folds an outcome for it (any status but ``started``);
    what it spent is then in the run's usage."""
    total = Usage()
    for key, (index, usage) in list(act.in_flight.items()):
        rec = act.state.call(index)
        if rec is None:
            total = total.add(usage)
        elif rec.key == key and rec.status == "started":
            # Its intent is folded, and the fold counted the call itself.
            total = total.add(dataclasses.replace(usage, tool_calls=0))
        else:
            del act.in_flight[key]
    return total


def admitted(act: Activation, key: str, index: int, usage: Usage) -> None:
    """Call ``key`` passed the run's budget: count it in flight until it settles."""
    act.in_flight[key] = (index, usage)


async def settled_first(act: Activation) -> None:
    """Commit what the step buffered when holds wait on it, before reserving again.

    A call of this step that did not take effect releases its hold only once that is
    durable; committing it first lets the next call use the room it gave back.
    """
    if act.after_commit and act.services.guard.budget_of_tenant(act.state.tenant_id):
        await act.commit()


def unanswered(act: Activation, key: str, exc: BaseException) -> None:
    """A model call ``key`` ended without a response (``exc``). Its hold is released when
    the request never got an answer computed for it; a request that left and lost its
    answer (a read timeout, a cut connection) may have been billed, so its hold stays as
    reserved, as an unknown outcome's does."""
    if not lost_track(exc):
        settle_later(act, key, None)


def settle_later(act: Activation, key: str, spent: Usage | None) -> None:
    """Settle call ``key``'s hold to ``spent`` (None: release it) once the activation's
    buffered events have committed."""
    act.after_commit.append(functools.partial(_settle, act, key, spent))


async def _settle(act: Activation, key: str, spent: Usage | None) -> None:
    """Settle a hold; a failure leaves it as reserved (the limit still holds)."""
    svc = act.services
    try:
        await svc.guard.settle(svc.store, act.state.tenant_id, key, spent)
    except Exception:
        log.warning("could not settle the budget hold of call %s; it stays reserved", key,
                    exc_info=True)


def model_pending(model: Model, request: JSON) -> tuple[Usage, dict[str, str]]:
    """What a model call may spend, from the model's quote, and why each metric it cannot
    bound has no bound (``tokens`` and ``cost_usd``; empty: both are bounded)."""
    quote_of = getattr(model, "quote", None)
    quote: ModelQuote | None = None if quote_of is None else quote_of(request)
    if quote is None:
        name = getattr(model, "name", type(model).__name__)
        why = f"model {name!r} cannot quote a request, so its tokens and cost have no bound"
        return Usage(model_calls=1), {"tokens": why, "cost_usd": why}
    pending = Usage(model_calls=1, tokens_in=quote.tokens or 0,
                    cost_usd=quote.cost_usd or 0.0)
    why = quote.reason or "the model gave no bound on its tokens and cost"
    unbounded = {m: why for m, v in (("tokens", quote.tokens), ("cost_usd", quote.cost_usd))
                 if v is None}
    return pending, unbounded


def check_route_budget(act: Activation, model: Model, request: JSON) -> None:
    """A :class:`~underway.models.ModelRouter` with route budgets: refuse a call whose
    route has spent its budget in this run (usage folded from the journal)."""
    if not isinstance(model, ModelRouter) or not model.budgets:
        return
    found = route_breach(model, request, act.state)
    if found is not None:
        route, b = found
        act.buffer(ev.BudgetExceeded(
            metric=f"route.{route}.{b.limit}", limit=float(b.allowed), used=float(b.used),
            scope="run", action="escalate",
        ))
        raise Escalate(
            f"model route {route!r} has spent its budget ({b}); raise the RouteBudget "
            "and resolve with retry, or cancel", None, None, None, cause="budget",
        )
