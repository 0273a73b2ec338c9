"""Purging one run: its journal checked, each event's payload turned into a tombstone that
keeps the event's skeleton and its place in the hash chain, all stored in one transaction
(:meth:`~underway.store.retention.RetentionStore.purge_run`)."""

from __future__ import annotations

from ...errors import UnderwayError
from ...events import Tombstone, genesis_hash, is_tombstone, skeleton
from ...journal import Journal
from ...store.base import Purge, RunRecord, StoredEvent
from ._rules import Rule


class Unpurgeable(UnderwayError):
    """A run the sweep leaves as it is, and why (it says so in its report)."""


class AlreadyPurged(Unpurgeable):
    """A run whose journal holds tombstones already."""


def prepare(
    journal: Journal, row: RunRecord, rule: Rule | str, *, sweep_id: str, at: float
) -> Purge:
    """The purge of a finished run.

    Args:
        journal: Reads the run's journal.
        row: The run's row.
        rule: A retention rule, or what the purge record says ordered it.
        sweep_id: The sweep that purges it.
        at: When.

    Raises:
        Unpurgeable: The run's journal does not verify: a purge must never hide what the
            audit would find. Or it is purged in part already. Or it cannot be read
            (encrypted with a key this process does not have): nothing is purged that the
            sweep cannot leave a skeleton of.
    """
    t, r = row.tenant_id, row.run_id
    stored = journal.store.load_events(t, r)
    if any(is_tombstone(s.payload) for s in stored):
        raise AlreadyPurged("its journal holds tombstones already")
    checked = journal.verify_events(t, r, stored, row)
    if not checked.ok:
        raise Unpurgeable(f"its journal fails verification at seq {checked.bad_seq} "
                          f"({checked.reason}); run `underway audit verify`")
    try:
        records = journal.decode(t, r, stored)
    except Exception as exc:
        raise Unpurgeable(f"its events cannot be read here ({type(exc).__name__}: {exc})"
                          ) from None
    prev = genesis_hash(t, r)
    stones = []
    for s, rec in zip(stored, records, strict=True):
        kept = skeleton(s.type, rec.event.model_dump(mode="json"))
        stone = Tombstone.of(seq=s.seq, type=s.type, at=rec.at, kept=kept,
                             payload=s.payload, prev=prev, hash=s.hash)
        stones.append(StoredEvent(s.seq, s.type, stone.encode(), s.hash))
        prev = s.hash
    return Purge(tenant_id=t, run_id=r, last_seq=len(stored), tombstones=stones,
                 sweep_id=sweep_id, at=at,
                 rule=rule if isinstance(rule, str) else rule.describe())
