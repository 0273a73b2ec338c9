"""Who is asking: the API key behind a request's bearer token, its tenant and role, and the
permission each endpoint needs. Every endpoint under ``/v1`` is declared through
:func:`endpoint`, which both enforces the permission and writes the roles that hold it into
the OpenAPI document (``x-underway-roles``), so what is documented is what is enforced."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..apikeys import PERMISSIONS, ROLES, Permission, Role, authenticate, roles_with
from ..client import Client
from ..scheduling.intake import Routes
from ..store._offload import run_io
from ..store.access import DEFAULT_PURPOSE
from ..store.base import AccessRecord, ApiKeyRecord, Store
from ._batch import Writes
from ._problems import ApiProblem, problem_responses

ROLES_EXTENSION = "x-underway-roles"
"""The OpenAPI operation field listing the roles that may call it."""
RUN_DATA_EXTENSION = "x-underway-run-data"
"""The OpenAPI operation field that is true when a call reads a run's data (and so is
written to the access log)."""

_bearer = HTTPBearer(auto_error=False, description="An API key: `underway apikeys new`.")


@dataclass(frozen=True, slots=True)
class Principal:
    """The API key a request was made with: its id, name, tenant and role."""

    key_id: str
    name: str
    tenant_id: str
    role: Role

    @property
    def actor(self) -> str:
        """How the key is named in journals (``by`` of a cancel, a resume...)."""
        return f"apikey:{self.name or self.key_id}"


@dataclass(frozen=True, slots=True)
class ServiceState:
    """What every request of one app shares: the client, intake routes and the clock;
    ``reveal_roles`` may see the fields tools declare sensitive
    (:mod:`underway.service._reading`)."""

    client: Client
    routes: Routes | None
    replay_window: float
    reveal_roles: frozenset[str] = frozenset({"admin"})
    writes: Writes = field(init=False)
    """The access-log entries and signals of concurrent requests, grouped into shared
    transactions (:mod:`underway.service._batch`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "writes", Writes(self.client.store))

    @property
    def signed_resolutions(self) -> bool:
        """Whether unsigned resolutions and resumes are refused (the client refuses
        them: :attr:`~underway.client.Client.signed_resolutions`)."""
        return self.client.signed_resolutions

    @property
    def store(self) -> Store:
        """The client's store."""
        return self.client.store

    def record_reads(self, request: Request, who: Principal, run_ids: list[str], *,
                     purpose: str = DEFAULT_PURPOSE, revealed: bool = False) -> None:
        """Append one access-log entry per run whose data this request reads, with the
        read's ``purpose`` and whether sensitive fields were ``revealed`` (before the data
        leaves: a read the log could not record is not answered)."""
        self.log_reads(who, self.endpoint_of(request), run_ids, purpose=purpose,
                       revealed=revealed)

    @staticmethod
    def endpoint_of(request: Request) -> str:
        """How the access log names the endpoint a request reached (``GET
        /v1/runs/{run_id}``)."""
        route = request.scope.get("route")
        path = getattr(route, "path", request.url.path)
        return f"{request.method} {path}"

    def log_reads(self, who: Principal, endpoint: str, run_ids: list[str], *,
                  purpose: str = DEFAULT_PURPOSE, revealed: bool = False) -> None:
        """:meth:`record_reads` of a request whose endpoint is named already (a call off
        the event loop, where the request is not to be touched)."""
        self.store.log_access(self.reads(who, endpoint, run_ids, purpose=purpose,
                                         revealed=revealed))

    def reads(self, who: Principal, endpoint: str, run_ids: list[str], *,
              purpose: str = DEFAULT_PURPOSE, revealed: bool = False) -> list[AccessRecord]:
        """The access-log entries of a read (for :attr:`writes`, or :meth:`log_reads`)."""
        now = self.client.clock.now()
        return [AccessRecord(who.tenant_id, now, who.key_id, who.name, run_id, endpoint,
                             purpose=purpose, revealed=revealed) for run_id in run_ids]


def service(request: Request) -> ServiceState:
    """The app's shared state."""
    state: ServiceState = request.app.state.underway
    return state


async def shared(request: Request) -> ServiceState:
    """The app's shared state, as a dependency (async: FastAPI calls a plain function
    dependency on a worker thread, a hop this needs no more than :func:`service` does)."""
    return service(request)


async def principal(request: Request) -> Principal:
    """The key the request was authenticated with (set by the endpoint's permission)."""
    who: Principal = request.state.principal
    return who


State = Annotated[ServiceState, Depends(shared)]
Caller = Annotated[Principal, Depends(principal)]


class _Require:
    """A dependency that authenticates the bearer token and checks one permission."""

    def __init__(self, permission: Permission) -> None:
        self.permission = permission

    async def __call__(
        self, request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise ApiProblem(401, "unauthorized", "Unauthorized",
                             "send an API key as 'Authorization: Bearer <token>'",
                             headers={"WWW-Authenticate": "Bearer"})
        state = service(request)
        record = await run_io(state.store, identify, state.store, credentials.credentials)
        request.state.principal = admit(record, self.permission)


def admit(record: ApiKeyRecord | None, permission: Permission) -> Principal:
    """Who the key ``record`` (from :func:`identify`) is, once it may do ``permission``:
    a 401 problem when there is no such key (unknown, revoked, a wrong secret), a 403
    when its role lacks the permission."""
    if record is None:
        raise ApiProblem(401, "unauthorized", "Unauthorized",
                         "the API key is unknown or revoked",
                         headers={"WWW-Authenticate": "Bearer"})
    role: Role = record.role  # type: ignore[assignment]
    if permission not in PERMISSIONS[role]:
        allowed = ", ".join(roles_with(permission))
        raise ApiProblem(403, "forbidden", "Forbidden",
                         f"a {role} key may not do this; it needs one of: {allowed}")
    return Principal(record.key_id, record.name, record.tenant_id, role)


def still_authorized(store: Store, who: Principal, permission: Permission, *,
                     until: float | None = None, now: float | None = None) -> str | None:
    """Why ``who`` may no longer do ``permission`` (None: it still may), read from the
    store now: its key revoked or gone, moved to another tenant or role that lacks the
    permission, or (``until``, e.g. a console session's expiry) expired. A long-lived
    answer (a live tail) asks before each delivery, so a revocation ends it at once."""
    if until is not None and (time.time() if now is None else now) >= until:
        return "the session expired"
    record = store.get_api_key(who.key_id)
    if record is None or record.revoked_at is not None:
        return "the API key was revoked"
    if record.tenant_id != who.tenant_id or record.role not in ROLES:
        return "the API key changed"
    role: Role = record.role
    if permission not in PERMISSIONS[role]:
        return f"a {role} key may not do this"
    return None


def identify(store: Store, token: str) -> ApiKeyRecord | None:
    """The key behind ``token`` (:func:`~underway.apikeys.authenticate`). Under residency
    a key whose tenant has no region (the configuration changed since it was issued)
    reaches nothing: :class:`~underway.errors.ResidencyError`, before any endpoint tries."""
    record = authenticate(store, token)
    region_of = getattr(store, "region_of", None)
    if record is not None and region_of is not None:
        region_of(record.tenant_id)
    return record


def endpoint(
    router: APIRouter, method: str, path: str, *, permission: Permission,
    run_data: bool = False, problems: tuple[int, ...] = (), **kwargs: Any,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare an endpoint of ``router`` that needs ``permission`` (and, with
    ``run_data``, records its reads in the access log)."""
    extra = dict(kwargs.pop("openapi_extra", None) or {})
    responses = {**problem_responses(400, 401, 403, 413, 422, *problems),
                 **kwargs.pop("responses", {})}
    extra[ROLES_EXTENSION] = list(roles_with(permission))
    extra[RUN_DATA_EXTENSION] = run_data
    return router.api_route(
        path, methods=[method], dependencies=[Depends(_Require(permission))],
        openapi_extra=extra, responses=responses, **kwargs,
    )
