"""The in-memory store's data keys and the sealed rows a key rotation seals again
(:class:`~underway.store.keys.KeyStore` and :class:`~underway.store.reseal.ResealStore`)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from ...errors import ConfigurationError, ConflictError
from ..records import (
    SEALED_KINDS,
    SUBJECT_SCOPE,
    DataKeyRecord,
    ErasureRecord,
    ScheduleRecord,
    SealedRow,
    SignalRecord,
    subject_scope,
)
from ..subjects_erased import refuse_erased


class MemoryKeys:
    """Data keys, and the blobs, signals and schedules of the memory store seen as sealed
    rows."""

    _lock: threading.RLock
    _blobs: dict[tuple[str, str], bytes]
    _signals: dict[tuple[str, str], dict[str, tuple[SignalRecord, bool]]]
    _schedules: dict[tuple[str, str], ScheduleRecord]

    def __init__(self) -> None:
        self._keys_lock = threading.RLock()
        self._data_keys: dict[tuple[str, str], DataKeyRecord] = {}
        self._erasures: list[ErasureRecord] = []

    # -- data keys ----------------------------------------------------------------------
    def add_data_key(self, key: DataKeyRecord, *, replace: bool) -> DataKeyRecord:
        """Make the key active (first only, or replacing the active one)."""
        with self._keys_lock:
            if key.scope.startswith(SUBJECT_SCOPE):
                refuse_erased(key.tenant_id, self.list_erasures(
                    key.tenant_id, subject=key.scope[len(SUBJECT_SCOPE):]))
            if (key.tenant_id, key.key_id) in self._data_keys:
                raise ConflictError(
                    f"tenant {key.tenant_id!r} already has a data key {key.key_id!r}")
            active = self.active_data_key(key.tenant_id, key.scope)
            if active is not None:
                if not replace:
                    return active
                self._data_keys[(active.tenant_id, active.key_id)] = dataclasses.replace(
                    active, state="retired")
            new = dataclasses.replace(key, state="active")
            self._data_keys[(key.tenant_id, key.key_id)] = new
            return new

    def erase_subject(self, rec: ErasureRecord) -> ErasureRecord:
        """Destroy the subject's keys and log the erasure, under the keys' lock."""
        scope = subject_scope(rec.subject)
        with self._keys_lock:
            doomed = [k for k in self._data_keys.values() if k.tenant_id == rec.tenant_id
                      and k.scope == scope and k.state != "destroyed"]
            for k in doomed:
                self._data_keys[(k.tenant_id, k.key_id)] = dataclasses.replace(
                    k, wrapped=b"", state="destroyed")
            logged = dataclasses.replace(rec, keys=len(doomed), seq=len(self._erasures) + 1)
            self._erasures.append(logged)
            return logged

    def list_erasures(
        self, tenant_id: str | None = None, *, subject: str | None = None
    ) -> list[ErasureRecord]:
        """The erasure log, oldest first."""
        with self._keys_lock:
            return [e for e in self._erasures
                    if (tenant_id is None or e.tenant_id == tenant_id)
                    and (subject is None or e.subject == subject)]

    def get_data_key(self, tenant_id: str, key_id: str) -> DataKeyRecord | None:
        """The tenant's key with this id."""
        return self._data_keys.get((tenant_id, key_id))

    def active_data_key(self, tenant_id: str, scope: str = "") -> DataKeyRecord | None:
        """The tenant's active key of ``scope``."""
        with self._keys_lock:
            return next((k for k in self._data_keys.values()
                         if k.tenant_id == tenant_id and k.scope == scope
                         and k.state == "active"), None)

    def list_data_keys(self, tenant_id: str | None = None) -> list[DataKeyRecord]:
        """Keys of a tenant (or all), oldest first."""
        with self._keys_lock:
            found = [k for k in self._data_keys.values()
                     if tenant_id is None or k.tenant_id == tenant_id]
        return sorted(found, key=lambda k: (k.created_at, k.tenant_id, k.key_id))

    def rewrap_data_key(
        self, tenant_id: str, key_id: str, *, wrapped: bytes, kek_id: str,
        expected_kek_id: str,
    ) -> bool:
        """Store the key wrapped anew if still wrapped by ``expected_kek_id``."""
        with self._keys_lock:
            k = self._data_keys.get((tenant_id, key_id))
            if k is None or k.state == "destroyed" or k.kek_id != expected_kek_id:
                return False
            self._data_keys[(tenant_id, key_id)] = dataclasses.replace(
                k, wrapped=wrapped, kek_id=kek_id)
            return True

    def destroy_data_key(self, tenant_id: str, key_id: str) -> bool:
        """Erase the key's wrapped bytes."""
        with self._keys_lock:
            k = self._data_keys.get((tenant_id, key_id))
            if k is None or k.state == "destroyed":
                return False
            self._data_keys[(tenant_id, key_id)] = dataclasses.replace(
                k, wrapped=b"", state="destroyed")
            return True

    # -- sealed rows --------------------------------------------------------------------
    def sealed_rows(
        self, tenant_id: str, kind: str, *, after: tuple[str, ...], limit: int
    ) -> list[SealedRow]:
        """Rows of ``kind`` after ``after``, in position order."""
        rows: list[SealedRow] = []
        with self._lock:
            if kind == "blob":
                rows = [SealedRow(kind, t, (k,), v) for (t, k), v in self._blobs.items()
                        if t == tenant_id]
            elif kind == "signal":
                rows = [SealedRow(kind, t, (r, sid), s.payload, name=s.name)
                        for (t, r), inbox in self._signals.items() if t == tenant_id
                        for sid, (s, consumed) in inbox.items() if not consumed]
            elif kind == "schedule":
                rows = [SealedRow(kind, t, (n,), s.input)
                        for (t, n), s in self._schedules.items() if t == tenant_id]
            else:
                raise ConfigurationError(
                    f"unknown kind of sealed row {kind!r}; one of {', '.join(SEALED_KINDS)}")
        rows = sorted((r for r in rows if r.position > after), key=lambda r: r.position)
        return rows[:limit]

    def replace_sealed(self, rows: Sequence[tuple[SealedRow, bytes]]) -> int:
        """Replace rows whose bytes are unchanged since they were read."""
        done = 0
        with self._lock:
            for row, new in rows:
                t, p = row.tenant_id, row.position
                if row.kind == "blob" and self._blobs.get((t, p[0])) == row.data:
                    self._blobs[(t, p[0])] = new
                elif row.kind == "signal":
                    inbox = self._signals.get((t, p[0]), {})
                    found = inbox.get(p[1])
                    if found is None or found[1] or found[0].payload != row.data:
                        continue
                    inbox[p[1]] = (dataclasses.replace(found[0], payload=new), False)
                elif row.kind == "schedule" and (t, p[0]) in self._schedules and \
                        self._schedules[(t, p[0])].input == row.data:
                    self._schedules[(t, p[0])] = dataclasses.replace(
                        self._schedules[(t, p[0])], input=new)
                else:
                    continue
                done += 1
        return done
