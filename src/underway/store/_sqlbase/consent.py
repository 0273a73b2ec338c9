"""Reading consent records, as both SQL dialects run it (appending one differs by
dialect)."""

from __future__ import annotations

from collections.abc import Sequence

from ..records import ConsentRecord
from .dialect import SQLBase


class SQLConsent(SQLBase):
    """The shared part of :class:`~underway.store.consent.ConsentStore`."""

    def current_consents(
        self, tenant_id: str, subject: str, purposes: Sequence[str] | None = None
    ) -> dict[str, ConsentRecord]:
        """The latest record of each purpose of the subject."""
        rows = self._all("current_consents", tenant_id=tenant_id, subject=subject,
                         purposes=None if purposes is None else self._array(purposes))
        return {r[2]: ConsentRecord(*r) for r in rows}

    def consent_history(
        self, tenant_id: str, subject: str, *, purpose: str | None = None
    ) -> list[ConsentRecord]:
        """Every record of the subject, oldest first."""
        rows = self._all("consent_history", tenant_id=tenant_id, subject=subject,
                         purpose=purpose)
        return [ConsentRecord(*r) for r in rows]
