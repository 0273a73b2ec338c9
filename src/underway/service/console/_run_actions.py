"""The run page's operator actions — cancel, signal, resume, resolve — as forms posted with
the session's CSRF token. Each is the client call the API makes for it
(:mod:`underway.service._runs`), with the same checks, for a key that may steer runs
(operator, admin): the page hides the forms from other roles and the server refuses them
(403) whatever is posted. Done, each goes back to the run's page, which says what was
sent; the run acts on it at its next step boundary. Where runs settle only with signed
resolutions, the client refuses an unsigned resume or resolution
(:class:`~underway.errors.SignedResolutionRequired`): the page says so (409) and nothing is
sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal, cast

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import RedirectResponse, Response

from ...errors import ConfigurationError, InvalidInput, RunNotFound, SignedResolutionRequired
from ...inputs import parse_json
from ...store._offload import run_io
from ...store.base import FINAL, RunRecord
from .._auth import Principal, ServiceState
from .._inputs import CheckedRoute
from ._base import Console, Signed, check_form, not_found, render, require

router = APIRouter(include_in_schema=False, route_class=CheckedRoute)

NOTICES = {
    "cancel": "Cancel sent: the run stops at its next step boundary.",
    "signal": "Signal sent.",
    "signal-duplicate": "That signal id was delivered before: nothing was sent again.",
    "resume": "Resume sent (unsigned: a worker started with --signed-resolutions refuses it).",
    "resolve": "Resolution sent (unsigned: a worker started with --signed-resolutions "
               "refuses it).",
}
"""What the run page says after each action (``?done=``)."""

Csrf = Annotated[str, Form(max_length=200)]
RunId = Annotated[str, Path(min_length=1, max_length=200)]
Resolution = Literal["succeeded", "failed", "retry"]


class _Refused(Exception):
    """The action cannot be done to this run now: ``status`` and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@router.post("/runs/{run_id}/cancel")
async def cancel(request: Request, state: Console, session: Signed, run_id: RunId,
                 csrf: Csrf = "", reason: Annotated[str, Form(max_length=2000)] = "") -> Response:
    """Cancel the run."""
    def act(row: RunRecord, who: Principal) -> str:
        if row.status in FINAL:
            raise _Refused(409, f"run {run_id} is already {row.status}; nothing to cancel")
        state.client.cancel(run_id, by=who.actor, reason=reason, tenant_id=who.tenant_id)
        return "cancel"
    return await _do(request, state, session, run_id, csrf, act)


@router.post("/runs/{run_id}/signal")
async def signal(request: Request, state: Console, session: Signed, run_id: RunId,
                 csrf: Csrf = "", name: Annotated[str, Form(max_length=200)] = "",
                 payload: Annotated[str, Form(max_length=100_000)] = "",
                 signal_id: Annotated[str, Form(max_length=200)] = "") -> Response:
    """Deliver a signal with a JSON payload (once per signal id when one is given)."""
    try:
        value = parse_json("form.payload", payload) if payload.strip() else None
    except InvalidInput as exc:
        value, bad = None, str(exc)
    else:
        bad = ""

    def act(row: RunRecord, who: Principal) -> str:
        if not name.strip():
            raise _Refused(422, "name the signal to send")
        if bad:
            raise _Refused(422, bad)
        try:
            delivered = state.client.signal(run_id, name, value, tenant_id=who.tenant_id,
                                            signal_id=signal_id.strip() or None,
                                            sender=who.actor)
        except ConfigurationError as exc:
            raise _Refused(422, str(exc)) from None
        return "signal" if delivered else "signal-duplicate"
    return await _do(request, state, session, run_id, csrf, act)


@router.post("/runs/{run_id}/resume")
async def resume(request: Request, state: Console, session: Signed, run_id: RunId,
                 csrf: Csrf = "", step: Annotated[str, Form(max_length=200)] = "") -> Response:
    """Resume a dead run, at ``step`` or where it stopped (unsigned)."""
    def act(row: RunRecord, who: Principal) -> str:
        try:
            state.client.resume(run_id, by=who.actor, step=step.strip() or None,
                                tenant_id=who.tenant_id)
        except ConfigurationError as exc:
            raise _Refused(409 if row.status != "dead" else 422, str(exc)) from None
        return "resume"
    return await _do(request, state, session, run_id, csrf, act)


@router.post("/runs/{run_id}/resolve")
async def resolve(request: Request, state: Console, session: Signed, run_id: RunId,
                  csrf: Csrf = "", resolution: Annotated[str, Form(max_length=20)] = "",
                  result: Annotated[str, Form(max_length=100_000)] = "") -> Response:
    """Resolve an escalated run: the effect succeeded (with a JSON ``result``), failed, or
    may be retried (unsigned)."""
    def act(row: RunRecord, who: Principal) -> str:
        if resolution not in ("succeeded", "failed", "retry"):
            raise _Refused(422, "choose a resolution: succeeded, failed or retry")
        try:
            value = parse_json("form.result", result) if result.strip() else None
        except InvalidInput as exc:
            raise _Refused(422, str(exc)) from None
        try:
            state.client.resolve(run_id, resolution=cast(Resolution, resolution),
                                 by=who.actor, result=value, tenant_id=who.tenant_id)
        except ConfigurationError as exc:  # the run is not escalated
            raise _Refused(409, str(exc)) from None
        return "resolve"
    return await _do(request, state, session, run_id, csrf, act)


async def _do(request: Request, state: ServiceState, session: Signed, run_id: str,
              csrf: str, act: Callable[[RunRecord, Principal], str]) -> Response:
    """Check the form and the role, then ``act`` on the run (one trip to the store)."""
    check_form(request, session, csrf)
    require(session, "steer")
    who = session.principal

    def work() -> str | None:
        try:
            row = state.client.get_run(run_id, tenant_id=who.tenant_id)
        except RunNotFound:
            return None
        return act(row, who)

    try:
        done = await run_io(state.store, work)
    except _Refused as exc:
        return render(request, "error.html", {"title": "Not done", "reason": exc.reason},
                      session=session, status_code=exc.status)
    except SignedResolutionRequired as exc:
        return render(request, "error.html", {"title": "Not done", "reason": str(exc)},
                      session=session, status_code=409)
    if done is None:
        return not_found(request, session, "run")
    return RedirectResponse(f"/runs/{run_id}?done={done}", status_code=303)
