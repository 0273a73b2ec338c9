"""The append-only consent records of :class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

import dataclasses

from .._sqlbase.consent import SQLConsent
from ..records import ConsentRecord
from ._connection import _Q, Connection


class Consent(SQLConsent, Connection):
    """:class:`~underway.store.consent.ConsentStore` on SQLite."""

    def record_consent(self, rec: ConsentRecord) -> ConsentRecord:
        """Append a consent change, numbered."""
        with self._tx() as c:
            cur = c.execute(_Q["record_consent"], (
                rec.tenant_id, rec.subject, rec.purpose, rec.state, rec.reference, rec.by,
                rec.at,
            ))
            seq = cur.lastrowid
        assert seq is not None
        return dataclasses.replace(rec, seq=seq)
