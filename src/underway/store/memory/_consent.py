"""The in-memory store's consent records (:class:`~underway.store.consent.ConsentStore`):
appended, numbered, never changed."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from ..records import ConsentRecord


class MemoryConsent:
    """Consent records held in process memory."""

    def __init__(self) -> None:
        self._consent_lock = threading.Lock()
        self._consents: list[ConsentRecord] = []

    def record_consent(self, rec: ConsentRecord) -> ConsentRecord:
        """Append a consent change, numbered."""
        with self._consent_lock:
            stored = dataclasses.replace(rec, seq=len(self._consents) + 1)
            self._consents.append(stored)
        return stored

    def current_consents(
        self, tenant_id: str, subject: str, purposes: Sequence[str] | None = None
    ) -> dict[str, ConsentRecord]:
        """The latest record of each purpose of the subject."""
        wanted = None if purposes is None else set(purposes)
        found: dict[str, ConsentRecord] = {}
        for rec in self.consent_history(tenant_id, subject):
            if wanted is None or rec.purpose in wanted:
                found[rec.purpose] = rec
        return dict(sorted(found.items()))

    def consent_history(
        self, tenant_id: str, subject: str, *, purpose: str | None = None
    ) -> list[ConsentRecord]:
        """Every record of the subject, oldest first."""
        with self._consent_lock:
            return [r for r in self._consents
                    if r.tenant_id == tenant_id and r.subject == subject
                    and (purpose is None or r.purpose == purpose)]
