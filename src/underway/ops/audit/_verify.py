"""Auditing stored journals: every run's hash chain and row, and — given an anchor log —
that today's journal still extends every head that was signed outside the database.

:func:`verify` checks every run in scope with each of :data:`RUN_CHECKS` (the chain,
then the run row against the journal's fold) and, when
anchors are given, with :func:`check_anchored`. Nothing in the database can make it
raise: whatever is wrong becomes a :class:`~underway.ops.audit._findings.Finding` and the
audit goes on to the next run. Errors of the database itself (unreachable, refused) are
not findings and propagate.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from ...errors import IntegrityError, KeyUnavailable
from ...events import genesis_hash, is_tombstone, link_hash, read_tombstone
from ...journal import Journal
from ...journal.projection import (
    Disagreement,
    disagreements,
    good_time,
    identity_disagreements,
    label_disagreements,
    lease_problem,
)
from ...journal.state import RunState, apply, fold
from ...store.base import RunRecord, Store, StoredEvent, whole
from ._anchors import (
    AnchorRecord,
    MalformedRecord,
    key_id,
    line_digest,
    signature_ok,
    sorted_unique,
)
from ._findings import Finding, Report
from ._forgotten import check_forgotten, read_forget_logs
from ._merkle import merkle_root

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


@dataclass(frozen=True, slots=True)
class AuditedRun:
    """One run as the audit sees it: every stored event and its row (None when gone)."""

    tenant_id: str
    run_id: str
    events: Sequence[StoredEvent]
    row: RunRecord | None
    journal: Journal

    @property
    def store(self) -> Store:
        """The store the run was read from."""
        return whole(self.journal.store, by="an audit")


RunCheck = Callable[[AuditedRun], list[Finding]]
"""A check of one run: what it found wrong (empty when nothing)."""


def check_chain(run: AuditedRun) -> list[Finding]:
    """The hash chain from the run's genesis, the sequence, payloads, blobs and the row's
    head; once they hold, the rest of the row (:func:`check_row`)."""
    if not run.events and run.row is None:
        return []  # audited only because it was anchored: check_anchored says it is gone
    v = run.journal.verify_events(run.tenant_id, run.run_id, run.events, run.row)
    if not v.ok:
        return [Finding(run.tenant_id, run.run_id, v.bad_seq, v.reason)]
    # A journal that holds is the truth its row is checked against.
    return check_row(run)


def check_row(run: AuditedRun) -> list[Finding]:
    """The run row against the journal (:mod:`underway.journal.projection`): each field of the row
    that the journal's fold up to the row's head contradicts is a finding. A journal that
    cannot be read here (its head not in the journal, a payload sealed without its key
    here) is checked for what needs no fold: the row's times and lease."""
    row = run.row
    if row is None or not run.events:
        return []  # check_chain says what is missing
    now = time.time()
    state: RunState | None = None
    if type(row.last_seq) is int and 0 < row.last_seq <= len(run.events):
        try:
            records = run.journal.decode(run.tenant_id, run.run_id,
                                         run.events[:row.last_seq])
            state = fold(records, start=RunState(tenant_id=run.tenant_id, run_id=run.run_id))
        except (KeyUnavailable, IntegrityError, ValueError, TypeError, RecursionError):
            state = None
    if state is None:
        found = []
        if not good_time(row.next_wake_at):
            found.append(Disagreement("next_wake_at", row.next_wake_at, "a time or nothing"))
        problem = lease_problem(row, now=now)
        if problem is not None:
            found.append(Disagreement("lease", (row.lease_owner, row.lease_expires_at),
                                      f"no live worker can hold it: {problem}"))
    else:
        found = disagreements(row, state, now=now) + identity_disagreements(row, state)
    return [Finding(run.tenant_id, run.run_id, row.last_seq if state is not None else None,
                    f"the runs row disagrees with the journal: {d.describe()}")
            for d in found] + check_labels(run, state)


def check_labels(run: AuditedRun, state: RunState | None) -> list[Finding]:
    """The label index against the whole journal: the labels of ``state`` (the fold up to
    the row's head) and of the events after it, which an append indexes with them."""
    if state is None or (state.seq != len(run.events) and not _folded_on(run, state)):
        return []
    stored = run.store.run_labels(run.tenant_id, [run.run_id]).get(run.run_id, ())
    return [Finding(run.tenant_id, run.run_id, state.seq,
                    f"the label index disagrees with the journal: {d.describe()}")
            for d in label_disagreements(stored, state)]


def _folded_on(run: AuditedRun, state: RunState) -> bool:
    """Fold the events after ``state``'s seq onto it (in place); False when they cannot
    be read here."""
    try:
        for rec in run.journal.decode(run.tenant_id, run.run_id, run.events[state.seq:]):
            apply(state, rec)
    except (KeyUnavailable, IntegrityError, ValueError, TypeError, RecursionError):
        return False
    return True


RUN_CHECKS: tuple[RunCheck, ...] = (check_chain,)
"""What :func:`verify` checks in every run."""


@dataclass(frozen=True, slots=True)
class AnchoredHead:
    """A run's head as a verified anchor record signed it."""

    seq: int
    head: str
    at: str
    record: int


@dataclass(slots=True)
class Anchors:
    """What the verified records of an anchor log vouch for, and what is wrong with it."""

    heads: dict[tuple[str, str], list[AnchoredHead]] = field(default_factory=dict)
    """Every anchored head of each (tenant, run)."""
    records: int = 0
    """Records whose signature and root verified."""
    findings: list[Finding] = field(default_factory=list)
    """Lines that are not records, records signed by another key or edited, gaps."""


def read_anchors(lines: Iterable[str], public_key: Ed25519PublicKey) -> Anchors:
    """Verify every line of an anchor log against ``public_key``; keep the heads of the
    records that verify."""
    expected_key = key_id(public_key)
    out = Anchors()
    heads: defaultdict[tuple[str, str], list[AnchoredHead]] = defaultdict(list)
    previous: str | None = None

    def bad(line_no: int, reason: str) -> None:
        out.findings.append(Finding(None, None, None, f"line {line_no}: {reason}"))

    for i, line in enumerate(lines, start=1):
        expected_prev = None if previous is None else line_digest(previous)
        previous = line
        try:
            record = AnchorRecord.parse(line)
        except MalformedRecord as exc:
            bad(i, f"not an anchor record ({exc})")
            continue
        if record.key_id != expected_key:
            bad(i, f"record {record.n} was signed by key {record.key_id}, not by the given "
                   f"public key ({expected_key})")
            continue
        if not signature_ok(record, public_key):
            bad(i, f"the signature of record {record.n} does not verify: the record was "
                   "edited or forged")
            continue
        if merkle_root(record.leaves) != record.root or not sorted_unique(record.leaves):
            bad(i, f"record {record.n}: its leaves do not make its Merkle root")
            continue
        if record.n != i or record.prev != expected_prev:
            # Signed, so its heads stand; but the log around it was changed.
            bad(i, f"record {record.n} does not follow the line before it: records were "
                   "removed, inserted or reordered")
        out.records += 1
        for tenant, run, seq, head in record.leaves:
            heads[(tenant, run)].append(AnchoredHead(seq, head, record.at, record.n))
    if out.records == 0 and not out.findings:
        out.findings.append(Finding(None, None, None, "the anchor log holds no records"))
    out.heads = dict(heads)
    return out


def check_anchored(run: AuditedRun, heads: Sequence[AnchoredHead]) -> list[Finding]:
    """Whether today's journal of ``run`` still extends every head anchored for it: the
    chain recomputed from the run's genesis over the stored bytes reaches each anchored
    hash at its seq. One finding names the earliest head that fails."""
    computed = _recomputed_chain(run)
    ordered = sorted(heads, key=lambda h: (h.seq, h.record))
    good = [h for h in ordered if h.seq <= len(computed) and computed[h.seq - 1] == h.head]
    failing = [h for h in ordered if h not in good]
    if not failing:
        return []
    first = failing[0]
    held = [h.seq for h in good if h.seq < first.seq]
    where = f"record {first.record} of {first.at}"
    if not run.events:
        seq, reason = first.seq, (
            f"the run is gone: {where} anchored its head at seq {first.seq}, and the "
            "database holds no events of it now"
        )
    elif len(computed) < first.seq:
        seq, reason = len(computed) + 1, (
            f"events were removed: {where} anchored seq {first.seq}, and the journal now "
            f"holds an unbroken chain to seq {len(computed)} only"
        )
    else:
        seq = first.seq
        since = f"seq {held[-1] + 1}..{first.seq}" if held else f"seq 1..{first.seq}"
        restamped = run.events[first.seq - 1].hash == computed[first.seq - 1]
        reason = (
            f"the journal was rewritten{' and re-hashed' if restamped else ''} in {since}: "
            f"it no longer reaches the head that {where} anchored"
        )
    more = len(failing) - 1
    if more:
        reason += f" ({more} later anchored head{'s' if more > 1 else ''} fail too)"
    return [Finding(run.tenant_id, run.run_id, seq, reason)]


def _recomputed_chain(run: AuditedRun) -> list[str]:
    """The chain hash after each event, recomputed from the genesis over the stored bytes,
    as far as the events run unbroken from seq 1. A purged event's tombstone stands for
    its link when it is sound (it follows the chain and matches its seal): the hash it
    keeps is the one its payload made."""
    out: list[str] = []
    prev = genesis_hash(run.tenant_id, run.run_id)
    for expected, event in enumerate(run.events, start=1):
        if event.seq != expected or not isinstance(event.payload, bytes):
            break
        if is_tombstone(event.payload):
            try:
                kept = read_tombstone(event.payload)
            except ValueError:
                break
            if kept.problem(seq=event.seq, type=event.type, prev=prev, hash=kept.hash):
                break
            prev = kept.hash
        else:
            prev = link_hash(prev, event.seq, event.type, event.payload)
        out.append(prev)
    return out


def verify(
    store: Store,
    *,
    tenant_id: str | None = None,
    run_id: str | None = None,
    anchors: Anchors | None = None,
    journal: Journal | None = None,
    checks: Sequence[RunCheck] = RUN_CHECKS,
) -> Report:
    """Audit the runs of a tenant, or one run.

    Each of ``checks`` runs on every run. With ``anchors``, :func:`check_anchored` runs on
    every anchored run, including runs deleted since; an anchored run that retention
    forgot (its tenant's forget log names it) is checked against its forget log line
    instead. Each tenant's forget log is checked as a chain.

    Args:
        store: The store.
        tenant_id: The tenant; None means every tenant.
        run_id: Only this run.
        anchors: The anchors (:func:`read_anchors`).
        journal: Reads the journals; None makes one on ``store``.
        checks: The checks each run must pass.
    """
    if run_id is not None and tenant_id is None:
        raise ValueError("a run id needs its tenant")
    journal = journal or Journal(store)
    report = Report()
    heads: dict[tuple[str, str], list[AnchoredHead]] = {}
    if anchors is not None:
        report.findings.extend(anchors.findings)
        report.anchors = anchors.records
        heads = {
            k: v for k, v in anchors.heads.items()
            if (tenant_id is None or k[0] == tenant_id) and (run_id is None or k[1] == run_id)
        }
    if run_id is not None:
        assert tenant_id is not None
        targets = {(tenant_id, run_id)}
    else:
        targets = set(store.journaled_runs(tenant_id)) | set(heads)
    tenants = {tenant_id} if tenant_id is not None else (
        set(store.tenants()) | {t for t, _ in heads})
    forgotten = read_forget_logs(store, tenants)
    if run_id is None:
        report.findings.extend(forgotten.findings)
    else:
        report.findings.extend(f for f in forgotten.findings if f.run_id == run_id)
    for t, r in sorted(targets):
        run = AuditedRun(t, r, store.load_events(t, r), store.get_run(t, r), journal)
        line = forgotten.lines.get((t, r))
        if line is not None and not run.events and run.row is None:
            report.forgotten += 1
            report.tenants.add(t)
            report.findings.extend(check_forgotten(line, heads.get((t, r), ())))
            continue
        report.runs += 1
        report.events += len(run.events)
        report.tenants.add(t)
        for check in checks:
            report.findings.extend(_safely(check, run))
        anchored = heads.get((t, r))
        if anchored:
            report.findings.extend(_safely(partial(check_anchored, heads=anchored), run))
    return report


def _safely(check: RunCheck, run: AuditedRun) -> list[Finding]:
    """A check's findings; a check that trips over data it did not expect reports the run
    instead of ending the audit."""
    try:
        return check(run)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError,
            IntegrityError) as exc:
        return [Finding(run.tenant_id, run.run_id, None,
                        f"cannot be checked: {type(exc).__name__}: {exc}")]
