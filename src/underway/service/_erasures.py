"""``/v1/erasures``: erase a data subject of the key's tenant by crypto-shredding
(:mod:`underway.privacy.erasure`), and the erasure log. Both need an ``admin`` key: an erasure
cannot be undone. A refusal (a legal hold, a run of the subject not ended, no keys to read
what must keep its skeleton) is a 409 that says why and destroys nothing; with
``cancel_active`` the runs not ended are asked to cancel first (journaled), and the erasure
is refused until a worker has ended them — ask again then."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from ..privacy import erasure
from ..privacy.erasure import ErasureRefused
from ..store.records import ErasureRecord
from ._auth import Caller, State, endpoint
from ._inputs import CheckedRoute
from ._models import Subject, _Request
from ._problems import conflict

router = APIRouter(prefix="/v1/erasures", tags=["erasure"], route_class=CheckedRoute)


class ErasureRequest(_Request):
    """Erase ``subject`` for ``reason`` (the key's name is recorded as who asked)."""

    subject: Subject
    reason: str = Field(min_length=1, max_length=500)
    cancel_active: bool = False


class ErasureEntry(BaseModel):
    """One erasure as logged: what it destroyed, and what became of the subject's secret
    in the key provider's vault (``destroyed``, ``absent``, ``none``: backups not reached)."""

    seq: int
    subject: str
    erased_at: float
    by: str
    reason: str
    runs: int
    knowledge: int
    keys: int
    vault: str

    @classmethod
    def of(cls, r: ErasureRecord) -> ErasureEntry:
        """The entry of a logged erasure."""
        return cls(seq=r.seq, subject=r.subject, erased_at=r.erased_at, by=r.by,
                   reason=r.reason, runs=r.runs, knowledge=r.knowledge, keys=r.keys,
                   vault=r.vault)


@endpoint(router, "POST", "", permission="admin", response_model=ErasureEntry,
          status_code=201)
def erase_subject(state: State, who: Caller, body: ErasureRequest) -> ErasureEntry:
    """Erase a data subject: its runs reduced to their skeleton, its knowledge records
    deleted, its keys destroyed; the erasure logged."""
    try:
        done = erasure.erase_subject(state.store, body.subject, by=who.actor, reason=body.reason,
                             tenant_id=who.tenant_id, cancel_active=body.cancel_active,
                             wait=0.0)
    except ErasureRefused as exc:
        raise conflict(f"erasure refused: {exc}") from None
    return ErasureEntry.of(done.record)


@endpoint(router, "GET", "", permission="admin", response_model=list[ErasureEntry])
def list_erasures(state: State, who: Caller,
        subject: Annotated[Subject | None, Query()] = None) -> list[ErasureEntry]:
    """The tenant's erasure log, oldest first (of one subject, when given)."""
    return [ErasureEntry.of(r) for r in state.store.list_erasures(who.tenant_id,
                                                                  subject=subject)]
