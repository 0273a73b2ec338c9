"""The access log role: an append-only, tamper-evident record of every read of a run's data
through the API, the console and the CLI (who, when, which tenant and run, where, why,
and whether sensitive fields were shown).

There is no way to change or remove an entry: the protocol has none, and on SQLite and
PostgreSQL triggers refuse ``UPDATE`` and ``DELETE`` on the table (and ``TRUNCATE`` on
PostgreSQL). Someone with the database's owner rights can drop the triggers, so each
tenant's entries also form a hash chain: an entry's ``hash`` is :func:`entry_hash` of its
fields and ``prev_hash``, the hash of the tenant's entry before it (:func:`genesis` for the
first), and the store keeps the chain's head (:class:`~underway.store.records.AccessHead`)
beside it. Appends of one tenant are serialized by the store (``BEGIN IMMEDIATE`` on
SQLite, a lock on the head's row on PostgreSQL), so appends from many processes keep one
line. :func:`verify_access_log` walks a chain and names the first entry that was altered,
inserted, or follows a deleted one, and a tail cut off after the head. A chain re-hashed
from end to end by someone who can also rewrite the head is not caught here: that needs
the head kept outside the database.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..events import canonical_json
from .records import AccessHead, AccessRecord

__all__ = [
    "ALL_RUNS",
    "DEFAULT_PURPOSE",
    "PURPOSES",
    "PURPOSE_MAX",
    "AccessLogStore",
    "AccessVerdict",
    "check_purpose",
    "entry_hash",
    "genesis",
    "link",
    "verify_access_log",
]


ALL_RUNS = "*"
"""The ``run_id`` of an entry that read every run of its tenant together (usage)."""
DEFAULT_PURPOSE = "operations"
"""The purpose of a read that names none."""
PURPOSES = ("operations", "support", "audit", "legal", "investigation", "data-request")
"""Purposes the console offers; any other text is accepted (:func:`check_purpose`)."""
PURPOSE_MAX = 100
"""The longest purpose, in characters."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_purpose(purpose: str) -> str:
    """``purpose`` without surrounding spaces; :class:`ValueError` naming the problem when
    it is empty, longer than :data:`PURPOSE_MAX` characters or holds a control character
    (a line break would forge the log's lines)."""
    text = purpose.strip()
    if not text:
        raise ValueError("a purpose must not be empty")
    if len(text) > PURPOSE_MAX:
        raise ValueError(f"a purpose is at most {PURPOSE_MAX} characters, not {len(text)}")
    if _CONTROL.search(text):
        raise ValueError("a purpose must not hold control characters (line breaks, tabs)")
    return text


class AccessLogStore(Protocol):
    """Appends to and reads the access log."""

    def log_access(self, records: Sequence[AccessRecord]) -> list[AccessRecord]:
        """Append the records, in order, in one transaction, each linked to the end of its
        tenant's chain; return them as stored (their ``seq``, ``prev_hash`` and ``hash``
        given by the store, whatever the records said)."""
        ...

    def list_access(
        self, tenant_id: str, *, run_id: str | None = None, key_id: str | None = None,
        since: float | None = None, until: float | None = None, before: int | None = None,
        limit: int = 100, who: str | None = None, purpose: str | None = None,
    ) -> list[AccessRecord]:
        """A tenant's entries, newest first (``seq`` descending).

        Args:
            tenant_id: The tenant.
            run_id: Only the entries of this run.
            key_id: Only the entries by this API key.
            since: Only entries at or after this time.
            until: Only entries before this time.
            before: Only entries with ``seq`` below it: the last ``seq`` of the previous page.
            limit: The most entries returned.
            who: Only the entries by this key name, or by this CLI user.
            purpose: Only the entries for this purpose.
        """
        ...

    def access_chain(self, tenant_id: str, *, after: int = 0,
                     limit: int = 1000) -> list[AccessRecord]:
        """A tenant's entries in the order of their chain (``seq`` ascending).

        Args:
            tenant_id: The tenant.
            after: Only entries with ``seq`` above it.
            limit: The most entries returned.
        """
        ...

    def access_head(self, tenant_id: str) -> AccessHead | None:
        """The end of the tenant's chain as the store last extended it (None before its
        first chained entry)."""
        ...


def genesis(tenant_id: str) -> str:
    """The ``prev_hash`` of a tenant's first chained entry: bound to the tenant, so a
    chain cannot be passed off as another tenant's."""
    return hashlib.sha256(b"underway access log\0" + tenant_id.encode("utf-8")).hexdigest()


def entry_hash(prev_hash: str, rec: AccessRecord) -> str:
    """SHA-256 (hex) of ``prev_hash`` and the entry's canonical fields (all but ``seq``,
    which the database assigns, and the hashes)."""
    body = canonical_json({
        "tenant_id": rec.tenant_id, "at": rec.at, "key_id": rec.key_id,
        "key_name": rec.key_name, "run_id": rec.run_id, "endpoint": rec.endpoint,
        "purpose": rec.purpose, "revealed": rec.revealed,
    })
    return hashlib.sha256(prev_hash.encode("ascii") + b"\n" + body).hexdigest()


def link(rec: AccessRecord, prev_hash: str) -> AccessRecord:
    """``rec`` linked after ``prev_hash``: its ``prev_hash`` and ``hash`` set (a store
    calls this with the head of the tenant's chain, holding the chain's lock)."""
    return AccessRecord(
        rec.tenant_id, rec.at, rec.key_id, rec.key_name, rec.run_id, rec.endpoint, rec.seq,
        rec.purpose, bool(rec.revealed), prev_hash, entry_hash(prev_hash, rec),
    )


@dataclass(frozen=True, slots=True)
class AccessVerdict:
    """What :func:`verify_access_log` found in a tenant's chain: ``ok`` when intact;
    ``entries`` chained entries checked, ``legacy`` entries from before the chain
    (migration 0012, no hash); otherwise ``bad_seq``, the first bad entry, and
    ``problem``, what is wrong with it."""

    tenant_id: str
    ok: bool
    entries: int
    legacy: int
    bad_seq: int | None = None
    problem: str = ""


def verify_access_log(store: AccessLogStore, tenant_id: str, *,
                      page: int = 1000) -> AccessVerdict:
    """Walk the tenant's chain from its start and check every link and hash, then the head.

    It finds the first entry that was altered (its hash does not match its fields). It finds
    one inserted, or following a deleted entry (its ``prev_hash`` is not the hash before it).
    It finds one lying beyond the head, and a tail missing after the last entry (the head
    names a later one).

    Appends may go on meanwhile. The walk goes as far as the head read first, and follows
    the head as long as it moves.

    Args:
        store: The store holding the log.
        tenant_id: The tenant whose chain is walked.
        page: How many entries are read a query.

    Returns:
        The verdict: intact, or the first bad entry and what is wrong with it.
    """
    walk = _Walk(tenant_id)
    head = store.access_head(tenant_id)
    while True:
        found = walk.run(store, head.seq if head is not None else None, page)
        if found is not None:
            return found
        beyond = store.access_chain(tenant_id, after=walk.after, limit=1)
        if not beyond and (head is not None or not walk.chained):
            break
        again = store.access_head(tenant_id)
        if again == head:
            if head is None:
                return walk.bad(walk.last_seq, "the chain has entries but no head: the head "
                                               "was removed")
            return walk.bad(beyond[0].seq, f"it lies beyond the head of the chain (seq "
                                           f"{head.seq}): it was inserted, or the head was "
                                           "set back")
        head = again
    if head is None:
        return walk.verdict()
    if head.seq > walk.last_seq:
        return walk.bad(head.seq, f"the head ends the chain at seq {head.seq} after "
                                  f"{head.entries} entries, but {walk.chained} remain, the "
                                  f"last at seq {walk.last_seq or '-'}: entries at its end "
                                  "were deleted")
    if (head.hash, head.entries) != (walk.prev, walk.chained):
        return walk.bad(walk.last_seq, f"the head (seq {head.seq}, {head.entries} entries) "
                                       "does not match the chain's last entry: the head was "
                                       "altered")
    return walk.verdict()


class _Walk:
    """Where a verification is in a tenant's chain."""

    def __init__(self, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        self.prev = genesis(tenant_id)
        self.chained = self.legacy = self.last_seq = self.after = 0

    def bad(self, seq: int, problem: str) -> AccessVerdict:
        return AccessVerdict(self.tenant_id, False, self.chained, self.legacy, seq, problem)

    def verdict(self) -> AccessVerdict:
        return AccessVerdict(self.tenant_id, True, self.chained, self.legacy)

    def run(self, store: AccessLogStore, upto: int | None, page: int) -> AccessVerdict | None:
        """Check the entries after the last one checked, up to seq ``upto`` (None: all);
        the verdict on the first bad one, else None."""
        while batch := store.access_chain(self.tenant_id, after=self.after, limit=page):
            for rec in batch:
                if upto is not None and rec.seq > upto:
                    return None
                self.after = rec.seq
                found = self._check(rec)
                if found is not None:
                    return found
        return None

    def _check(self, rec: AccessRecord) -> AccessVerdict | None:
        if rec.hash == "" and rec.prev_hash == "":
            if self.chained:
                return self.bad(rec.seq, "it has no hash, yet entries before it are "
                                         "chained: it was inserted")
            self.legacy += 1
            return None
        if rec.prev_hash != self.prev:
            return self.bad(rec.seq, "it does not follow the entry before it"
                            + (f" (seq {self.last_seq})" if self.last_seq else "")
                            + ": an entry between them was deleted, or this one was inserted")
        if entry_hash(self.prev, rec) != rec.hash:
            return self.bad(rec.seq, "its fields do not match its hash: it was altered")
        self.prev, self.last_seq, self.chained = rec.hash, rec.seq, self.chained + 1
        return None
