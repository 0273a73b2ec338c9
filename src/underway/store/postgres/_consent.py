"""The append-only consent records of :class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

import dataclasses

from .._sqlbase.consent import SQLConsent
from ..records import ConsentRecord
from ._connection import _Q, Connection


class Consent(SQLConsent, Connection):
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
