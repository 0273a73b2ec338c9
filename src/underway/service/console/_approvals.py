"""``/approvals``: what the tenant's runs wait for a person to decide, and decisions signed
in the browser.

The server never holds a private key and never signs. An approver's Ed25519 key is made in
their browser with WebCrypto, non-extractable, and kept in its IndexedDB
(``static/approvals.js``); its public half is registered by an admin like any other
(``/approvers`` here, ``POST /v1/approvers`` or ``underway approvers add``). The page
renders the request's fields as the journal has them; the browser builds the decision,
writes it as RFC 8785 (JCS) JSON (``static/jcs.js``), signs it and posts it here. There it
takes the API's one path (:func:`underway.service._approvals.deliver_decision`): checked
against what the run waits for, then delivered to the run, which verifies it again before
anything happens.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError

from ...client import PendingRequest, redact_request
from ...errors import RunNotFound
from ...events import JSON
from ...guard.approvals import SignedDecision
from ...labels import LabelValue
from ...ops.timeline import time_left
from ...store._offload import run_io
from ...store.access import DEFAULT_PURPOSE
from .._admin import NewApprover, add_approver
from .._approvals import deliver_decision
from .._auth import ServiceState
from .._inputs import CheckedRoute
from .._problems import ApiProblem
from ._base import (
    Console,
    Purpose,
    ReadAs,
    Reveal,
    Signed,
    check_form,
    not_found,
    read_as,
    render,
    require,
)
from ._labels import label_columns
from ._session import Forbidden, Session

router = APIRouter(include_in_schema=False, route_class=CheckedRoute)

RunId = Annotated[str, Path(min_length=1, max_length=500)]
INBOX = 200
"""At most this many requests on the inbox page, soonest expiry first."""
OPEN_ENDED = 86400.0
"""How long a decision on a request without an expiry stays valid (as the CLI signs it)."""
MAX_DECISION_BYTES = 256 * 1024


@router.get("/approvals")
async def inbox(request: Request, state: Console, session: Signed,
                purpose: Purpose = DEFAULT_PURPOSE, reveal: Reveal = False) -> HTMLResponse:
    """The runs that wait for a person: approvals, questions, escalations."""
    tenant = session.principal.tenant_id
    rd = read_as(state, session, purpose, reveal)
    found, labels = await run_io(state.store, _read_inbox, state, request, session, rd)
    now = state.client.clock.now()
    rows = [{"r": r, "left": time_left(r.expires_at, now), "never": math.isinf(r.expires_at),
             "action": _action(r)} for r in found]
    names, cells = label_columns(labels)
    return render(request, "approvals.html", {
        "nav": "approvals", "rows": rows, "tenant": tenant, "now": now,
        "groups": _groups(found),
        "can_decide": session.may("decide"), "is_admin": session.may("admin"),
        "suggested_id": suggested_id(session), "rd": rd, "label_names": names,
        "cells": cells,
    }, session=session)


@router.get("/approvals/{run_id}")
async def detail(request: Request, state: Console, session: Signed,
                 run_id: RunId, purpose: Purpose = DEFAULT_PURPOSE,
                 reveal: Reveal = False) -> HTMLResponse:
    """One run's request: the exact action, its arguments and their hash, evidence,
    risks, the policy rule, the role required, the time left; and, for an approver, the
    buttons that sign a decision in the browser. The fields the tool hides read
    ``[redacted]`` unless ``reveal`` (an approver may: it signs over the exact values)."""
    tenant = session.principal.tenant_id
    rd = read_as(state, session, purpose, reveal, deciding=True)
    try:
        row, pending = await run_io(state.store, _read_request, state, request, session,
                                    run_id, rd)
    except RunNotFound:
        return not_found(request, session, "run of that id")
    now = state.client.clock.now()
    context: dict[str, Any] = {
        "nav": "approvals", "run": row, "r": pending, "now": now, "tenant": tenant,
        "can_decide": session.may("decide"), "is_admin": session.may("admin"),
        "suggested_id": suggested_id(session), "rd": rd,
        "required_role": pending.required_role if pending is not None else None,
    }
    if pending is not None:
        context.update(
            left=time_left(pending.expires_at, now), action=_action(pending),
            args=_pretty(pending.args), evidence=_pretty(pending.evidence),
            held=held_arguments(pending.args, pending.evidence),
            context_text=_pretty(pending.context),
            expires=None if math.isinf(pending.expires_at) else pending.expires_at,
            signing=signing_fields(pending, tenant, now),
        )
    return render(request, "approval.html", context, session=session)


@router.get("/approvals/{run_id}/status")
async def status(state: Console, session: Signed, run_id: RunId) -> JSONResponse:
    """The run's status and the request it waits on, if any (what the page polls after
    a decision is sent: the run's row only, no data of the run)."""
    tenant = session.principal.tenant_id
    try:
        row = await run_io(state.store, lambda: state.client.get_run(run_id, tenant_id=tenant))
    except RunNotFound:
        return JSONResponse({"detail": "no run of that id in this tenant"}, status_code=404,
                            headers={"Cache-Control": "no-store"})
    return JSONResponse({"run_id": row.run_id, "status": row.status, "step": row.step},
                        headers={"Cache-Control": "no-store"})


@router.post("/approvals/{run_id}/decision")
async def decide(request: Request, state: Console, session: Signed,
                 run_id: RunId) -> JSONResponse:
    """A decision signed in the browser (JSON body, CSRF token in the ``X-CSRF-Token``
    header), for an approver key only: refused, with nothing stored, exactly as
    ``POST /v1/approvals/{run_id}/decision`` refuses it."""
    check_form(request, session, None)
    require(session, "decide")
    raw = await request.body()
    if len(raw) > MAX_DECISION_BYTES:
        return _refused(413, "the decision is too large")
    try:
        decision = SignedDecision.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                             for e in exc.errors())
        return _refused(422, f"not a signed decision: {problems}")
    try:
        accepted = await run_io(state.store, deliver_decision, state,
                                session.principal.tenant_id, run_id, decision)
    except RunNotFound:
        return _refused(404, "no run of that id in this tenant")
    except ApiProblem as exc:
        return _refused(exc.problem.status, exc.problem.detail)
    return JSONResponse(accepted.model_dump(mode="json"), status_code=202)


@router.get("/approvers/{approver_id}/status")
async def approver_status(state: Console, session: Signed,
                          approver_id: Annotated[str, Path(min_length=1, max_length=200)],
                          public_key: Annotated[str, Query(max_length=200)] = ""
                          ) -> JSONResponse:
    """Whether the key this browser holds for ``approver_id`` is the one registered (and
    with which roles): for an approver or admin session, to tell them what to do next."""
    if not (session.may("decide") or session.may("admin")):
        raise Forbidden(f"a {session.principal.role} key holds no approver's key")
    tenant = session.principal.tenant_id
    record = await run_io(state.store, state.store.get_approver, tenant, approver_id)
    if record is None:
        found = "unregistered"
    elif record.revoked_at is not None:
        found = "revoked"
    elif record.public_key != public_key.strip():
        found = "other_key"
    else:
        found = "registered"
    roles = list(record.roles) if record is not None and found == "registered" else []
    return JSONResponse({"approver_id": approver_id, "status": found, "roles": roles},
                        headers={"Cache-Control": "no-store"})


@router.get("/approvers")
async def approvers_page(request: Request, state: Console, session: Signed,
                         approver_id: Annotated[str, Query(max_length=200)] = "",
                         public_key: Annotated[str, Query(max_length=200)] = ""
                         ) -> HTMLResponse:
    """The tenant's approvers and a form to register one's public key (admins only)."""
    require(session, "admin")
    return await _approvers(request, state, session,
                            form={"approver_id": approver_id, "public_key": public_key,
                                  "roles": ""})


@router.post("/approvers")
async def register(
    request: Request, state: Console, session: Signed,
    approver_id: Annotated[str, Form(max_length=200)] = "",
    public_key: Annotated[str, Form(max_length=200)] = "",
    roles: Annotated[str, Form(max_length=1000)] = "",
    csrf: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    """Register (or replace) an approver's public key and roles: the same code as
    ``POST /v1/approvers``."""
    check_form(request, session, csrf)
    require(session, "admin")
    form = {"approver_id": approver_id, "public_key": public_key, "roles": roles}
    wanted = [r for r in roles.replace(",", " ").split() if r]
    try:
        body = NewApprover(approver_id=approver_id.strip(), public_key=public_key.strip(),
                           roles=wanted)
        added = await run_io(state.store, add_approver, state, session.principal, body)
    except ValidationError as exc:
        error = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                          for e in exc.errors())
        return await _approvers(request, state, session, form=form, error=error,
                                status_code=422)
    except ApiProblem as exc:
        error = "; ".join(e.message for e in exc.problem.errors) or exc.problem.detail
        return await _approvers(request, state, session, form=form, error=error,
                                status_code=exc.problem.status)
    return await _approvers(request, state, session, added=added.approver_id,
                            form={"approver_id": "", "public_key": "", "roles": ""})


# -- reading ----------------------------------------------------------------------------
def _read_inbox(state: ServiceState, request: Request, session: Session, rd: ReadAs
                ) -> tuple[list[PendingRequest], dict[str, dict[str, LabelValue]]]:
    """The requests and their runs' labels, each as the run's redactor lets the reader
    see them."""
    found = state.client.pending_requests(tenant_id=session.principal.tenant_id, limit=INBOX)
    state.record_reads(request, session.principal, [r.run_id for r in found],
                       purpose=rd.purpose, revealed=rd.reveal)
    tenant = session.principal.tenant_id
    labels = state.client.run_labels([r.run_id for r in found], tenant_id=tenant,
                                     reveal=rd.reveal)
    shown, shown_labels = [], {}
    for r in found:
        hide = state.client.redactor(r.run_id, tenant_id=tenant, reveal=rd.reveal)
        shown.append(redact_request(r, redactor=hide))
        if r.run_id in labels:
            hidden = hide.json(dict(labels[r.run_id]))
            shown_labels[r.run_id] = hidden if isinstance(hidden, dict) else {}
    return shown, shown_labels


def _read_request(state: ServiceState, request: Request, session: Session, run_id: str,
                  rd: ReadAs) -> tuple[Any, PendingRequest | None]:
    tenant = session.principal.tenant_id
    row = state.client.get_run(run_id, tenant_id=tenant)
    pending = state.client.pending_request(run_id, tenant_id=tenant)
    if pending is None:
        return row, None
    hide = state.client.redactor(run_id, tenant_id=tenant, reveal=rd.reveal)
    state.record_reads(request, session.principal, [run_id], purpose=rd.purpose,
                       revealed=rd.reveal)
    return row, redact_request(pending, redactor=hide)


async def _approvers(request: Request, state: ServiceState, session: Session, *,
                     form: dict[str, str], error: str = "", added: str = "",
                     status_code: int = 200) -> HTMLResponse:
    tenant = session.principal.tenant_id
    listed = await run_io(state.store, state.store.list_approvers, tenant)
    return render(request, "approvers.html", {
        "nav": "approvals", "approvers": listed, "form": form, "error": error,
        "added": added, "tenant": tenant,
    }, session=session, status_code=status_code)


# -- presenting -------------------------------------------------------------------------
def _groups(found: list[PendingRequest]) -> list[dict[str, Any]]:
    """The requests many runs share, for a bulk decision: each question asked, each
    tool held for approval, with how many runs wait on it (most first)."""
    counts: dict[tuple[str, str], int] = {}
    for r in found:
        key = (("answer", r.question) if r.kind == "question" and r.question
               else ("approve", r.tool) if r.kind == "approval" else None)
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
    return [{"action": action, "what": what, "n": n,
             "query": urlencode({"action": action,
                                 "question" if action == "answer" else "tool": what})}
            for (action, what), n in sorted(counts.items(), key=lambda kv: -kv[1])]


def _action(r: PendingRequest) -> str:
    if r.kind == "approval":
        return f"call {r.tool}"
    if r.kind == "question":
        return r.question or "a question"
    return f"{r.tool}: {r.question or ''}" if r.tool else (r.question or "an escalation")


def suggested_id(session: Session) -> str:
    """The key's name as a first guess at the approver id (ids hold no spaces).

    Args:
        session: The signed-in session.
    """
    name = session.principal.name
    return name if name and not any(c.isspace() for c in name) else ""


def held_arguments(args: JSON, evidence: JSON) -> list[dict[str, Any]]:
    """The arguments whose provenance held a call, from its evidence's ``held_by``
    (:meth:`~underway.guard.provenance.Assessment.evidence`): each one's name, its value as
    the request shows it, the sources it could come from and whether it repeats them.

    Args:
        args: The held call's arguments, as shown to this reader.
        evidence: The call's evidence.
    """
    held = evidence.get("held_by") if isinstance(evidence, dict) else None
    if not isinstance(held, list):
        return []
    rows: list[dict[str, Any]] = []
    for item in held:
        if not isinstance(item, dict) or not isinstance(item.get("arg"), str):
            continue
        name = item["arg"]
        value = args.get(name) if isinstance(args, dict) else None
        rows.append({"arg": name, "value": _pretty(value),
                     "sources": [str(s) for s in item.get("sources") or []],
                     "repeats": bool(item.get("repeats"))})
    return rows


def _pretty(value: JSON) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def signing_fields(r: PendingRequest, tenant: str, now: float) -> dict[str, JSON]:
    """The fields of a decision on ``r`` that the server knows, exactly as the journal has
    them. ``expires_at`` is the request's (a decision may not outlive it) or, for a request
    without an expiry, a day from now. Rendered with Python's JSON, so a float keeps the
    digits Python's canonical JSON gives it. The bulk page gives them per run.

    Args:
        r: The pending request.
        tenant: The run's tenant.
        now: The server's time.
    """
    expires = now + OPEN_ENDED if math.isinf(r.expires_at) else r.expires_at
    return {"request_id": r.request_id, "run_id": r.run_id, "tenant_id": tenant,
            "tool": r.tool, "args_hash": r.args_hash, "expires_at": float(expires),
            "kind": r.kind, "dead": r.cause == "dead"}


def _refused(status_code: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status_code,
                        headers={"Cache-Control": "no-store"})
