"""Admin endpoints, each in the admin key's own tenant: API keys (``/v1/api-keys``),
approvers' public keys (``/v1/approvers``), webhook secrets (``/v1/intake-secrets``) and the
access log (``/v1/access-log``)."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from ..apikeys import Role, issue_key
from ..errors import ConfigurationError
from ..guard.approvals import ApproverRecord, register_approver
from ..store import access
from ..store.access import PURPOSE_MAX
from ..store.base import AccessRecord, ApiKeyRecord, IntakeSecretRecord
from ..webhooks import new_secret
from ._auth import Caller, State, endpoint
from ._inputs import CheckedRoute
from ._problems import conflict, invalid, not_found
from ._reading import PURPOSE_PATTERN

router = APIRouter(prefix="/v1", tags=["admin"], route_class=CheckedRoute)

Name = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$")]


class NewKey(BaseModel):
    """A key to issue in the admin's tenant."""

    model_config = ConfigDict(extra="forbid")
    role: Role
    name: str = Field(default="", max_length=200)


class ApiKey(BaseModel):
    """An API key as listed (never its token)."""

    key_id: str
    tenant_id: str
    role: str
    name: str
    created_at: float
    revoked_at: float | None

    @classmethod
    def of(cls, r: ApiKeyRecord) -> ApiKey:
        """The listing of a stored key."""
        return cls(key_id=r.key_id, tenant_id=r.tenant_id, role=r.role, name=r.name,
                   created_at=r.created_at, revoked_at=r.revoked_at)


class IssuedApiKey(ApiKey):
    """A key just issued, with its ``token``: shown this once, never again."""

    token: str


class NewApprover(BaseModel):
    """An approver to register: id, base64 Ed25519 public key, roles."""

    model_config = ConfigDict(extra="forbid")
    approver_id: str = Field(min_length=1, max_length=200)
    public_key: str = Field(min_length=1)
    roles: list[str] = Field(min_length=1)


class Approver(BaseModel):
    """A registered approver."""

    approver_id: str
    public_key: str
    roles: list[str]
    created_at: float
    revoked_at: float | None

    @classmethod
    def of(cls, r: ApproverRecord) -> Approver:
        """The listing of a stored approver."""
        return cls(approver_id=r.approver_id, public_key=r.public_key, roles=list(r.roles),
                   created_at=r.created_at, revoked_at=r.revoked_at)


class SetSecret(BaseModel):
    """A webhook source's secret; without ``secret`` a random one is made."""

    model_config = ConfigDict(extra="forbid")
    secret: str | None = Field(default=None, min_length=16, max_length=500)


class IntakeSecret(BaseModel):
    """A webhook source (its secret is shown only when set)."""

    source: str
    created_at: float
    secret: str | None = None


class AccessEntry(BaseModel):
    """One read of a run's data: who (key id and name; ``cli`` and the user for the
    command line), when, which run (``*``: all of the tenant's, counted together), which
    endpoint or command, why (``purpose``), whether sensitive fields were ``revealed``,
    and its place in the tenant's hash chain (``prev_hash``, ``hash``)."""

    seq: int
    at: float
    key_id: str
    key_name: str
    run_id: str
    endpoint: str
    purpose: str
    revealed: bool
    prev_hash: str
    hash: str

    @classmethod
    def of(cls, r: AccessRecord) -> AccessEntry:
        """The entry as the API shows it."""
        return cls(seq=r.seq, at=r.at, key_id=r.key_id, key_name=r.key_name, run_id=r.run_id,
                   endpoint=r.endpoint, purpose=r.purpose, revealed=r.revealed,
                   prev_hash=r.prev_hash, hash=r.hash)


class AccessPage(BaseModel):
    """Access-log entries, newest first; pass ``next_cursor`` as ``cursor`` for more."""

    entries: list[AccessEntry]
    next_cursor: str | None


class AccessCheck(BaseModel):
    """The verification of the tenant's access-log chain: ``ok`` when intact, with the
    chained ``entries`` checked and the ``legacy`` ones from before the chain; else
    ``bad_seq``, the first bad entry, and ``problem``."""

    ok: bool
    entries: int
    legacy: int
    bad_seq: int | None
    problem: str


# -- API keys ----------------------------------------------------------------------------
@endpoint(router, "POST", "/api-keys", permission="admin", response_model=IssuedApiKey,
          status_code=201)
def create_api_key(state: State, who: Caller, body: NewKey) -> IssuedApiKey:
    """Issue a key in the admin's tenant; its token is in this response only."""
    issued = issue_key(state.store, tenant_id=who.tenant_id, role=body.role,
                       name=body.name, now=state.client.clock.now())
    return IssuedApiKey(**ApiKey.of(issued.record).model_dump(), token=issued.token)


@endpoint(router, "GET", "/api-keys", permission="admin", response_model=list[ApiKey])
def list_api_keys(state: State, who: Caller) -> list[ApiKey]:
    """The tenant's keys, oldest first, revoked ones included."""
    return [ApiKey.of(k) for k in state.store.list_api_keys(who.tenant_id)]


@endpoint(router, "DELETE", "/api-keys/{key_id}", permission="admin", status_code=204,
          problems=(404,), response_class=Response)
def revoke_api_key(state: State, who: Caller, key_id: Name) -> Response:
    """Revoke a key of the tenant: it authenticates nothing from now on."""
    if not state.store.revoke_api_key(who.tenant_id, key_id, at=state.client.clock.now()):
        raise not_found("unrevoked API key with this id")
    return Response(status_code=204)


# -- approvers ----------------------------------------------------------------------------
@endpoint(router, "POST", "/approvers", permission="admin", response_model=Approver,
          status_code=201)
def add_approver(state: State, who: Caller, body: NewApprover) -> Approver:
    """Register an approver's public key and roles (again: replace them, lift a
    revocation)."""
    try:
        rec = register_approver(state.store, body.approver_id, public_key=body.public_key,
                                roles=body.roles, now=state.client.clock.now(),
                                tenant_id=who.tenant_id)
    except ConfigurationError as exc:
        text = str(exc)
        field = "body.public_key" if "key" in text and "approver id" not in text else (
            "body.approver_id" if "approver id" in text else "body.roles")
        raise invalid(field, text) from None
    return Approver.of(rec)


@endpoint(router, "GET", "/approvers", permission="admin", response_model=list[Approver])
def list_approvers(state: State, who: Caller) -> list[Approver]:
    """The tenant's approvers, revoked ones included."""
    return [Approver.of(a) for a in state.store.list_approvers(who.tenant_id)]


@endpoint(router, "DELETE", "/approvers/{approver_id}", permission="admin", status_code=204,
          problems=(404, 409), response_class=Response)
def revoke_approver(state: State, who: Caller, approver_id: Name) -> Response:
    """Revoke an approver: no decision they signed is accepted from now on."""
    if not state.store.revoke_approver(who.tenant_id, approver_id,
                                       at=state.client.clock.now()):
        if state.store.get_approver(who.tenant_id, approver_id) is None:
            raise not_found("such approver")
        raise conflict(f"approver {approver_id!r} is already revoked")
    return Response(status_code=204)


# -- webhook secrets ----------------------------------------------------------------------
@endpoint(router, "PUT", "/intake-secrets/{source}", permission="admin",
          response_model=IntakeSecret)
def set_intake_secret(state: State, who: Caller, source: Name, body: SetSecret) -> IntakeSecret:
    """Set (or rotate) a webhook source's secret; the response shows it this once. It is
    stored as given: an HMAC cannot be checked without it."""
    secret = body.secret or new_secret()
    now = state.client.clock.now()
    state.store.put_intake_secret(IntakeSecretRecord(who.tenant_id, source, secret, now))
    return IntakeSecret(source=source, created_at=now, secret=secret)


@endpoint(router, "GET", "/intake-secrets", permission="admin",
          response_model=list[IntakeSecret])
def list_intake_secrets(state: State, who: Caller) -> list[IntakeSecret]:
    """The tenant's webhook sources (not their secrets)."""
    return [IntakeSecret(source=s.source, created_at=s.created_at)
            for s in state.store.list_intake_secrets(who.tenant_id)]


@endpoint(router, "DELETE", "/intake-secrets/{source}", permission="admin", status_code=204,
          problems=(404,), response_class=Response)
def remove_intake_secret(state: State, who: Caller, source: Name) -> Response:
    """Remove a source's secret: its deliveries are refused from now on."""
    if not state.store.delete_intake_secret(who.tenant_id, source):
        raise not_found("such webhook source")
    return Response(status_code=204)


# -- the access log -----------------------------------------------------------------------
@endpoint(router, "GET", "/access-log", permission="admin", response_model=AccessPage)
def list_access_log(
    state: State, who: Caller,
    run_id: Annotated[str | None, Query(min_length=1)] = None,
    key_id: Annotated[str | None, Query(min_length=1)] = None,
    by: Annotated[str | None, Query(min_length=1, max_length=200,
                                    description="Only reads by this key name (or, from "
                                    "the command line, this user).")] = None,
    purpose: Annotated[str | None, Query(min_length=1, max_length=PURPOSE_MAX,
                                         pattern=PURPOSE_PATTERN)] = None,
    since: float | None = None,
    until: float | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(min_length=1, max_length=18,
                                        pattern=r"^[1-9][0-9]{0,17}$")] = None,
) -> AccessPage:
    """Who read which run's data, when, through which endpoint, why, and whether
    sensitive fields were revealed; newest first."""
    before = None
    if cursor is not None:
        if not re.fullmatch(r"[1-9][0-9]{0,17}", cursor):
            raise invalid("query.cursor", "not a cursor: pass a next_cursor as given")
        before = int(cursor)
    rows = state.store.list_access(who.tenant_id, run_id=run_id, key_id=key_id, since=since,
                                   until=until, before=before, limit=limit + 1, who=by,
                                   purpose=purpose)
    more = len(rows) > limit
    rows = rows[:limit]
    return AccessPage(entries=[AccessEntry.of(r) for r in rows],
                      next_cursor=str(rows[-1].seq) if more else None)


@endpoint(router, "GET", "/access-log/verify", permission="admin", response_model=AccessCheck)
def verify_access_log(state: State, who: Caller) -> AccessCheck:
    """Walk the tenant's access-log hash chain and name the first entry that was altered,
    inserted or follows a deleted one, or a cut tail (``underway access-log --verify``)."""
    v = access.verify_access_log(state.store, who.tenant_id)
    return AccessCheck(ok=v.ok, entries=v.entries, legacy=v.legacy, bad_seq=v.bad_seq,
                       problem=v.problem)
