"""The protocol every knowledge base backend implements."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from ..errors import ConfigurationError
from ..subjects import subject_of_write
from ._record import KnowledgeHit, KnowledgeRecord, Reindexed, Sensitivity

__all__ = ["KNOWLEDGE_SCHEMA_VERSION", "KnowledgeBase", "written_record"]

KNOWLEDGE_SCHEMA_VERSION = 16
"""The first store schema version with the knowledge tables as this code reads them (made by
migration 0007; migration 0014 added the column a sealed record is kept in, 0015 its data
subject, 0016 the terms a record is indexed under as this code splits words)."""


class KnowledgeBase(Protocol):
    """Long-term knowledge of tenants, kept apart from run execution state.

    Every method takes the tenant and sees only that tenant's records. Methods block on the
    database; call them from a thread (a synchronous tool runs in one) in async code.
    """

    def put(self, record: KnowledgeRecord) -> None:
        """Store ``record``, replacing the tenant's record with the same id.

        Written from a run about a data subject (a step, or a tool it calls), the record
        is stored about that subject (:func:`written_record`)."""
        ...

    def get(
        self, tenant_id: str, record_id: str, *, now: float | None = None
    ) -> KnowledgeRecord | None:
        """The tenant's record with this id, or None.

        Access roles and sensitivity are not checked: this is for the application, not for a
        reader.

        Args:
            tenant_id: The tenant.
            record_id: The record's id.
            now: With it, a record expired at that time reads as absent.
        """
        ...

    def search(
        self,
        tenant_id: str,
        query: str,
        *,
        roles: Collection[str],
        now: float,
        limit: int = 10,
        max_sensitivity: Sensitivity = "sensitive",
    ) -> list[KnowledgeHit]:
        """The tenant's records that match any word of ``query``, best first.

        Only records a reader with ``roles`` may read, labelled at most ``max_sensitivity``, and
        not expired at ``now``. A query without words finds nothing.

        Args:
            tenant_id: The tenant.
            query: The words to match.
            roles: The reader's roles. A record without roles is open to every role.
            now: The time now; records expired then are left out.
            limit: The most records returned.
            max_sensitivity: The highest sensitivity label returned.
        """
        ...

    def delete(self, tenant_id: str, record_id: str) -> bool:
        """Erase the record now (right to erasure); False when there was none."""
        ...

    def purge_expired(self, now: float) -> int:
        """Erase every record of every tenant expired at ``now``; return how many."""
        ...

    def delete_subject(self, tenant_id: str, subject: str) -> int:
        """Erase every record of the tenant about data subject ``subject`` (an erasure
        of the subject); return how many."""
        ...

    def reindex(self, *, tenant_id: str | None = None) -> Reindexed:
        """Index every record (of ``tenant_id``, else of every tenant) again under the words
        this version splits its text into — after an upgrade changed how text is split
        into words (migration 0016: combining marks belong to their word). A sealed record
        needs its tenant's keys; one without them here is counted and left as it was.
        Records written meanwhile are indexed by their writer and left alone. Safe to run
        again, and beside running searches and writes."""
        ...

    def close(self) -> None:
        """Release what this knowledge base opened itself (not a store it was given)."""
        ...


def check_key(what: str, value: str) -> None:
    """Raise ConfigurationError unless ``value`` is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{what} must be a non-empty string, not {value!r}")


def written_record(record: KnowledgeRecord) -> KnowledgeRecord:
    """``record`` as every backend stores it: about the acting run's data subject, if any.

    This is where knowledge written from a run takes the run's subject, whatever wrote it
    (:func:`~underway.knowledge.remember_tool`, another tool, a step calling
    :meth:`KnowledgeBase.put`). So it is sealed under the subject's key, and erasing the
    subject deletes it and counts it.

    Args:
        record: The record to store.

    Raises:
        ConfigurationError: ``record`` is not a :class:`KnowledgeRecord`, or the acting run
            is about a subject and the record names another, or another tenant.
    """
    if not isinstance(record, KnowledgeRecord):
        raise ConfigurationError(
            f"put() takes a KnowledgeRecord, not {type(record).__name__}; build one with "
            "KnowledgeRecord(tenant_id=..., text=..., source=..., created_at=...)"
        )
    subject = subject_of_write(record.tenant_id, record.subject,
                               what=f"knowledge record {record.id!r}")
    if subject == record.subject:
        return record
    return record.model_copy(update={"subject": subject})
