"""The AES-256-GCM envelope: the :class:`~underway.codec.Sealer` that seals every payload of a
store under its tenant's data key, and turning it on for a store."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from ..codec import Codec, Where
from ..errors import IntegrityError, KeyUnavailable
from ..store.base import Store
from ..store.records import subject_scope
from ._box import NONCE, InvalidTag, box_key_id, seal_box
from .datakeys import DataKeys
from .providers import KeyProvider

__all__ = ["Envelope", "NoKeys", "encrypt", "is_encrypted", "refuse_plaintext"]

_TERM_LETTERS = "abcdefghijklmnop"
_TERM_BYTES = 12


class Envelope:
    """Seals payloads with AES-256-GCM under the tenant's active data key, bound to where
    they are stored (:meth:`~underway.codec.Where.aad`), and opens them with the key their
    box names. See :mod:`underway.crypto` for the whole design."""

    def __init__(self, keys: DataKeys) -> None:
        self.keys = keys
        """The tenants' data keys."""

    def seal(self, raw: bytes, where: Where) -> bytes:
        """``raw`` sealed under the active key of ``where``'s tenant — or of its data
        subject, when it names one — bound to ``where``."""
        key = self.keys.active(where.tenant_id, _scope(where))
        return seal_box(key.aead, key.key_id, raw, where.aad())

    def open(self, sealed: bytes, where: Where) -> bytes:
        """The plaintext of ``sealed``, which must have been sealed for ``where``."""
        # A box's header (version, key id) is looked up whole: the key it names is found
        # in one step once it was opened here.
        header = sealed[:2 + sealed[1]] if len(sealed) > 1 else sealed
        key = self.keys.by_header(where.tenant_id, header)
        if key is None:
            key_id = box_key_id(sealed)
            key = self.keys.get(where.tenant_id, key_id)
            self.keys.remember_header(where.tenant_id, header, key)
        else:
            key_id = key.key_id
        end = len(header)
        try:
            return key.aead.decrypt(sealed[end:end + NONCE], sealed[end + NONCE:],
                                    header + where.aad())
        except (InvalidTag, ValueError):
            raise IntegrityError(
                f"{where.what()} ({_ident(where)}) does not open under data key {key_id!r}: "
                "it was altered, or copied here from another place"
            ) from None

    def address(self, raw: bytes, where: Where) -> str:
        """The keyed address of a blob of ``where``'s tenant (and data subject)."""
        key = self.keys.active(where.tenant_id, _scope(where))
        return hmac.new(key.address_key, raw, hashlib.sha256).hexdigest()

    def address_hasher(self, where: Where) -> hmac.HMAC:
        """The keyed hash :meth:`address` finishes, to be fed a large blob a chunk at a
        time (:meth:`underway.codec.Codec.large_blob`)."""
        key = self.keys.active(where.tenant_id, _scope(where))
        return hmac.new(key.address_key, digestmod=hashlib.sha256)

    def terms(self, tenant_id: str, words: Sequence[str], *, every_key: bool) -> list[str]:
        """Blind index terms of ``words``, under the tenant's own keys.

        They are letters only, so every full-text parser keeps each one whole. A data subject's
        records are indexed under their tenant's key too: a search reads no subject's key.

        Args:
            tenant_id: The tenant.
            words: The words.
            every_key: For a search: under each key the tenant's records may have been indexed
                with. Else under its active key only.
        """
        keys = self.keys.every(tenant_id, "") if every_key else [self.keys.active(tenant_id)]
        out = []
        for key in keys:
            for word in words:
                digest = hmac.new(key.index_key, word.encode(), hashlib.sha256).digest()
                out.append("".join(_TERM_LETTERS[b >> 4] + _TERM_LETTERS[b & 15]
                                   for b in digest[:_TERM_BYTES]))
        return out

    def prepare(self, tenant_id: str, subject: str | None = None) -> None:
        """Read the tenant's (or its data subject's) active key now if it is not known or
        may be stale."""
        self.keys.prepare(tenant_id, "" if subject is None else subject_scope(subject))


def _scope(where: Where) -> str:
    return "" if where.subject is None else subject_scope(where.subject)


def _ident(where: Where) -> str:
    return ", ".join(f"{v}" for v in where.ident) or "-"


class NoKeys:
    """The sealer of a process given no keys on a database whose payloads are encrypted:
    every sealed payload reads as unavailable (readers show ``[encrypted]``) and every write
    of a payload is refused rather than stored in plaintext."""

    def __init__(self, why: str) -> None:
        self.why = why
        """What to do about it, said by every error."""

    def seal(self, raw: bytes, where: Where) -> bytes:
        """Refuse: this process must not write plaintext to an encrypted database."""
        raise KeyUnavailable(
            f"refusing to store {where.what()} in plaintext on a database whose payloads "
            f"are encrypted: {self.why}"
        )

    def open(self, sealed: bytes, where: Where) -> bytes:
        """Unavailable: no keys here."""
        raise KeyUnavailable(f"{where.what()} is encrypted: {self.why}")

    def address(self, raw: bytes, where: Where) -> str:
        """Refuse, as :meth:`seal` does: an address is made only for a blob being sealed."""
        raise KeyUnavailable(
            f"refusing to store a blob of tenant {where.tenant_id!r} in plaintext on a "
            f"database whose payloads are encrypted: {self.why}"
        )

    def terms(self, tenant_id: str, words: Sequence[str], *, every_key: bool) -> list[str]:
        """Unavailable: no keys here.

        Args:
            tenant_id: The tenant.
            words: The words.
            every_key: Unused.

        Raises:
            KeyUnavailable: Always.
        """
        raise KeyUnavailable(f"the knowledge base of tenant {tenant_id!r} is encrypted: "
                             f"{self.why}")

    def prepare(self, tenant_id: str, subject: str | None = None) -> None:
        """Nothing to read."""


def encrypt(store: Store, provider: KeyProvider, *, refresh: float = 5.0) -> Envelope:
    """Turn encryption at rest on for every payload read or written through ``store``.

    So does every engine, client, journal and knowledge base built on it. Its codec seals
    with an :class:`Envelope` over the tenants' data keys.

    Args:
        store: The store.
        provider: Wraps the data keys.
        refresh: How long a process goes on sealing with a key it knows before it looks for
            a newer one (a rotation made elsewhere).

    Returns:
        The envelope.
    """
    envelope = Envelope(DataKeys(store, provider, refresh=refresh))
    store.codec = Codec(threshold=store.codec.threshold, sealer=envelope,
                        chunk_bytes=store.codec.chunk_bytes,
                        max_value_bytes=store.codec.max_value_bytes)
    return envelope


def is_encrypted(store: Store) -> bool:
    """Whether the database holds data keys (payloads of some tenant are encrypted)."""
    return bool(store.list_data_keys())


def refuse_plaintext(store: Store, why: str) -> bool:
    """When the database is encrypted and ``store`` was given no keys, make its codec
    refuse to write plaintext and read sealed payloads as ``[encrypted]`` (``why`` says
    how to give keys); True when it did."""
    if store.codec.sealer is not None or not is_encrypted(store):
        return False
    store.codec = Codec(threshold=store.codec.threshold, sealer=NoKeys(why),
                        chunk_bytes=store.codec.chunk_bytes,
                        max_value_bytes=store.codec.max_value_bytes)
    return True
