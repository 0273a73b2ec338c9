"""Key providers: where the key-encryption keys (KEKs) that wrap tenants' data keys live.

A :class:`KeyProvider` wraps a data key under its current KEK and unwraps one that any of
its KEKs wrapped; the KEK never enters the database. Three ship:

* :class:`KeyringFile` — a local file of KEKs (created mode 0600; refused when others may
  read it), with :meth:`KeyringFile.add_kek` for a KEK rotation;
* :class:`EnvKey` — a KEK in an environment variable (base64 of 32 bytes), with earlier
  ones in other variables while data keys are re-wrapped;
* :class:`CallbackKeys` — your ``wrap`` and ``unwrap`` functions: a cloud KMS (AWS KMS
  ``Encrypt``/``Decrypt`` with an encryption context, Google Cloud KMS, Azure Key Vault's
  wrapKey/unwrapKey, HashiCorp Vault transit) plugs in here.

Every wrap is bound to a ``context`` (the tenant, key id and scope of the data key), so a
wrapped data key copied to another tenant's row does not unwrap.

A provider may be :class:`Refreshable`: it reads its KEKs again when where they are kept
changed. :class:`~underway.crypto.DataKeys` asks it to when a data key does not unwrap and
before it wraps a new one, so a running process follows a KEK rotation made by another
(``underway keys rotate --new-kek``) without a restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import ConfigurationError, KeyUnavailable
from .vault import SubjectDir, SubjectVault

__all__ = [
    "CallbackKeys",
    "EnvKey",
    "KeyProvider",
    "KeyringFile",
    "Refreshable",
    "kek_fingerprint",
    "new_kek",
]

KEK_BYTES = 32
"""A key-encryption key is 256 bits (AES-256)."""

log = logging.getLogger("underway.crypto")

_FORMAT = "underway-keyring"


class KeyProvider(Protocol):
    """Wraps and unwraps data keys with key-encryption keys held outside the database."""

    @property
    def kek_id(self) -> str:
        """The KEK new data keys are wrapped with (and older ones re-wrapped to)."""
        ...

    def wrap(self, dek: bytes, *, context: bytes) -> bytes:
        """``dek`` wrapped by the current KEK, bound to ``context``."""
        ...

    def unwrap(self, wrapped: bytes, *, kek_id: str, context: bytes) -> bytes:
        """The data key that ``kek_id`` wrapped for ``context``.

        Args:
            wrapped: The wrapped data key.
            kek_id: The KEK that wrapped it.
            context: What it was wrapped for.

        Raises:
            KeyUnavailable: This provider does not hold that KEK, or refuses. Or the wrapped key
                does not unwrap for ``context``.
        """
        ...


@runtime_checkable
class Refreshable(Protocol):
    """A key provider whose KEKs may change while the process runs (a keyring file another
    process rotated)."""

    def refresh(self) -> bool:
        """Read the KEKs again if where they are kept changed; True when they did."""
        ...


def refresh_provider(provider: object) -> bool:
    """Have ``provider`` read its KEKs again if it can and they changed; True when it did."""
    return provider.refresh() if isinstance(provider, Refreshable) else False


def new_kek() -> bytes:
    """A fresh random key-encryption key."""
    return os.urandom(KEK_BYTES)


def kek_fingerprint(kek: bytes) -> str:
    """The id of a local KEK: a hash of it (names the key without revealing it)."""
    return "kek-" + hashlib.sha256(b"underway kek id\x00" + kek).hexdigest()[:16]


def _wrap(kek: bytes, dek: bytes, context: bytes) -> bytes:
    nonce = os.urandom(12)
    return nonce + AESGCM(kek).encrypt(nonce, dek, b"underway data key\x00" + context)


def _unwrap(kek: bytes, wrapped: bytes, context: bytes, kek_id: str) -> bytes:
    try:
        return AESGCM(kek).decrypt(wrapped[:12], wrapped[12:],
                                   b"underway data key\x00" + context)
    except (InvalidTag, ValueError):
        raise KeyUnavailable(
            f"a data key wrapped by {kek_id} does not unwrap for its tenant and id (it was "
            "altered, or copied from another row)"
        ) from None


class _LocalKeks:
    """KEKs held in this process, by fingerprint; the first is current."""

    def __init__(self, keks: Sequence[bytes], where: str) -> None:
        if not keks:
            raise ConfigurationError(f"{where} holds no key-encryption key")
        self._keks = {kek_fingerprint(k): k for k in keks}
        self._current = kek_fingerprint(keks[0])
        self._where = where

    @property
    def kek_id(self) -> str:
        """The current KEK's id (its fingerprint)."""
        return self._current

    @property
    def ids(self) -> list[str]:
        """The ids of every KEK held."""
        return list(self._keks)

    def wrap(self, dek: bytes, *, context: bytes) -> bytes:
        """``dek`` wrapped by the current KEK."""
        return _wrap(self._keks[self._current], dek, context)

    def unwrap(self, wrapped: bytes, *, kek_id: str, context: bytes) -> bytes:
        """The data key, when ``kek_id`` is one of the KEKs held here."""
        kek = self._keks.get(kek_id)
        if kek is None:
            raise KeyUnavailable(
                f"the data key is wrapped by {kek_id}, which {self._where} does not hold "
                f"(it holds {', '.join(sorted(self._keks))})"
            )
        return _unwrap(kek, wrapped, context, kek_id)


class KeyringFile:
    """KEKs kept in a local file, readable by its owner only.

    The file is JSON: ``{"format": "underway-keyring", "version": 1, "current": <kek id>,
    "keys": [{"id": ..., "key": <base64>, "created": <epoch seconds>}]}``. :meth:`create`
    makes one (mode 0600, never over an existing file); opening a file whose mode lets its
    group or others read or write it is refused, naming the mode and the fix. Keep a copy
    of it somewhere safe: without it nothing sealed can be opened again.

    Data subjects' secrets (:mod:`underway.crypto.vault`) are kept in the directory
    ``<keyring>.subjects`` beside it, unless ``subjects`` names another.
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 subjects: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path)
        """The keyring file."""
        self._seen: tuple[int, int, int, int] | None = None
        self._keks = self._read()
        self._vault = SubjectDir(subjects if subjects is not None
                                 else self.path.with_name(self.path.name + ".subjects"))

    @property
    def vault(self) -> SubjectVault:
        """Where data subjects' secrets are kept: a directory beside the keyring."""
        return self._vault

    @classmethod
    def create(cls, path: str | os.PathLike[str]) -> KeyringFile:
        """Create a keyring file with one fresh KEK (mode 0600; an existing file is never
        overwritten) and open it."""
        target = Path(path)
        kek = new_kek()
        body = _keyring_json(kek_fingerprint(kek), [(kek, time.time())])
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise ConfigurationError(f"keyring {target} exists already; it was left as it "
                                     "is") from None
        except OSError as exc:
            raise ConfigurationError(f"cannot create keyring {target}: {exc}") from None
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(body)
        return cls(target)

    def _read(self) -> _LocalKeks:
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            raise ConfigurationError(
                f"no keyring at {self.path}; create one with `underway keys init --keyring "
                f"{self.path}`") from None
        mode = found.st_mode
        if mode & 0o077:
            raise ConfigurationError(
                f"keyring {self.path} has mode {stat.S_IMODE(mode):04o}: others may read or "
                f"change it. It must be readable by its owner only: chmod 600 {self.path}"
            )
        try:
            data = json.loads(self.path.read_text("utf-8"))
            if data.get("format") != _FORMAT or data.get("version") != 1:
                raise ValueError("not an underway keyring of version 1")
            keys = {k["id"]: base64.b64decode(k["key"], validate=True) for k in data["keys"]}
            current = data["current"]
            order = [keys[current], *(v for k, v in keys.items() if k != current)]
        except (OSError, ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise ConfigurationError(f"keyring {self.path} cannot be read: {exc}") from None
        for kek_id, kek in keys.items():
            if len(kek) != KEK_BYTES or kek_fingerprint(kek) != kek_id:
                raise ConfigurationError(f"keyring {self.path}: key {kek_id} is damaged")
        self._seen = _identity(found)
        return _LocalKeks(order, f"keyring {self.path}")

    def refresh(self) -> bool:
        """Read the file again if it changed since it was read (another process added a
        KEK: ``underway keys rotate --new-kek``); True when it did. A file that changed
        and cannot be read (removed, made readable by others, damaged) leaves the KEKs
        read before in use, and is logged."""
        try:
            now = _identity(os.stat(self.path))
        except OSError:
            now = None
        if now == self._seen:
            return False
        try:
            keks = self._read()
        except ConfigurationError as exc:
            log.warning("keyring changed and was not read again; the KEKs read before "
                        "stay in use: %s", exc)
            return False
        changed = set(keks.ids) != set(self._keks.ids) or keks.kek_id != self.kek_id
        self._keks = keks
        return changed

    @property
    def kek_id(self) -> str:
        """The current KEK's id."""
        return self._keks.kek_id

    def wrap(self, dek: bytes, *, context: bytes) -> bytes:
        """``dek`` wrapped by the current KEK."""
        return self._keks.wrap(dek, context=context)

    def unwrap(self, wrapped: bytes, *, kek_id: str, context: bytes) -> bytes:
        """The data key, when this keyring holds ``kek_id``.

        Args:
            wrapped: The wrapped data key.
            kek_id: The KEK that wrapped it.
            context: What it was wrapped for.
        """
        return self._keks.unwrap(wrapped, kek_id=kek_id, context=context)

    def add_kek(self) -> str:
        """Add a fresh KEK and make it current (older ones stay, to unwrap what they
        wrapped until every data key is re-wrapped); return its id. The file is replaced
        atomically, mode 0600."""
        data = json.loads(self.path.read_text("utf-8"))
        kek = new_kek()
        entries = [(base64.b64decode(k["key"]), float(k.get("created", 0)))
                   for k in data["keys"]]
        body = _keyring_json(kek_fingerprint(kek), [(kek, time.time()), *entries])
        tmp = self.path.with_name(self.path.name + ".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)
        self._keks = self._read()
        return self.kek_id


def _identity(found: os.stat_result) -> tuple[int, int, int, int]:
    """What tells one version of a file from the next: replaced (inode), rewritten (time,
    size)."""
    return (found.st_dev, found.st_ino, found.st_mtime_ns, found.st_size)


def _keyring_json(current: str, keks: Sequence[tuple[bytes, float]]) -> str:
    return json.dumps({
        "format": _FORMAT, "version": 1, "current": current,
        "keys": [{"id": kek_fingerprint(k), "key": base64.b64encode(k).decode(),
                  "created": at} for k, at in keks],
    }, indent=2) + "\n"


class EnvKey:
    """A KEK read from an environment variable, and earlier KEKs from other variables.

    A KEK is base64 of 32 random bytes: ``underway keys kek`` prints one. Earlier KEKs are
    kept while data keys wrapped by them are re-wrapped (``underway keys rotate --rewrap``).

    Args:
        var: The variable holding the current KEK.
        previous: The variables holding earlier KEKs.
        subjects: The directory where data subjects' secrets are kept. None: nowhere, so an
            erasure reaches the database but not its backups.
    """

    def __init__(self, var: str = "UNDERWAY_KEK", *, previous: Sequence[str] = (),
                 subjects: str | os.PathLike[str] | None = None) -> None:
        self.var = var
        """The variable holding the current KEK."""
        self.previous = tuple(previous)
        """The variables holding earlier KEKs."""
        self._keks = self._read()
        self._vault = None if subjects is None else SubjectDir(subjects)

    def _read(self) -> _LocalKeks:
        keks = [_env_kek(self.var)] + [_env_kek(v) for v in self.previous if os.environ.get(v)]
        return _LocalKeks(keks, f"environment variable {self.var}")

    def refresh(self) -> bool:
        """Read the variables again (changed by this process: another process cannot
        change them); True when the KEKs changed."""
        try:
            keks = self._read()
        except ConfigurationError:
            return False
        changed = set(keks.ids) != set(self._keks.ids) or keks.kek_id != self.kek_id
        self._keks = keks
        return changed

    @property
    def vault(self) -> SubjectVault | None:
        """Where data subjects' secrets are kept (``subjects``; None: nowhere, so an
        erasure reaches the database but not its backups)."""
        return self._vault

    @property
    def kek_id(self) -> str:
        """The current KEK's id (its fingerprint)."""
        return self._keks.kek_id

    def wrap(self, dek: bytes, *, context: bytes) -> bytes:
        """``dek`` wrapped by the current KEK."""
        return self._keks.wrap(dek, context=context)

    def unwrap(self, wrapped: bytes, *, kek_id: str, context: bytes) -> bytes:
        """The data key, when ``kek_id`` is the current or a previous KEK.

        Args:
            wrapped: The wrapped data key.
            kek_id: The KEK that wrapped it.
            context: What it was wrapped for.
        """
        return self._keks.unwrap(wrapped, kek_id=kek_id, context=context)


def _env_kek(var: str) -> bytes:
    value = os.environ.get(var)
    if not value:
        raise ConfigurationError(
            f"environment variable {var} is not set; it must hold the key-encryption key "
            "(base64 of 32 random bytes; `underway keys kek` prints a new one)"
        )
    try:
        kek = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        kek = b""
    if len(kek) != KEK_BYTES:
        raise ConfigurationError(
            f"environment variable {var} does not hold a key-encryption key: it must be the "
            f"base64 of {KEK_BYTES} bytes (`underway keys kek` prints a new one)"
        )
    return kek


class CallbackKeys:
    """A key provider made of your functions, e.g. around a cloud KMS.

    Pass ``context`` to the KMS as its encryption context (or associated data).

    Args:
        kek_id: The KMS key that wraps new data keys.
        wrap: ``wrap(dek, context) -> bytes``, with the KMS key named ``kek_id``.
        unwrap: ``unwrap(wrapped, kek_id, context) -> bytes``. It should raise
            :class:`~underway.errors.KeyUnavailable` when the KMS refuses. Any other error
            it raises is reported as one.
        vault: Where data subjects' secrets are kept (a :class:`SubjectVault`, e.g. one KMS
            key or Vault secret per subject). Without one an erasure reaches the database
            but not its backups.
    """

    def __init__(
        self,
        *,
        kek_id: str,
        wrap: Callable[[bytes, bytes], bytes],
        unwrap: Callable[[bytes, str, bytes], bytes],
        vault: SubjectVault | None = None,
    ) -> None:
        if not kek_id:
            raise ConfigurationError("CallbackKeys needs the kek_id of the key it wraps with")
        self._kek_id = kek_id
        self._wrap = wrap
        self._unwrap = unwrap
        self._vault = vault

    @property
    def vault(self) -> SubjectVault | None:
        """Where data subjects' secrets are kept, if anywhere."""
        return self._vault

    @property
    def kek_id(self) -> str:
        """The id of the KMS key new data keys are wrapped with."""
        return self._kek_id

    def wrap(self, dek: bytes, *, context: bytes) -> bytes:
        """``dek`` wrapped by your ``wrap``."""
        return self._wrap(dek, context)

    def unwrap(self, wrapped: bytes, *, kek_id: str, context: bytes) -> bytes:
        """The data key from your ``unwrap``.

        Args:
            wrapped: The wrapped data key.
            kek_id: The KEK that wrapped it.
            context: What it was wrapped for.
        """
        try:
            return self._unwrap(wrapped, kek_id, context)
        except KeyUnavailable:
            raise
        except Exception as exc:
            raise KeyUnavailable(
                f"the key provider could not unwrap a data key wrapped by {kek_id}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
