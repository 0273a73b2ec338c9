"""What the HTTP transport reads off the wire: the API's JSON bodies made into the records the
database transport returns, and its problems (RFC 9457) made into the exceptions the
database transport raises, with the same messages where the server sends them."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .. import events as ev
from ..codec import ENCRYPTED
from ..errors import (
    ConfigurationError,
    ConflictError,
    FieldProblem,
    InvalidInput,
    KeyUnavailable,
    ResidencyError,
    RunNotFound,
    ServiceError,
    SignedResolutionRequired,
    UnderwayError,
)
from ..store.base import ApproverRecord, ConsentRecord, RunRecord
from ..store.streams import StreamDelta
from ._forking import Fork
from ._pages import RunEvent
from ._requests import PendingRequest

if TYPE_CHECKING:
    import httpx

PROBLEM = "urn:underway:problem:"
"""The prefix of every problem type the API answers with."""

_PLAIN = frozenset({"conflict", "decision-refused"})
"""Problems that are a :class:`ConfigurationError` in the database client."""
_WHERE = ("body.", "query.", "path.", "header.")


def run_record(d: dict[str, Any]) -> RunRecord:
    """A run's row from a ``RunSummary`` (or ``RunDetail``)."""
    return RunRecord(
        tenant_id=d["tenant_id"], run_id=d["run_id"], flow=d["flow"], status=d["status"],
        step=d["step"], idempotency_key=d["idempotency_key"], last_seq=d["last_seq"],
        last_hash=d["last_hash"], next_wake_at=d["next_wake_at"],
        waiting_signal=d["waiting_signal"], control_pending=d["control_pending"],
        lease_owner=d["lease_owner"], lease_token=d["lease_token"],
        lease_expires_at=d["lease_expires_at"], created_at=d["created_at"],
        updated_at=d["updated_at"], error=d["error"], queue=d["queue"],
        subject=d["subject"], purpose=d["purpose"],
    )


def stream_delta(d: dict[str, Any]) -> StreamDelta:
    """A delta of a run's live stream from a ``Delta`` (or an SSE ``delta`` frame)."""
    return StreamDelta(d["offset"], d["key"], d["step"], d["index"], d["attempt"],
                       d["delta"], d["written_at"])


def refused_key(where: str, detail: str) -> ServiceError:
    """The API key was refused (revoked, expired, unknown), as a 401 answer reads."""
    return ServiceError(f"{where} refused the API key: {detail}. Check api_key= (a "
                        "revoked key stays refused)", status=401)


def pending(d: dict[str, Any]) -> PendingRequest:
    """A request a run waits on, from a ``Pending`` (no expiry: ``inf``)."""
    expires = d["expires_at"]
    return PendingRequest(
        run_id=d["run_id"], kind=d["kind"], request_id=d["request_id"], tool=d["tool"],
        args=d["args"], args_hash=d["args_hash"], evidence=d["evidence"],
        risks=list(d["risks"]), required_role=d["required_role"],
        expires_at=math.inf if expires is None else float(expires), question=d["question"],
        context=d["context"], rule_id=d["rule_id"], policy_version=d["policy_version"],
        cause=d["cause"], key=d["key"], sensitive_fields=tuple(d["sensitive_fields"]),
        secret_fields=tuple(d["secret_fields"]), summary=d["summary"], money=d["money"],
        moves=d["moves"],
    )


def event(d: dict[str, Any]) -> RunEvent:
    """A journaled event from an ``Event``: the event rebuilt from its type and fields
    (a purged one as :class:`~underway.events.PayloadPurged`, a sealed one as
    :class:`~underway.events.Encrypted`)."""
    kind, data = d["type"], d["data"]
    found: Any
    if d.get("purged"):
        found = ev.PayloadPurged(event_type=kind, kept=data)
    elif data == {"payload": ENCRYPTED}:
        found = ev.Encrypted(event_type=kind)
    else:
        cls = ev.EVENT_TYPES.get(kind)
        if cls is None:
            raise UnderwayError(f"the server sent an event of a type this client does not "
                                f"know ({kind!r}): upgrade underway")
        try:
            found = cls.model_validate({**data, "type": kind})
        except ValidationError:
            # A redacted field ("[redacted]") need not fit its type: shown as sent.
            found = cls.model_construct(**data)
    return RunEvent(d["seq"], d["at"], found, d["hash"])


def fork(d: dict[str, Any]) -> Fork:
    """A fork from the API's ``Forked``."""
    return Fork(d["run_id"], d["parent_run_id"], d["seq"], d["step"], d["parent_step"],
                d["parent_status"], tuple(d["redone"]), tuple(d["notes"]))


def consent(tenant_id: str, d: dict[str, Any]) -> ConsentRecord:
    """A consent record from a ``ConsentEntry``."""
    return ConsentRecord(tenant_id, d["subject"], d["purpose"], d["state"], d["reference"],
                         d["by"], d["at"], d["seq"])


def approver(tenant_id: str, d: dict[str, Any]) -> ApproverRecord:
    """An approver from an ``Approver``."""
    return ApproverRecord(tenant_id, d["approver_id"], d["public_key"], tuple(d["roles"]),
                          d["created_at"], d["revoked_at"])


def error_of(r: httpx.Response, where: str, *, tenant_id: str | None = None,
             run_id: str | None = None) -> UnderwayError:
    """The exception the database client raises for what the API answered ``r`` with.

    Args:
        r: The answer, not a success.
        where: The server, for messages.
        tenant_id: The tenant of the call.
        run_id: The run the call is about (a 404 is then :class:`RunNotFound`).
    """
    try:
        body = r.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or not str(body.get("type", "")).startswith(PROBLEM):
        return ServiceError(f"{where} answered {r.status_code} to {r.request.method} "
                            f"{r.request.url.path}, not with a problem: is it underway "
                            "serve?", status=r.status_code)
    slug = str(body["type"]).removeprefix(PROBLEM)
    detail = str(body.get("detail", ""))
    errors = [e for e in body.get("errors") or [] if isinstance(e, dict)]
    if slug == "not-found" and run_id is not None and tenant_id is not None:
        return RunNotFound(tenant_id, run_id)
    if slug == "signed-resolution-required":
        return _signed_only(detail, run_id)
    if slug == "keys-unavailable":
        return KeyUnavailable(detail)
    if slug == "run-busy":
        return ConflictError(detail)
    if slug == "no-region":
        found = re.search(r"\(regions (.*?)\)", detail)
        return ResidencyError(tenant_id or "", found.group(1).split(", ") if found else [])
    if slug in _PLAIN:
        return ConfigurationError(detail)
    if slug in ("invalid-input", "invalid-json"):
        return _invalid(r.status_code, detail, errors)
    if r.status_code == 401:
        return refused_key(where, detail)
    if r.status_code == 403:
        return ServiceError(f"{where} refused: {detail}", status=403)
    return ServiceError(f"{where} answered {r.status_code} to {r.request.method} "
                        f"{r.request.url.path} ({body.get('title', slug)}): {detail}",
                        status=r.status_code)


def _invalid(status: int, detail: str, errors: list[dict[str, Any]]) -> ConfigurationError:
    """Bad input: the client's own refusal, passed on by the API under a field
    (``body.name: <message>``), is that refusal again; else the fields the API names."""
    if len(errors) == 1 and detail == f"{errors[0].get('field')}: {errors[0].get('message')}" \
            and str(errors[0].get("field", "")).startswith(_WHERE) \
            and errors[0].get("type") == "invalid":
        return ConfigurationError(str(errors[0]["message"]))
    if not errors:
        return ConfigurationError(detail)
    first = errors[0]
    problems = [FieldProblem(tuple(e.get("loc") or [e.get("field", "")]), str(e.get("message")),
                             str(e.get("type", "invalid"))) for e in errors]
    return InvalidInput(str(first.get("field", "")), str(first.get("message", "")),
                        status=status, errors=problems, message=detail)


def _signed_only(detail: str, run_id: str | None) -> SignedResolutionRequired:
    """The refusal again, from the words the server built it with."""
    found = re.match(r"(?:run (?P<run>.+?): )?an unsigned (?P<action>.+?) is refused here:"
                     r".*?nothing was sent\. (?P<how>.*)\Z", detail, re.DOTALL)
    if found is None:
        return SignedResolutionRequired(run_id or "", "resolution", how=detail)
    return SignedResolutionRequired(found["run"] or "", found["action"], how=found["how"])
