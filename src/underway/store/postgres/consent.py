"""The append-only consent records of :class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..records import ConsentRecord
from .connection import _Q, Connection


class Consent(Connection):
    """:class:`~underway.store.consent.ConsentStore` on PostgreSQL."""

    def record_consent(self, rec: ConsentRecord) -> ConsentRecord:
        """Append a consent change, numbered."""
        with self._pool.connection() as conn:
            row = conn.execute(_Q["record_consent"], {
                "tenant_id": rec.tenant_id, "subject": rec.subject, "purpose": rec.purpose,
                "state": rec.state, "reference": rec.reference, "by": rec.by, "at": rec.at,
            }).fetchone()
        assert row is not None
        return dataclasses.replace(rec, seq=int(row[0]))

    def current_consents(
        self, tenant_id: str, subject: str, purposes: Sequence[str] | None = None
    ) -> dict[str, ConsentRecord]:
        """The latest record of each purpose of the subject."""
        rows = self._all("current_consents", tenant_id=tenant_id, subject=subject,
                         purposes=None if purposes is None else list(purposes))
        return {r[2]: ConsentRecord(*r) for r in rows}

    def consent_history(
        self, tenant_id: str, subject: str, *, purpose: str | None = None
    ) -> list[ConsentRecord]:
        """Every record of the subject, oldest first."""
        rows = self._all("consent_history", tenant_id=tenant_id, subject=subject,
                         purpose=purpose)
        return [ConsentRecord(*r) for r in rows]
