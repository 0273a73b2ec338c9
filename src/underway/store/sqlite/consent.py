"""The append-only consent records of :class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from ..records import ConsentRecord
from .connection import _Q, Connection


class Consent(Connection):
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

    def current_consents(
        self, tenant_id: str, subject: str, purposes: Sequence[str] | None = None
    ) -> dict[str, ConsentRecord]:
        """The latest record of each purpose of the subject."""
        rows = self._query_named(
            "current_consents", tenant_id=tenant_id, subject=subject,
            purposes=None if purposes is None else json.dumps(list(purposes)),
        )
        return {r[2]: ConsentRecord(*r) for r in rows}

    def consent_history(
        self, tenant_id: str, subject: str, *, purpose: str | None = None
    ) -> list[ConsentRecord]:
        """Every record of the subject, oldest first."""
        rows = self._query_named("consent_history", tenant_id=tenant_id, subject=subject,
                                 purpose=purpose)
        return [ConsentRecord(*r) for r in rows]
