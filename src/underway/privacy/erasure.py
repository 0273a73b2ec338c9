"""Erasing a data subject by crypto-shredding (``underway erase subject``; see
docs/data-protection.md).

What is about a data subject is sealed under the subject's own data key (a run's events,
checkpoints, blobs, error and signals when the run names its ``subject``; knowledge records
that name it). :func:`erase_subject`, in this order, each step safe to repeat after a crash:

1. refuses when a legal hold stands on the subject or one of its runs, or when a run of the
   subject is still active (unless asked to cancel them first: then it asks for each to be
   cancelled, and erases only once every one has ended);
2. reduces each of the subject's runs to its skeleton — every event's payload replaced by
   a tombstone that keeps its type, time, policy outcome and place in the hash chain, its
   checkpoints and signals deleted — in one transaction per run, as a retention purge does;
3. deletes the subject's knowledge records;
4. destroys the subject's secret in the key provider's vault (:mod:`underway.crypto.vault`):
   its data keys, wrapped by that secret, can no longer be unwrapped from any backup;
5. destroys the subject's data keys in the database and appends the erasure to the erasure
   log, in one transaction; from then on no key is made for the subject again, so nothing
   about it is sealed (a run started for it is refused).

The journal still verifies (``underway audit verify``): tombstones keep the chain.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .. import faults
from ..client import Client
from ..crypto.envelope import Envelope, NoKeys
from ..crypto.vault import vault_of
from ..errors import ConfigurationError, UnderwayError
from ..journal import Journal
from ..knowledge import KnowledgeBase, open_knowledge
from ..store.base import FINAL, RunRecord, Store
from ..store.features import privacy
from ..store.records import ERASURE_PREFIX, ErasureRecord
from ..store.regional import RegionalStore
from ..subjects import check_subject
from .retention._purge import AlreadyPurged, Unpurgeable, prepare

__all__ = ["ErasureRefused", "ErasureResult", "erase_subject"]


class ErasureRefused(UnderwayError):
    """An erasure that did not destroy anything yet, and why: a legal hold, runs still
    active, a journal that does not verify, or no keys to read what must be reduced to its
    skeleton. ``runs`` names the runs concerned."""

    def __init__(self, message: str, runs: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.runs = list(runs)
        """The runs the refusal is about."""


@dataclass(frozen=True)
class ErasureResult:
    """What an erasure did: its log entry, the runs reduced to their skeleton now, and
    those that were already (an earlier attempt, or retention)."""

    record: ErasureRecord
    purged: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)


def erase_subject(
    store: Store,
    subject: str,
    *,
    by: str,
    reason: str,
    tenant_id: str = "default",
    cancel_active: bool = False,
    wait: float = 60.0,
    knowledge: KnowledgeBase | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ErasureResult:
    """Erase a data subject of the tenant (see the module's docstring).

    Args:
        store: The store.
        subject: The data subject.
        by: Who erases it.
        reason: Why.
        tenant_id: The subject's tenant.
        cancel_active: Ask the subject's active runs to cancel, and wait for a worker to end
            them.
        wait: Seconds to wait for that.
        knowledge: The knowledge base to erase the subject's records from. By default, the
            one in the store's database.
        sleep: Waits between looks; injectable for tests.

    Raises:
        ErasureRefused: The erasure may not or cannot go ahead. Nothing was destroyed.
    """
    check_subject(subject)
    if not by.strip() or not reason.strip():
        raise ConfigurationError("an erasure needs who asks for it (by) and why (reason)")
    if isinstance(store.codec.sealer, NoKeys):
        raise ErasureRefused(
            "the database holds encrypted payloads and no keys were given: the subject's "
            f"runs cannot be read to keep their skeleton ({store.codec.sealer.why})")
    runs = store.runs_of_subject(tenant_id, subject)
    _refuse_held(store, tenant_id, subject, runs)
    active = [r for r in runs if r.status not in FINAL]
    if active:
        if not cancel_active:
            raise ErasureRefused(
                f"{len(active)} run(s) of data subject {subject!r} are still active ("
                f"{_names(active)}): their steps would go on writing about the subject. "
                "Cancel them first (--cancel-active asks for it and waits)",
                [r.run_id for r in active])
        _cancel(store, active, by=by, reason=reason, wait=wait, sleep=sleep)
        runs = store.runs_of_subject(tenant_id, subject)
    journal = Journal(store)
    sweep_id = f"{ERASURE_PREFIX}{uuid.uuid4().hex[:12]}"
    rule = f"erasure of a data subject by {by}: {reason}"
    purged, already = [], []
    for row in runs:
        faults.point("erasure.before_purge")
        if _purge(journal, row, rule, sweep_id):
            purged.append(row.run_id)
        else:
            already.append(row.run_id)
    kb = knowledge if knowledge is not None else _knowledge(store, tenant_id)
    removed = kb.delete_subject(tenant_id, subject) if kb is not None else 0
    faults.point("erasure.before_vault")
    envelope = store.codec.sealer
    provider = envelope.keys.provider if isinstance(envelope, Envelope) else None
    vault = vault_of(provider) if provider is not None else None
    state = "none" if vault is None else (
        "destroyed" if vault.destroy_subject(tenant_id, subject) else "absent")
    faults.point("erasure.before_log")
    record = store.erase_subject(ErasureRecord(
        tenant_id=tenant_id, subject=subject, erased_at=time.time(), by=by, reason=reason,
        runs=len(purged), knowledge=removed, keys=0, vault=state,
    ))
    if isinstance(envelope, Envelope):
        envelope.keys.forget(tenant_id)
    return ErasureResult(record, purged, already)


def _names(runs: Sequence[RunRecord]) -> str:
    shown = ", ".join(f"{r.run_id} ({r.status})" for r in runs[:10])
    return shown + (f" and {len(runs) - 10} more" if len(runs) > 10 else "")


def _refuse_held(store: Store, tenant_id: str, subject: str, runs: Sequence[RunRecord]) -> None:
    ids = {r.run_id for r in runs}
    holds = [h for h in store.list_holds(tenant_id)
             if (h.kind == "subject" and h.target == subject)
             or (h.kind == "run" and h.target in ids)]
    if holds:
        said = "; ".join(f"{h.kind} {h.target} by {h.by}: {h.reason}" for h in holds)
        raise ErasureRefused(
            f"legal hold(s) stand on data subject {subject!r} or its runs ({said}): what "
            "they hold must be kept. Release them (`underway hold release`) to erase",
            [h.target for h in holds if h.kind == "run"])


def _cancel(store: Store, active: Sequence[RunRecord], *, by: str, reason: str, wait: float,
            sleep: Callable[[float], None]) -> None:
    client = Client(store)
    for row in active:
        client.cancel(row.run_id, by=by, reason=f"erasure of its data subject: {reason}",
                      tenant_id=row.tenant_id)
    deadline = time.monotonic() + wait
    while True:
        left = [r for r in active
                if (now := store.get_run(r.tenant_id, r.run_id)) is not None
                and now.status not in FINAL]
        if not left:
            return
        if time.monotonic() >= deadline:
            raise ErasureRefused(
                f"asked {len(active)} active run(s) to cancel; {len(left)} had not ended "
                f"after {wait:g} s ({_names(left)}) — is a worker running? Nothing was "
                "erased; run the erasure again once they have ended",
                [r.run_id for r in left])
        sleep(0.2)


def _purge(journal: Journal, row: RunRecord, rule: str, sweep_id: str) -> bool:
    """Reduce the run to its skeleton; False when it was already."""
    try:
        purge = prepare(journal, row, rule, sweep_id=sweep_id, at=time.time())
    except AlreadyPurged:
        return False
    except Unpurgeable as exc:
        raise ErasureRefused(f"run {row.run_id}: {exc}; the subject's keys were not "
                             "destroyed", [row.run_id]) from None
    result = privacy(journal.store).purge_run(purge)
    if result == "held":
        raise ErasureRefused(f"run {row.run_id}: a legal hold was placed on it during the "
                             "erasure; the subject's keys were not destroyed", [row.run_id])
    return result != "already"


def _knowledge(store: Store, tenant_id: str) -> KnowledgeBase | None:
    target = store.store_of(tenant_id) if isinstance(store, RegionalStore) else store
    try:
        return open_knowledge(target)
    except ConfigurationError:
        return None
