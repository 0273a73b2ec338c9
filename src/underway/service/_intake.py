"""``POST /v1/intake/{source}``: an outside event, delivered by webhook, routed like
``underway events send``. The request needs an ``intake`` key (its tenant is the event's)
and an HMAC-SHA256 signature of the timestamp and the exact body with the source's secret
(:mod:`underway.webhooks`); a stale timestamp, a bad signature, a body changed after
signing are refused before anything is read or stored. An accepted event acts once per
idempotency key, which the signature covers: the body's ``idempotency_key``, else an
``Idempotency-Key`` header under a ``v2`` signature. A key header the signature does not
cover is refused, so one signed delivery posted under several keys cannot act twice."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path, Request
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, ValidationError

from .. import webhooks
from ..inputs import parse_json
from ..scheduling.intake import IntakeError, intake
from ..store._offload import run_io
from ._auth import Caller, ServiceState, State, endpoint
from ._inputs import CheckedRoute
from ._problems import ApiProblem, FieldError, field_errors, invalid, not_found

router = APIRouter(prefix="/v1/intake", tags=["intake"], route_class=CheckedRoute)

Source = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$")]


class WebhookEvent(BaseModel):
    """An outside event: which entity, what type, the payload; the tenant is the key's and
    the source is the path's. ``occurred_at`` defaults to when it arrived."""

    model_config = ConfigDict(extra="forbid")

    entity_id: str = Field(min_length=1)
    event_type: str = Field(min_length=1)
    idempotency_key: str | None = Field(default=None, min_length=1)
    occurred_at: AwareDatetime | None = None
    permissions: list[str] = Field(default_factory=list)
    payload: JsonValue = None
    purpose: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_.\-]{0,63}$")
    """What the event asks to be acted on for (default: the route's purpose)."""
    consent: str | None = Field(default=None, min_length=1, max_length=200)
    """The reference of the consent the event comes with."""


RAW_BODIES: tuple[type[BaseModel], ...] = (WebhookEvent,)
"""Bodies an endpoint here reads itself (after checking the signature): the OpenAPI
document names their schemas (``underway.service._app``)."""


class IntakeOutcome(BaseModel):
    """What the event did: ``started`` or ``signalled`` run ``run_id``; ``duplicate`` (an
    earlier delivery with its key did, ``run_id`` is that run); or ``ignored`` (why in
    ``reason``)."""

    action: Literal["started", "signalled", "duplicate", "ignored"]
    run_id: str | None
    reason: str


_REFUSED = {
    "missing_signature": f"send {webhooks.TIMESTAMP_HEADER} and {webhooks.SIGNATURE_HEADER}",
    "stale_timestamp": "the timestamp is outside the replay window; sign the delivery again",
    "bad_signature": "the signature does not match the body and timestamp",
    "unsigned_idempotency_key": f"the {webhooks.IDEMPOTENCY_HEADER} header is not covered by "
    "a v1 signature: sign it with v2 (timestamp.key.body) or put idempotency_key in the "
    "body",
}


@endpoint(router, "POST", "/{source}", permission="intake", response_model=IntakeOutcome,
          problems=(404,), openapi_extra={"requestBody": {"required": True, "content": {
              "application/json": {"schema": {"$ref": "#/components/schemas/WebhookEvent"}}}}})
async def deliver_webhook(
    source: Source, request: Request, state: State, who: Caller,
    traceparent: Annotated[str | None, Header(max_length=200)] = None,
    tracestate: Annotated[str | None, Header(max_length=1000)] = None,
) -> IntakeOutcome:
    """Verify, then route an outside event to the run that owns its entity, or start one.
    A W3C ``traceparent`` (and ``tracestate``) is journaled with a run the event starts:
    its spans join the sender's trace."""
    body = await request.body()
    secret = await run_io(state.store, state.store.get_intake_secret, who.tenant_id, source)
    if secret is None:
        raise not_found("such webhook source (set its secret first)")
    header_key = request.headers.get(webhooks.IDEMPOTENCY_HEADER)
    refusal = webhooks.verify(
        secret.secret, body, timestamp=request.headers.get(webhooks.TIMESTAMP_HEADER),
        signed=request.headers.get(webhooks.SIGNATURE_HEADER), now=state.client.clock.now(),
        window=state.replay_window, idempotency_key=header_key,
    )
    if refusal is not None:
        raise ApiProblem(401, refusal.replace("_", "-"), "Delivery refused", _REFUSED[refusal])
    event = _parse(body)
    # Both are signed: a v2 signature covers the header, every signature the body.
    key = event.idempotency_key or header_key
    if not key:
        raise invalid("body.idempotency_key", "give idempotency_key, or an Idempotency-Key "
                      "header under a v2 signature")
    carrier = None if traceparent is None else {k: v for k, v in (
        ("traceparent", traceparent), ("tracestate", tracestate)) if v is not None}
    return await run_io(state.store, _route, state, who.tenant_id, source, event, key,
                        carrier)


def _parse(body: bytes) -> WebhookEvent:
    data = parse_json("body", body)
    try:
        return WebhookEvent.model_validate(data)
    except ValidationError as exc:
        fields = [FieldError.of(("body", *e["loc"]), e["msg"], e["type"])
                  for e in exc.errors(include_url=False)]
        raise ApiProblem(422, "invalid-input", "Invalid input",
                         "; ".join(f"{f.field}: {f.message}" for f in fields), fields) from None


def _route(
    state: ServiceState, tenant_id: str, source: str, event: WebhookEvent, key: str,
    trace_context: dict[str, str] | None,
) -> IntakeOutcome:
    if state.routes is None:
        raise ApiProblem(404, "intake-not-configured", "Intake not configured",
                         "this server has no intake routes (underway serve --routes)")
    now = state.client.clock.now()
    data: dict[str, Any] = {
        "tenant_id": tenant_id, "entity_id": event.entity_id, "event_type": event.event_type,
        "occurred_at": event.occurred_at or datetime.fromtimestamp(now, UTC),
        "source": source, "permissions": event.permissions, "idempotency_key": key,
        "payload": event.payload, "purpose": event.purpose, "consent": event.consent,
    }
    try:
        result = intake(state.client, data, state.routes, trace_context=trace_context)
    except IntakeError as exc:
        # Input that does not fit the flow's model is refused here, as every queue
        # refuses it (a dead letter with the same words): each bad field listed.
        raise ApiProblem(422, "intake-refused", "Event refused", str(exc),
                         field_errors(exc.errors)) from None
    return IntakeOutcome(**dataclasses.asdict(result))
