"""How a tool call that did not simply succeed is read: an outcome lost (the effect may
have happened, :mod:`underway.lost_track`), its reconcile hook asked, a hook that did not
answer (a person settles the call), credentials refused (refresh and try once more, then a
person), and the name an allow-list must hold."""

from __future__ import annotations

import inspect
from typing import NoReturn

from .. import events as ev
from ..effects import COMPENSATE_SUFFIX, CallInfo, Reconciled, Tool, fence_of
from ..egress import Egress
from ..errors import ConfigurationError, ToolCallError
from ..events import canonical_json
from ..guard.intent import CallIntent
from ..hooks import HookFailed, call_hook
from ..lost_track import lost_track
from ..secrets import refresh, resolve
from ._activation import Activation
from ._stops import DeadLetter, Escalate, Suspend

LOST_TRACK = frozenset({"ToolTimedOut", "OutcomeUnknown"})
"""Error types of a mutating call whose outcome is unknown (not a failure)."""

__all__ = ["LOST_TRACK", "allowed_name", "ask_reconcile", "credentials_retry", "fetch_secrets",
           "hook_failed", "lost_track"]


async def ask_reconcile(act: Activation, call: CallIntent, step: str) -> Reconciled:
    """Ask the reconcile hook of ``call``'s tool what happened to the call, with the
    arguments the hook takes, through :func:`~underway.hooks.call_hook`: within the tool's
    ``hook_timeout``, answering a :class:`Reconciled`. A hook that raises, answers
    something else or not in time escalates the call (:func:`hook_failed`).

    The query carries the fence of the reconcile it makes: a fence-checking system
    refuses the attempt in doubt should it arrive after the query.
    """
    t, s = call.tool, act.state
    fn = t.reconcile
    if fn is None:
        raise ConfigurationError(f"tool {t.name!r} has no reconcile hook")
    query = CallInfo(call.key, s.tenant_id, s.run_id, step, call.index,
                     fence_of(act.lease.token, s.seq + 1), s.principal, tuple(s.roles),
                     egress=None if t.hosts is None else Egress(t.name, t.hosts))
    args = (call.key, query) if len(inspect.signature(fn).parameters) >= 2 else (call.key,)
    try:
        found: Reconciled = await call_hook("reconcile", f"tool {t.name!r}", fn, *args,
                                            timeout=t.hook_timeout, answer=_reconciled)
    except HookFailed as failed:
        hook_failed(t, call.key, call.index, failed)
    return found


def _reconciled(out: object) -> str | None:
    """What is wrong with a reconcile hook's answer ``out`` (None: nothing)."""
    if not isinstance(out, Reconciled):
        return f"answered {_shown(out)}, not a Reconciled"
    if out.outcome not in ("happened", "not_happened", "unknown"):
        return f"answered the outcome {out.outcome!r}, not happened, not_happened or unknown"
    try:
        canonical_json(out.result)
    except (TypeError, ValueError) as exc:
        return f"answered a result that is not JSON ({exc})"
    return None


def _shown(out: object) -> str:
    return "nothing (None)" if out is None else f"a {type(out).__name__}"


def hook_failed(t: Tool, key: str, index: int, failed: HookFailed) -> NoReturn:
    """A hook of ``t`` did not answer about call ``key``: the call's outcome stays
    unknown, and a person settles it (never a failure the step could retry under new
    keys). The escalation names the hook and why."""
    raise Escalate(
        f"outcome of tool {t.name!r} (key {key}) is unknown: {failed.message}; confirm "
        "whether it happened, then resolve", key, t.name, index, cause="unknown_outcome",
        hook=failed.hook,
    )


async def credentials_retry(
    act: Activation, t: Tool, key: str, index: int, exc: ToolCallError
) -> NoReturn:
    """The service refused the credentials of ``t``: ask the secret provider to refresh
    them and try the call once more on a durable timer (a refused request did nothing, so
    trying again is safe whatever the tool); refused again after that, a person decides.
    Never a quiet failure."""
    s, svc = act.state, act.services
    rec = s.call(index)
    attempts = rec.attempts if rec is not None else 1
    if attempts >= max(2, t.retry.max_attempts if t.retry is not None else 2):
        raise Escalate(
            f"the service refused the credentials of tool {t.name!r} (secrets "
            f"{', '.join(t.secrets)}) again after they were refreshed: {exc.message}; "
            "renew them, then resolve with retry", key, t.name, index, cause="credentials",
        )
    if svc.retry_budget is not None and s.retries >= svc.retry_budget:
        raise DeadLetter(
            f"retry budget of {svc.retry_budget} retries per run is exhausted; last: "
            f"{t.name} failed with {exc.error_type}: {exc.message}", "RetryBudgetExhausted",
        )
    try:
        await call_hook("refresh", "the secret provider", refresh, svc.guard.secrets,
                        t.secrets, timeout=t.hook_timeout)
    except HookFailed as failed:
        raise Escalate(
            f"the service refused the credentials of tool {t.name!r} and the secret "
            f"provider could not refresh them: {failed.message}; renew them, then resolve "
            "with retry", key, t.name, index, cause="credentials", hook=failed.hook,
        ) from None
    timer = f"retry-{s.seq + 1}"
    act.buffer(ev.RetryScheduled(key=key, tool=t.name, index=index, attempt=attempts + 1,
                                 timer_id=timer, delay_s=0.0))
    act.buffer(ev.TimerSet(timer_id=timer, wake_at=svc.clock.now()))
    raise Suspend


async def fetch_secrets(act: Activation, call: CallIntent) -> dict[str, str]:
    """The secrets of ``call``'s tool from the provider, a hook bounded like any other:
    one that raises or does not answer fails the call before it runs (journaled: nothing
    was sent, so the step may try again). A missing secret stays a configuration error."""
    t = call.tool
    try:
        found: dict[str, str] = await call_hook(
            "get", "the secret provider", resolve, act.services.guard.secrets, t.secrets,
            timeout=t.hook_timeout)
    except HookFailed as failed:
        if isinstance(failed.__cause__, ConfigurationError):
            raise failed.__cause__ from None
        act.buffer(ev.ToolFailed(
            key=call.key, tool=t.name, index=call.index, args_hash=call.args_hash,
            error_type="SecretUnavailable", message=failed.message, retryable=True,
        ))
        raise ToolCallError(t.name, "SecretUnavailable", failed.message,
                            retryable=True) from None
    return found


def allowed_name(name: str) -> str:
    """The name an allow-list must hold for a call of ``name``: undoing an allowed tool
    (``<tool>.compensate``) is allowed with the tool."""
    return name.removesuffix(COMPENSATE_SUFFIX)
