"""How a tool call that did not simply succeed is read: an outcome lost (the effect may
have happened), credentials refused (refresh and try once more, then a person), and the
name an allow-list must hold."""

from __future__ import annotations

import sys
from typing import NoReturn

from .. import events as ev
from ..effects import COMPENSATE_SUFFIX, Tool
from ..errors import ToolCallError
from ..secrets import refresh
from ._activation import Activation
from ._stops import DeadLetter, Escalate, Suspend

LOST_TRACK = frozenset({"ToolTimedOut", "OutcomeUnknown"})
"""Error types of a mutating call whose outcome is unknown (not a failure)."""


def lost_track(exc: BaseException) -> bool:
    """True when ``exc`` means the request may have reached the outside world and its
    answer was lost: :class:`~underway.errors.OutcomeUnknown`, a connection reset or broken
    pipe, or an HTTP client's read/write error or read timeout (httpx)."""
    if getattr(exc, "outcome_unknown", False):
        return True
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return True
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.ReadError | httpx.WriteError
                                        | httpx.ReadTimeout | httpx.WriteTimeout
                                        | httpx.RemoteProtocolError):
        return True
    cause = exc.__cause__ or exc.__context__
    return cause is not None and cause is not exc and lost_track(cause)


def credentials_retry(
    act: Activation, t: Tool, key: str, index: int, exc: ToolCallError
) -> NoReturn:
    """The service refused the credentials of ``t``: ask the secret provider to refresh
    them and try the call once more on a durable timer (a refused request did nothing, so
    trying again is safe whatever the tool); refused again after that, a person decides.
    Never a quiet failure."""
    s, eng = act.state, act.engine
    rec = s.call(index)
    attempts = rec.attempts if rec is not None else 1
    if attempts >= max(2, t.retry.max_attempts if t.retry is not None else 2):
        raise Escalate(
            f"the service refused the credentials of tool {t.name!r} (secrets "
            f"{', '.join(t.secrets)}) again after they were refreshed: {exc.message}; "
            "renew them, then resolve with retry", key, t.name, index, cause="credentials",
        )
    if eng.retry_budget is not None and s.retries >= eng.retry_budget:
        raise DeadLetter(
            f"retry budget of {eng.retry_budget} retries per run is exhausted; last: "
            f"{t.name} failed with {exc.error_type}: {exc.message}", "RetryBudgetExhausted",
        )
    refresh(eng.guard.secrets, t.secrets)
    timer = f"retry-{s.seq + 1}"
    act.buffer(ev.RetryScheduled(key=key, tool=t.name, index=index, attempt=attempts + 1,
                                 timer_id=timer, delay_s=0.0))
    act.buffer(ev.TimerSet(timer_id=timer, wake_at=eng.clock.now()))
    raise Suspend


def allowed_name(name: str) -> str:
    """The name an allow-list must hold for a call of ``name``: undoing an allowed tool
    (``<tool>.compensate``) is allowed with the tool."""
    return name.removesuffix(COMPENSATE_SUFFIX)
