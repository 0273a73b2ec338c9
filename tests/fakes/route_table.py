"""One sample request for every endpoint under /v1, keyed by (method, route path), built on
the resources of tenant ``acme`` (:class:`Acme`). The tests check the table covers every
route of the app, so a new endpoint cannot escape them."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fakes.service_world import World
from underway import webhooks
from underway.apikeys import issue_key
from underway.guard.approvals import public_key_of, sign_decision
from underway.service import ROLES_EXTENSION, RUN_DATA_EXTENSION
from underway.store.base import ConsentRecord, IntakeSecretRecord

SUBJECT = "cust-7"
"""A data subject of acme's, whose marketing consent acme recorded (reference
:data:`CONSENT_REFERENCE`)."""
CONSENT_REFERENCE = "CM-71"


@dataclass
class Acme:
    """Tenant acme's resources the samples point at."""

    run: str
    refund: str
    done: str
    spare_key: str
    decision: dict[str, Any]
    approver_public_key: str


def acme(world: World) -> Acme:
    run = world.start(invoice="INV-1", drive=False)
    refund = world.start("refunds", "INV-2", drive=False)
    done = world.start(invoice="INV-3", drive=False)
    world.drive()
    world.call("POST", f"/v1/runs/{done}/cancel", json={})
    world.drive()
    alice = world.approver("acme", "alice", "finance")
    world.approver("acme", "bob", "finance")
    [pending] = world.client_pending(refund)
    decision = sign_decision(
        alice, request_id=pending["request_id"], run_id=refund, tenant_id="acme",
        tool="refund", args_hash=pending["args_hash"], decision="approve",
        expires_at=pending["expires_at"], approver_id="alice",
    ).model_dump(mode="json")
    now = world.clock.now()
    for source in ("billing", "old"):
        world.store.put_intake_secret(IntakeSecretRecord("acme", source, "s" * 32, now))
    world.store.record_consent(ConsentRecord("acme", SUBJECT, "marketing", "granted",
                                             CONSENT_REFERENCE, "crm", now))
    spare = issue_key(world.store, tenant_id="acme", role="viewer", name="spare", now=now)
    return Acme(run, refund, done, spare.record.key_id, decision,
                public_key_of(alice))


def _intake(world: World, fx: Acme) -> dict[str, Any]:
    body = json.dumps({"entity_id": "INV-77", "event_type": "invoice.created",
                       "idempotency_key": "evt-77",
                       "payload": {"invoice": "INV-77", "amount": 1}}).encode()
    return {"content": body, "headers": {"content-type": "application/json",
                                         **webhooks.sign("s" * 32, body,
                                                         at=world.clock.now())}}


Sample = Callable[[World, Acme], tuple[str, dict[str, Any]]]

SAMPLES: dict[tuple[str, str], Sample] = {
    ("GET", "/v1/runs"): lambda w, a: ("/v1/runs", {}),
    ("POST", "/v1/runs"): lambda w, a: ("/v1/runs", {"json": {
        "flow": "reminders", "input": {"invoice": "INV-5", "amount": 1}}}),
    ("GET", "/v1/runs/{run_id}"): lambda w, a: (f"/v1/runs/{a.run}", {}),
    ("GET", "/v1/runs/{run_id}/events"): lambda w, a: (f"/v1/runs/{a.run}/events", {}),
    ("GET", "/v1/runs/{run_id}/events/stream"):
        lambda w, a: (f"/v1/runs/{a.done}/events/stream", {}),
    ("GET", "/v1/runs/{run_id}/stream"): lambda w, a: (f"/v1/runs/{a.done}/stream", {}),
    ("GET", "/v1/runs/{run_id}/stream/deltas"):
        lambda w, a: (f"/v1/runs/{a.done}/stream/deltas", {}),
    ("POST", "/v1/runs/{run_id}/signals"): lambda w, a: (
        f"/v1/runs/{a.run}/signals", {"json": {"name": "paid", "signal_id": "s1"}}),
    ("POST", "/v1/runs/{run_id}/cancel"): lambda w, a: (f"/v1/runs/{a.run}/cancel",
                                                         {"json": {"reason": "test"}}),
    ("POST", "/v1/runs/{run_id}/resume"): lambda w, a: (f"/v1/runs/{a.run}/resume",
                                                         {"json": {}}),
    ("POST", "/v1/runs/{run_id}/fork"): lambda w, a: (
        f"/v1/runs/{a.run}/fork", {"json": {"at_seq": 1, "reason": "what if"}}),
    ("POST", "/v1/runs/{run_id}/resolve"): lambda w, a: (
        f"/v1/runs/{a.run}/resolve", {"json": {"resolution": "retry"}}),
    # Bulk operations, as dry runs: what each selects, nothing sent.
    ("POST", "/v1/runs/bulk/resume"): lambda w, a: ("/v1/runs/bulk/resume", {"json": {}}),
    ("POST", "/v1/runs/bulk/cancel"): lambda w, a: (
        "/v1/runs/bulk/cancel", {"params": {"flow": "reminders"}, "json": {}}),
    ("POST", "/v1/runs/bulk/resolve"): lambda w, a: (
        "/v1/runs/bulk/resolve", {"json": {"resolution": "retry"}}),
    ("POST", "/v1/runs/bulk/settle"): lambda w, a: (
        "/v1/runs/bulk/settle", {"json": {"resolution": "resume"}}),
    ("POST", "/v1/runs/bulk/answer"): lambda w, a: (
        "/v1/runs/bulk/answer", {"json": {"question": "Which one?", "answer": "A"}}),
    ("POST", "/v1/runs/bulk/approve"): lambda w, a: (
        "/v1/runs/bulk/approve", {"json": {"decisions": [a.decision]}}),
    ("POST", "/v1/runs/bulk/reject"): lambda w, a: ("/v1/runs/bulk/reject", {"json": {}}),
    ("GET", "/v1/approvals"): lambda w, a: ("/v1/approvals", {}),
    ("GET", "/v1/approvals/{run_id}"): lambda w, a: (f"/v1/approvals/{a.refund}", {}),
    ("POST", "/v1/approvals/{run_id}/decision"): lambda w, a: (
        f"/v1/approvals/{a.refund}/decision", {"json": a.decision}),
    ("POST", "/v1/intake/{source}"): lambda w, a: ("/v1/intake/billing", _intake(w, a)),
    ("GET", "/v1/consents"): lambda w, a: ("/v1/consents", {"params": {"subject": SUBJECT}}),
    ("POST", "/v1/consents"): lambda w, a: ("/v1/consents", {"json": {
        "subject": SUBJECT, "purpose": "marketing", "state": "withdrawn"}}),
    ("GET", "/v1/erasures"): lambda w, a: ("/v1/erasures", {"params": {"subject": "gone-1"}}),
    ("POST", "/v1/erasures"): lambda w, a: ("/v1/erasures", {"json": {
        "subject": "gone-1", "reason": "a request"}}),
    ("GET", "/v1/usage"): lambda w, a: ("/v1/usage", {"params": {"days": 1}}),
    ("GET", "/v1/activity"): lambda w, a: ("/v1/activity", {"params": {"days": 1,
                                                                       "by": "hour"}}),
    ("GET", "/v1/activity/days"): lambda w, a: ("/v1/activity/days", {"params": {
        "since": w.clock.now() - 3600, "days": 1}}),
    ("GET", "/v1/audit/verify"): lambda w, a: ("/v1/audit/verify", {}),
    ("GET", "/v1/whoami"): lambda w, a: ("/v1/whoami", {}),
    ("GET", "/v1/labels"): lambda w, a: ("/v1/labels", {"params": {"run_id": a.run}}),
    ("GET", "/v1/subjects/runs"): lambda w, a: ("/v1/subjects/runs",
                                                {"params": {"subject": SUBJECT}}),
    ("GET", "/v1/approvers/{approver_id}"): lambda w, a: ("/v1/approvers/alice", {}),
    ("GET", "/v1/schedules"): lambda w, a: ("/v1/schedules", {}),
    ("GET", "/v1/queues"): lambda w, a: ("/v1/queues", {}),
    ("GET", "/v1/api-keys"): lambda w, a: ("/v1/api-keys", {}),
    ("POST", "/v1/api-keys"): lambda w, a: ("/v1/api-keys", {"json": {"role": "viewer"}}),
    ("DELETE", "/v1/api-keys/{key_id}"): lambda w, a: (f"/v1/api-keys/{a.spare_key}", {}),
    ("GET", "/v1/approvers"): lambda w, a: ("/v1/approvers", {}),
    ("POST", "/v1/approvers"): lambda w, a: ("/v1/approvers", {"json": {
        "approver_id": "carol", "public_key": a.approver_public_key, "roles": ["ops"]}}),
    ("DELETE", "/v1/approvers/{approver_id}"): lambda w, a: ("/v1/approvers/bob", {}),
    ("GET", "/v1/intake-secrets"): lambda w, a: ("/v1/intake-secrets", {}),
    ("PUT", "/v1/intake-secrets/{source}"): lambda w, a: ("/v1/intake-secrets/new",
                                                          {"json": {}}),
    ("DELETE", "/v1/intake-secrets/{source}"): lambda w, a: ("/v1/intake-secrets/old", {}),
    ("GET", "/v1/access-log"): lambda w, a: ("/v1/access-log", {}),
    ("GET", "/v1/access-log/verify"): lambda w, a: ("/v1/access-log/verify", {}),
}


@dataclass(frozen=True)
class Endpoint:
    """A route of the app as the OpenAPI document declares it."""

    method: str
    path: str
    roles: tuple[str, ...]
    run_data: bool


def endpoints(world: World) -> list[Endpoint]:
    """Every endpoint of the app under /v1, from the OpenAPI document the app builds from
    its routes (a route left out of the document would be refused by the tests below:
    every route must declare its roles there)."""
    found = []
    for path, operations in world.app.openapi()["paths"].items():
        if not path.startswith("/v1"):
            continue
        for method, op in operations.items():
            found.append(Endpoint(method.upper(), path, tuple(op[ROLES_EXTENSION]),
                                  bool(op[RUN_DATA_EXTENSION])))
    return found
