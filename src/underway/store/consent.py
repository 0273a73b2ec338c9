"""The consent role: an append-only record of each data subject's consent, per purpose.

Every grant and every withdrawal is a new :class:`~underway.store.records.ConsentRecord`;
none is ever changed or removed (the protocol has no method for it, and on SQLite and
PostgreSQL triggers refuse ``UPDATE`` and ``DELETE`` on the table, ``TRUNCATE`` too on
PostgreSQL). So where a subject's consent stands now and how it got there are both
answered from the same records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .records import ConsentRecord

__all__ = ["ConsentStore"]


class ConsentStore(Protocol):
    """Records consent changes and answers where consent stands."""

    def record_consent(self, rec: ConsentRecord) -> ConsentRecord:
        """Append ``rec`` (its ``seq`` is ignored) and return it as stored, numbered: a
        record's ``seq`` is above every earlier record's."""
        ...

    def current_consents(
        self, tenant_id: str, subject: str, purposes: Sequence[str] | None = None
    ) -> dict[str, ConsentRecord]:
        """The latest record of each of the subject's purposes, by purpose.

        A purpose with no record is absent. It is one query, whatever the number of purposes:
        what a policy decision reads at call time.

        Args:
            tenant_id: The subject's tenant.
            subject: The data subject.
            purposes: Only these purposes (None: every one).
        """
        ...

    def consent_history(
        self, tenant_id: str, subject: str, *, purpose: str | None = None
    ) -> list[ConsentRecord]:
        """Every record of the subject, oldest first.

        Args:
            tenant_id: The subject's tenant.
            subject: The data subject.
            purpose: Only the records of this purpose (None: of every one).
        """
        ...
