"""API keys, the access log, consent and the budget ledger of a
:class:`~underway.store.regional.RegionalStore`, each tenant's in its region."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import ConflictError
from ..base import Store
from ..budgets import Outcome
from ..records import AccessHead, AccessRecord, ApiKeyRecord, ConsentRecord, IntakeSecretRecord


class RegionalAccess:
    """The API keys, access log, consent and budget roles of a regional store."""

    if TYPE_CHECKING:  # given by the regional store this is mixed into
        def _of(self, tenant_id: str) -> Store: ...

        def _all(self) -> Iterable[Store]: ...

        regions: dict[str, Store]

        def region_of(self, tenant_id: str) -> str: ...

    def reserve_budget(
        self, tenant_id: str, since: float, key: str, amounts: Mapping[str, float],
        limits: Mapping[str, float], *, baseline: Mapping[str, float] | None = None,
    ) -> Outcome:
        """Reserve against the tenant's budget in its region."""
        return self._of(tenant_id).reserve_budget(tenant_id, since, key, amounts, limits,
                                                  baseline=baseline)

    def settle_budget(self, tenant_id: str, key: str, amounts: Mapping[str, float]) -> None:
        """Settle a call's hold in the tenant's region."""
        self._of(tenant_id).settle_budget(tenant_id, key, amounts)

    def budget_used(self, tenant_id: str, since: float) -> dict[str, float] | None:
        """What the tenant's day holds, from its region."""
        return self._of(tenant_id).budget_used(tenant_id, since)

    def put_api_key(self, rec: ApiKeyRecord) -> None:
        """Store a key in its tenant's region. Its id must be new in every region: a
        token names only its key id, so one id in two regions would be ambiguous."""
        home = self._of(rec.tenant_id)
        for s in self._all():
            if s is not home and s.get_api_key(rec.key_id) is not None:
                raise ConflictError(f"API key id {rec.key_id!r} is taken in another region")
        home.put_api_key(rec)

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key, from whichever region knows its id."""
        for s in self._all():
            found = s.get_api_key(key_id)
            if found is not None:
                return found
        return None

    def list_api_keys(self, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        """Keys of the tenant (from its region), or of every region."""
        if tenant_id is not None:
            return self._of(tenant_id).list_api_keys(tenant_id)
        return sorted((k for s in self._all() for k in s.list_api_keys()),
                      key=lambda k: (k.created_at, k.key_id))

    def revoke_api_key(self, tenant_id: str, key_id: str, *, at: float) -> bool:
        """Revoke a key in the tenant's region."""
        return self._of(tenant_id).revoke_api_key(tenant_id, key_id, at=at)

    def put_intake_secret(self, rec: IntakeSecretRecord) -> None:
        """Set a webhook secret in its tenant's region."""
        self._of(rec.tenant_id).put_intake_secret(rec)

    def get_intake_secret(self, tenant_id: str, source: str) -> IntakeSecretRecord | None:
        """A webhook secret, from the tenant's region."""
        return self._of(tenant_id).get_intake_secret(tenant_id, source)

    def list_intake_secrets(self, tenant_id: str) -> list[IntakeSecretRecord]:
        """The tenant's webhook secrets, from its region."""
        return self._of(tenant_id).list_intake_secrets(tenant_id)

    def delete_intake_secret(self, tenant_id: str, source: str) -> bool:
        """Remove a webhook secret in the tenant's region."""
        return self._of(tenant_id).delete_intake_secret(tenant_id, source)

    def log_access(self, records: Sequence[AccessRecord]) -> list[AccessRecord]:
        """Append each tenant's entries to its region's log (and its chain there); the
        stored entries, in the order given."""
        by_region: dict[str, list[AccessRecord]] = {}
        for rec in records:
            by_region.setdefault(self.region_of(rec.tenant_id), []).append(rec)
        stored: dict[int, AccessRecord] = {}
        for region, found in by_region.items():
            for rec, kept in zip(found, self.regions[region].log_access(found), strict=True):
                stored[id(rec)] = kept
        return [stored[id(rec)] for rec in records]

    def access_chain(self, tenant_id: str, *, after: int = 0,
                     limit: int = 1000) -> list[AccessRecord]:
        """The tenant's chained entries, from its region."""
        return self._of(tenant_id).access_chain(tenant_id, after=after, limit=limit)

    def access_head(self, tenant_id: str) -> AccessHead | None:
        """The end of the tenant's chain, in its region."""
        return self._of(tenant_id).access_head(tenant_id)

    def list_access(self, tenant_id: str, **filters: Any) -> list[AccessRecord]:
        """The tenant's access log, from its region."""
        return self._of(tenant_id).list_access(tenant_id, **filters)

    def record_consent(self, rec: ConsentRecord) -> ConsentRecord:
        """Record a consent change in its tenant's region."""
        return self._of(rec.tenant_id).record_consent(rec)

    def current_consents(
        self, tenant_id: str, subject: str, purposes: Sequence[str] | None = None
    ) -> dict[str, ConsentRecord]:
        """Where a subject's consent stands, from the tenant's region."""
        return self._of(tenant_id).current_consents(tenant_id, subject, purposes)

    def consent_history(
        self, tenant_id: str, subject: str, *, purpose: str | None = None
    ) -> list[ConsentRecord]:
        """A subject's consent records, from the tenant's region."""
        return self._of(tenant_id).consent_history(tenant_id, subject, purpose=purpose)

    def span_cursor(self, tenant_id: str, run_id: str) -> int:
        """The seq the run's spans were exported up to, in its tenant's region."""
        return self._of(tenant_id).span_cursor(tenant_id, run_id)

    def advance_span_cursor(self, tenant_id: str, run_id: str, seq: int) -> None:
        """Move the run's span cursor, in its tenant's region."""
        self._of(tenant_id).advance_span_cursor(tenant_id, run_id, seq)

    def unexported_runs(self, *, since: float, limit: int) -> list[tuple[str, str]]:
        """Runs of every region whose head is past their span cursor."""
        found: list[tuple[str, str]] = []
        for store in self.regions.values():
            found += store.unexported_runs(since=since, limit=limit - len(found))
            if len(found) >= limit:
                break
        return found
