"""The privacy records the store protocols exchange: the access log, consents, erasures,
legal holds, retention's purges and sweeps, data keys and sealed rows. Re-exported by
:mod:`underway.store.records`, the one place they are imported from."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class AccessRecord:
    """One read of a run's data: who (``key_id`` and ``key_name``: an API key's id and name;
    for the CLI ``cli`` and the OS user or ``--by``), when (``at``), in which tenant, which
    run (``*``: every run of the tenant, counted together), through which ``endpoint``
    (method and route, or the command), why (``purpose``) and whether sensitive fields were
    shown (``revealed``). ``seq``, ``prev_hash`` and ``hash`` are assigned by the store
    when the record is appended (0 and empty before): ``hash`` covers the fields and
    ``prev_hash``, the hash of the tenant's entry before it (see
    :func:`underway.store.access.entry_hash`)."""

    tenant_id: str
    at: float
    key_id: str
    key_name: str
    run_id: str
    endpoint: str
    seq: int = 0
    purpose: str = "operations"
    revealed: bool = False
    prev_hash: str = ""
    hash: str = ""


@dataclass(frozen=True, slots=True)
class AccessHead:
    """The end of a tenant's access-log chain as the store last extended it: the last
    entry's ``seq`` and ``hash``, and how many chained ``entries`` there are."""

    tenant_id: str
    seq: int
    hash: str
    entries: int


# -- consent of data subjects ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsentRecord:
    """One change of a data subject's consent for one purpose, as recorded: ``state`` is
    ``granted`` or ``withdrawn`` from ``at`` on, ``by`` says who recorded it and
    ``reference`` names the consent artefact (a consent manager's id, a signed form), if
    any. Records are never changed: the latest of a subject and purpose is where its
    consent stands, the earlier ones its history. ``seq`` is assigned by the store when
    the record is appended (0 before)."""

    tenant_id: str
    subject: str
    purpose: str
    state: str
    reference: str | None
    by: str
    at: float
    seq: int = 0


SUBJECT_SCOPE = "subject:"
"""The scope of a data subject's keys is this prefix and the subject's id."""


def subject_scope(subject: str) -> str:
    """The key scope of data subject ``subject``: what its payloads are sealed under."""
    return SUBJECT_SCOPE + subject


VAULT_STATES = ("destroyed", "absent", "none")
"""What an erasure did to the subject's secret held by the key provider: ``destroyed``
(backups taken before can no longer be opened), ``absent`` (the provider held none, or
it was destroyed by an earlier attempt), ``none`` (the provider keeps no per-subject
secrets: only the database was reached)."""


@dataclass(frozen=True, slots=True)
class ErasureRecord:
    """One erasure of a data subject, as its append-only log keeps it: who asked and why,
    how many of the subject's runs were reduced to their skeleton, knowledge records
    deleted and data keys destroyed, and what became of the subject's secret in the key
    provider (``vault``, one of :data:`VAULT_STATES`). ``seq`` is given by the store."""

    tenant_id: str
    subject: str
    erased_at: float
    by: str
    reason: str
    runs: int
    knowledge: int
    keys: int
    vault: str
    seq: int = 0

    def __post_init__(self) -> None:
        if self.vault not in VAULT_STATES:
            raise ConfigurationError(f"erasure vault state must be one of "
                                     f"{', '.join(VAULT_STATES)}, not {self.vault!r}")


# -- retention: legal holds, purges and sweeps ---------------------------------------------
HOLD_KINDS = ("run", "subject")
"""What a legal hold may be on: one run, or every run about one data subject."""


@dataclass(frozen=True, slots=True)
class HoldRecord:
    """A legal hold on a ``run`` or a ``subject`` (``kind``) of a tenant: while it stands
    (``released_at`` None), no purge touches the run, or any run about the subject.
    ``by`` placed it for ``reason`` at ``created_at``; ``released_by`` lifted it."""

    tenant_id: str
    kind: str
    target: str
    reason: str
    by: str
    created_at: float
    released_at: float | None = None
    released_by: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in HOLD_KINDS:
            raise ConfigurationError(
                f"a hold is on a run or a subject, not on {self.kind!r}")
        if not self.target or not self.reason or not self.by:
            raise ConfigurationError("a hold needs its target, a reason and who placed it")

    @property
    def active(self) -> bool:
        """True while the hold stands."""
        return self.released_at is None


ERASURE_PREFIX = "erasure-"
"""How the ``sweep_id`` of a purge made by an erasure of a data subject starts."""


@dataclass(frozen=True, slots=True)
class SweepRecord:
    """A retention sweep in one tenant, as its log keeps it: who ran it and when, and (once
    it ``finished_at``) how many runs it purged, left alone for a legal hold (``held``) or
    could not purge (``skipped``: unreadable or changed under it), and how many unreferenced
    blobs it deleted (None: it collected none; ``collected_at``, when it did, the time its
    collection began)."""

    sweep_id: str
    tenant_id: str
    started_at: float
    by: str
    finished_at: float | None = None
    purged: int = 0
    held: int = 0
    skipped: int = 0
    blobs_deleted: int | None = None
    collected_at: float | None = None
    forgotten: int = 0
    """Purged runs it forgot (their skeletons deleted)."""


@dataclass(frozen=True, slots=True)
class Forget:
    """One purged run's forgetting, done in one transaction: its row, events, purge record
    and every other row of it deleted, and a line appended to its tenant's forget log
    naming the run and the head it ended at (``last_seq``, ``head``) — only if the run is
    still purged, final, not held, and its row still ends at that head."""

    tenant_id: str
    run_id: str
    last_seq: int
    head: str
    sweep_id: str
    at: float


@dataclass(frozen=True, slots=True)
class ForgottenRun:
    """A line of a tenant's forget log: the run forgotten, the head its journal ended at
    (``last_seq``, ``head``), when and by which sweep; ``seq`` is the line's place in the
    tenant's log (from 1) and ``hash`` chains it to the line before
    (:func:`underway.store.retention.forget_hash`)."""

    tenant_id: str
    seq: int
    run_id: str
    last_seq: int
    head: str
    sweep_id: str
    forgotten_at: float
    hash: str


# -- encryption at rest: data keys, and rows whose payloads are sealed ----------------------
KEY_STATES = ("active", "retired", "destroyed")
"""A data key is ``active`` (new payloads of its tenant and scope are sealed with it; one
per tenant and scope), ``retired`` (replaced by a rotation: it only opens what it sealed)
or ``destroyed`` (its wrapped bytes erased: what it sealed can never be opened again)."""


@dataclass(frozen=True, slots=True)
class DataKeyRecord:
    """A data key (DEK) of a tenant as stored: only ``wrapped`` by the key-encryption key
    ``kek_id`` of a key provider outside the database, never in the clear. A sealed
    payload names its ``key_id``. ``scope`` is ``""`` for the tenant's own keys (a later
    kind of key, e.g. one per data subject, names its scope there)."""

    tenant_id: str
    key_id: str
    wrapped: bytes
    kek_id: str
    created_at: float
    state: str = "active"
    scope: str = ""

    def __post_init__(self) -> None:
        if self.state not in KEY_STATES:
            raise ConfigurationError(
                f"data key {self.key_id!r}: state must be one of {', '.join(KEY_STATES)}, "
                f"not {self.state!r}"
            )


SEALED_KINDS = ("blob", "signal", "schedule")
"""The rows whose sealed payloads a key rotation seals again under the new key. Events and
checkpoints are not among them: the hash chain and the anchors cover events' stored bytes,
and each event that commits a checkpoint commits to its stored bytes' digest."""


@dataclass(frozen=True, slots=True)
class SealedRow:
    """One stored payload a rotation may seal again: a ``blob`` (``position`` its
    address), an unconsumed ``signal`` (its run and signal id, with ``name``) or a
    ``schedule`` (its name). ``data`` is the payload as stored when read."""

    kind: str
    tenant_id: str
    position: tuple[str, ...]
    data: bytes
    name: str | None = None
