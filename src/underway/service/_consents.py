"""``/v1/consents``: a data subject's consent per purpose, in the key's tenant. Recording a
grant or a withdrawal needs an ``operator`` (or ``admin``) key — the systems that collect
consent act as operators, and a withdrawal must be as easy to record as a grant; reading
needs ``read``. Records are appended, never changed: the answer holds where consent stands
for each purpose and the history that led there."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from ..store.base import ConsentRecord
from ..subjects import ConsentState
from ._auth import Caller, State, endpoint
from ._inputs import CheckedRoute
from ._models import Purpose, Reference, Subject, _Request

router = APIRouter(prefix="/v1/consents", tags=["consent"], route_class=CheckedRoute)


class ConsentChange(_Request):
    """Record that ``subject`` grants or withdraws consent to ``purpose`` from now on;
    ``reference`` names the consent artefact (a consent manager's id, a signed form). The
    key's name is recorded as who made the change."""

    subject: Subject
    purpose: Purpose
    state: ConsentState
    reference: Reference | None = None


class ConsentEntry(BaseModel):
    """One recorded change: ``seq`` orders them, ``by`` is who recorded it."""

    seq: int
    subject: str
    purpose: str
    state: ConsentState
    reference: str | None
    by: str
    at: float

    @classmethod
    def of(cls, r: ConsentRecord) -> ConsentEntry:
        """The entry of a stored record."""
        return cls(seq=r.seq, subject=r.subject, purpose=r.purpose,
                   state="granted" if r.state == "granted" else "withdrawn",
                   reference=r.reference, by=r.by, at=r.at)


class SubjectConsents(BaseModel):
    """Where the subject's consent stands for each purpose (the latest change of each,
    by purpose), and every change oldest first."""

    subject: str
    current: list[ConsentEntry]
    history: list[ConsentEntry]


@endpoint(router, "POST", "", permission="steer", response_model=ConsentEntry,
          status_code=201)
def record_consent(state: State, who: Caller, body: ConsentChange) -> ConsentEntry:
    """Record a grant or a withdrawal. A withdrawal stops the subject's runs at their next
    call that a policy rule requires this consent for (denied, and journaled with the rule
    and the reason)."""
    change = (state.client.grant_consent if body.state == "granted"
              else state.client.withdraw_consent)
    rec = change(body.subject, body.purpose, by=who.actor, reference=body.reference,
                 tenant_id=who.tenant_id)
    return ConsentEntry.of(rec)


@endpoint(router, "GET", "", permission="read", response_model=SubjectConsents)
def get_consents(
    state: State, who: Caller, subject: Annotated[Subject, Query()],
    purpose: Annotated[Purpose | None, Query()] = None,
) -> SubjectConsents:
    """Where a subject's consent stands, and its history (of ``purpose`` only, when
    given)."""
    current = state.client.consents(subject, tenant_id=who.tenant_id)
    history = state.client.consent_history(subject, purpose=purpose, tenant_id=who.tenant_id)
    return SubjectConsents(
        subject=subject,
        current=[ConsentEntry.of(r) for p, r in current.items()
                 if purpose is None or p == purpose],
        history=[ConsentEntry.of(r) for r in history],
    )
