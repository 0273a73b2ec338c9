"""Tenants' data keys (DEKs): made at random, stored only wrapped by the key provider's KEK,
unwrapped into this process on first use and kept.

The hierarchy::

    KEK (key provider: keyring file, environment, your KMS)   -- never in the database
     └── data key of (tenant, key id), one active per (tenant, scope)  -- stored wrapped
          ├── payload key    HKDF(dek, "underway payload v1")  AES-256-GCM of every payload
          ├── address key    HMAC key of blob addresses (equal contents of two tenants,
          │                  or of two keys, get unrelated addresses)
          └── index key      HMAC key of knowledge records' blind index terms

A sealed payload names the key id that sealed it, so a tenant may have many keys: those a
rotation retired still open what they sealed, and each data subject's keys (scope
``subject:<id>``) seal what is about that subject. A subject's key is wrapped twice when
the provider keeps a vault (:mod:`.vault`): by the KEK, then by the subject's secret held
there — erasing the subject destroys both, so a backup taken before cannot open it either.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import IntegrityError, KeyUnavailable, SubjectErased
from ..events import canonical_json
from ..store.keys import KeyStore
from ..store.records import SUBJECT_SCOPE, DataKeyRecord
from ..store.subjects_erased import refuse_erased
from .providers import KeyProvider, refresh_provider
from .vault import vault_of

__all__ = ["DataKey", "DataKeys"]

DEK_BYTES = 32
"""A data key is 256 bits."""


@dataclass(frozen=True, slots=True)
class DataKey:
    """A data key unwrapped in memory: its id, its AES-256-GCM payload cipher, and the
    keys of its blob addresses and of its blind index terms."""

    tenant_id: str
    key_id: str
    aead: AESGCM
    address_key: bytes
    index_key: bytes


def _derive(dek: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(dek)


def _unwrapped(tenant_id: str, key_id: str, dek: bytes) -> DataKey:
    return DataKey(
        tenant_id, key_id, AESGCM(_derive(dek, b"underway payload v1")),
        _derive(dek, b"underway address v1"), _derive(dek, b"underway index v1"),
    )


def wrap_context(tenant_id: str, key_id: str, scope: str) -> bytes:
    """What a data key's wrap is bound to: its tenant, id and scope."""
    return canonical_json(["underway data key", tenant_id, key_id, scope])


VAULTED = b"UWVAULT1"
"""The start of a data key's stored bytes when its KEK wrap is wrapped again by its data
subject's secret."""


def _subject(scope: str) -> str | None:
    return scope[len(SUBJECT_SCOPE):] if scope.startswith(SUBJECT_SCOPE) else None


class DataKeys:
    """The data keys of a store's tenants, through a key provider.

    :meth:`active` is what seals: the tenant's active key. It is made (and stored wrapped)
    the first time the tenant needs one. It reads the store only when it knows no key for
    the tenant yet. A key it knows is looked at again by :meth:`prepare` once ``refresh``
    seconds have passed: a rotation elsewhere may have replaced it. The journal calls
    :meth:`prepare` from its loads, on the store's I/O threads, never on an event loop.
    :meth:`get` opens: any key by id, unwrapped once and kept.

    The KEKs may change under a running process (a rotation made by another). A data key
    that does not unwrap has the provider read its KEKs again, once, before it is called
    unavailable. A new key is wrapped by the KEK current now
    (:func:`~underway.crypto.providers.refresh_provider`).

    Args:
        store: Where the wrapped keys are kept.
        provider: Wraps and unwraps them.
        refresh: Seconds before a known key is looked at again.
        clock: The monotonic clock those seconds are read from.
    """

    def __init__(
        self, store: KeyStore, provider: KeyProvider, *, refresh: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.provider = provider
        """Where the KEK lives."""
        self.refresh = refresh
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[tuple[str, str], DataKey] = {}
        self._headers: dict[tuple[str, bytes], DataKey] = {}
        self._active: dict[tuple[str, str], tuple[DataKey, float]] = {}

    # -- sealing ------------------------------------------------------------------------
    def active(self, tenant_id: str, scope: str = "") -> DataKey:
        """The key new payloads of the tenant (and scope) are sealed with."""
        found = self._active.get((tenant_id, scope))
        if found is not None:
            return found[0]
        return self._load_active(tenant_id, scope)

    def prepare(self, tenant_id: str, scope: str = "") -> None:
        """Make sure :meth:`active` answers without reading the store: read the tenant's
        active key when it is not known, or was read more than ``refresh`` seconds ago."""
        found = self._active.get((tenant_id, scope))
        if found is None or self._clock() - found[1] >= self.refresh:
            self._load_active(tenant_id, scope)

    def current(self, tenant_id: str, scope: str = "") -> DataKey:
        """The tenant's active key as the store says now, read afresh (a rotation made by
        another process a moment ago)."""
        return self._load_active(tenant_id, scope)

    def _load_active(self, tenant_id: str, scope: str) -> DataKey:
        rec = self.store.active_data_key(tenant_id, scope)
        if rec is None:
            subject = _subject(scope)
            if subject is not None:
                # Checked before a secret is made for it in the vault (the store checks
                # again, in the transaction that adds the key).
                refuse_erased(tenant_id, self.store.list_erasures(tenant_id, subject=subject))
            rec = self.store.add_data_key(self._new(tenant_id, scope), replace=False)
        key = self._open(rec)
        with self._lock:
            self._active[(tenant_id, scope)] = (key, self._clock())
        return key

    def _new(self, tenant_id: str, scope: str) -> DataKeyRecord:
        refresh_provider(self.provider)  # wrap under the KEK current now, not at start
        key_id = uuid.uuid4().hex[:16]
        dek = os.urandom(DEK_BYTES)
        wrapped = self._wrap(tenant_id, key_id, scope, dek)
        return DataKeyRecord(tenant_id, key_id, wrapped, self.provider.kek_id, time.time(),
                             "active", scope)

    def _wrap(self, tenant_id: str, key_id: str, scope: str, dek: bytes) -> bytes:
        """``dek`` wrapped by the KEK, then (a subject's key, with a vault) by the
        subject's secret."""
        context = wrap_context(tenant_id, key_id, scope)
        wrapped = self.provider.wrap(dek, context=context)
        subject, vault = _subject(scope), vault_of(self.provider)
        if subject is None or vault is None:
            return wrapped
        secret = vault.subject_secret(tenant_id, subject, create=True)
        assert secret is not None
        nonce = os.urandom(12)
        return VAULTED + nonce + AESGCM(secret).encrypt(nonce, wrapped, context)

    def _unwrap(self, rec: DataKeyRecord) -> bytes:
        """The data key ``rec`` holds wrapped (see :meth:`_wrap`)."""
        context = wrap_context(rec.tenant_id, rec.key_id, rec.scope)
        wrapped = rec.wrapped
        if wrapped.startswith(VAULTED):
            subject, vault = _subject(rec.scope), vault_of(self.provider)
            secret = (None if subject is None or vault is None
                      else vault.subject_secret(rec.tenant_id, subject, create=False))
            if secret is None:
                raise SubjectErased(
                    f"data key {rec.key_id!r} of tenant {rec.tenant_id!r} is wrapped by the "
                    f"secret of data subject {subject!r}, which "
                    + ("this key provider keeps no vault for" if vault is None
                       else "the key provider's vault no longer holds: the subject was "
                            "erased"))
            body = wrapped[len(VAULTED):]
            try:
                wrapped = AESGCM(secret).decrypt(body[:12], body[12:], context)
            except (InvalidTag, ValueError):
                raise KeyUnavailable(
                    f"data key {rec.key_id!r} of tenant {rec.tenant_id!r} does not unwrap "
                    "with its subject's secret (altered, or copied from another row)"
                ) from None
        try:
            return self.provider.unwrap(wrapped, kek_id=rec.kek_id, context=context)
        except KeyUnavailable:
            # Wrapped by a KEK added since the provider read its KEKs (a rotation made by
            # another process): read them again, and try once more.
            if not refresh_provider(self.provider):
                raise
            return self.provider.unwrap(wrapped, kek_id=rec.kek_id, context=context)

    def rotate(self, tenant_id: str, scope: str = "") -> DataKeyRecord:
        """Make a new data key the tenant's active one (the one active until now is
        retired: it still opens what it sealed). This process seals with it at once;
        others at their next :meth:`prepare` after ``refresh`` seconds."""
        rec = self.store.add_data_key(self._new(tenant_id, scope), replace=True)
        key = self._open(rec)
        with self._lock:
            self._active[(tenant_id, scope)] = (key, self._clock())
        return rec

    # -- opening ------------------------------------------------------------------------
    def get(self, tenant_id: str, key_id: str) -> DataKey:
        """The tenant's key ``key_id``; :class:`~underway.errors.KeyUnavailable` when it was
        destroyed or the provider cannot unwrap it, :class:`~underway.errors.IntegrityError`
        when the tenant never had it (a key's row outlives its destruction, so a payload
        naming an unknown key was made elsewhere: another tenant's, or forged)."""
        found = self._keys.get((tenant_id, key_id))
        if found is not None:
            return found
        rec = self.store.get_data_key(tenant_id, key_id)
        if rec is None:
            raise IntegrityError(
                f"a payload of tenant {tenant_id!r} names data key {key_id!r}, which the tenant "
                "never had: it was copied here from another tenant, or forged")
        return self._open(rec)

    def by_header(self, tenant_id: str, header: bytes) -> DataKey | None:
        """The key a sealed box's header (format version and key id) names, when this
        process opened a box of the tenant with that header before (reads nothing)."""
        return self._headers.get((tenant_id, header))

    def remember_header(self, tenant_id: str, header: bytes, key: DataKey) -> None:
        """Note that boxes of the tenant with ``header`` open with ``key``.

        Args:
            tenant_id: The tenant.
            header: The boxes' header.
            key: The key they open with.
        """
        if len(self._headers) > 10_000:
            self._headers.clear()
        self._headers[(tenant_id, header)] = key

    def known(self, tenant_id: str, key_id: str) -> DataKey | None:
        """The tenant's key ``key_id`` if this process holds it already (reads nothing)."""
        return self._keys.get((tenant_id, key_id))

    def every(self, tenant_id: str, scope: str | None = None) -> list[DataKey]:
        """Every key of the tenant (of ``scope`` only, when given) that can still open
        something (not destroyed)."""
        return [self._open(r) for r in self.store.list_data_keys(tenant_id)
                if r.state != "destroyed" and (scope is None or r.scope == scope)]

    def _open(self, rec: DataKeyRecord) -> DataKey:
        found = self._keys.get((rec.tenant_id, rec.key_id))
        if found is not None:
            return found
        if rec.state == "destroyed":
            raise KeyUnavailable(
                f"data key {rec.key_id!r} of tenant {rec.tenant_id!r} was destroyed: what it "
                "sealed can never be opened again"
            )
        key = _unwrapped(rec.tenant_id, rec.key_id, self._unwrap(rec))
        with self._lock:
            self._keys[(rec.tenant_id, rec.key_id)] = key
        return key

    def forget(self, tenant_id: str | None = None) -> None:
        """Drop the keys this process holds (of one tenant, or all): they are read and
        unwrapped again when next needed (after a key was destroyed elsewhere)."""
        with self._lock:
            caches: tuple[dict[Any, Any], ...] = (self._keys, self._active, self._headers)
            for cache in caches:
                for k in [k for k in cache if tenant_id is None or k[0] == tenant_id]:
                    del cache[k]

    # -- KEK rotation -------------------------------------------------------------------
    def rewrap(self, tenant_id: str | None = None) -> int:
        """Wrap every data key (of one tenant, or all) not wrapped by the provider's
        current KEK anew with it: a KEK rotation, cheap (no payload is touched) and safe
        to repeat or to resume after a crash. Returns how many keys were re-wrapped."""
        done = 0
        refresh_provider(self.provider)
        current = self.provider.kek_id
        for rec in self.store.list_data_keys(tenant_id):
            if rec.state == "destroyed" or rec.kek_id == current:
                continue
            try:
                dek = self._unwrap(rec)
            except SubjectErased:
                continue  # an erasure under way: the key is about to be destroyed
            if self.store.rewrap_data_key(
                rec.tenant_id, rec.key_id,
                wrapped=self._wrap(rec.tenant_id, rec.key_id, rec.scope, dek),
                kek_id=current, expected_kek_id=rec.kek_id,
            ):
                done += 1
        return done
