"""Secrets of data subjects held outside the database, so that erasing a subject reaches the
backups taken before it.

A data subject's data key is stored in the database wrapped twice: by the key provider's
KEK, then by a 256-bit secret of that subject which a :class:`SubjectVault` keeps *outside*
the database. Erasure destroys both the wrapped key in the database and the secret in the
vault. A backup of the database taken before the erasure still holds the wrapped key; with
the secret gone it can no longer be unwrapped, even by someone who holds the KEK.

Two vaults ship: :class:`SubjectDir` (a directory of one file per subject, mode 0600 in a
0700 directory; a :class:`~underway.crypto.KeyringFile` keeps one beside itself) and your
functions, given to :class:`~underway.crypto.CallbackKeys` (a KMS key or a Vault secret per
subject). A provider without a vault (:class:`~underway.crypto.EnvKey` unless given a
directory) still erases from the database, and says that backups were not reached.

Deleting a file does not scrub the disk blocks it used: keep the directory on encrypted
storage, and out of the database's backups (a backup that holds the vault defeats it).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import uuid
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..errors import ConfigurationError, KeyUnavailable

__all__ = ["SubjectDir", "SubjectVault"]

SECRET_BYTES = 32
"""A subject's secret is 256 bits."""


class SubjectVault(Protocol):
    """Keeps one secret per data subject outside the database, and destroys it on request."""

    def subject_secret(self, tenant_id: str, subject: str, *, create: bool) -> bytes | None:
        """The subject's secret, or None when there is none and not ``create``.

        Processes creating one at once all get the same.

        Args:
            tenant_id: The subject's tenant.
            subject: The data subject.
            create: Make one (at random) when there is none.
        """
        ...

    def destroy_subject(self, tenant_id: str, subject: str) -> bool:
        """Destroy the subject's secret for good; False when there was none."""
        ...


@runtime_checkable
class HasVault(Protocol):
    """A key provider that keeps data subjects' secrets (``vault``)."""

    @property
    def vault(self) -> SubjectVault | None:
        """Where the provider keeps subjects' secrets (None: it keeps none)."""
        ...


def vault_of(provider: object) -> SubjectVault | None:
    """The subject vault of a key provider, if it has one."""
    return provider.vault if isinstance(provider, HasVault) else None


class SubjectDir:
    """A :class:`SubjectVault` in a local directory: one file of 32 random bytes per
    subject, named by a hash of tenant and subject (the directory lists no subject id),
    created mode 0600 in a directory of mode 0700; a directory others may read is refused.
    Every process that seals for a subject must see the same directory (one host, or a
    shared file system); across hosts use a KMS through :class:`~underway.crypto.CallbackKeys`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        """The directory."""

    def _file(self, tenant_id: str, subject: str) -> Path:
        name = hashlib.sha256(f"underway subject\x00{tenant_id}\x00{subject}".encode()
                              ).hexdigest()[:40]
        return self.path / name

    def subject_secret(self, tenant_id: str, subject: str, *, create: bool) -> bytes | None:
        """The subject's secret (made when missing and ``create``).

        Args:
            tenant_id: The subject's tenant.
            subject: The data subject.
            create: Make one when there is none.
        """
        target = self._file(tenant_id, subject)
        found = self._read(target)
        if found is not None or not create:
            return found
        self._ensure_dir()
        # Written whole under a temporary name, then linked into place: a reader never
        # meets a partial file, and of two creators the first link wins.
        tmp = self.path / f".{target.name}.{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(os.urandom(SECRET_BYTES))
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        self._sync_dir()
        return self._read(target)

    def destroy_subject(self, tenant_id: str, subject: str) -> bool:
        """Remove the subject's file (and make the removal durable)."""
        try:
            self._file(tenant_id, subject).unlink()
        except FileNotFoundError:
            return False
        self._sync_dir()
        return True

    def _read(self, target: Path) -> bytes | None:
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KeyUnavailable(f"subject vault {self.path}: cannot read {target.name}: "
                                 f"{exc}") from None
        if len(data) != SECRET_BYTES:
            raise KeyUnavailable(f"subject vault {self.path}: {target.name} is damaged "
                                 f"({len(data)} bytes, not {SECRET_BYTES})")
        return data

    def _ensure_dir(self) -> None:
        try:
            self.path.mkdir(mode=0o700, exist_ok=True)
            mode = os.stat(self.path).st_mode
        except OSError as exc:
            raise ConfigurationError(f"subject vault {self.path}: {exc}") from None
        if mode & 0o077:
            raise ConfigurationError(
                f"subject vault {self.path} has mode {stat.S_IMODE(mode):04o}: others may "
                f"read it. It must be its owner's only: chmod 700 {self.path}")

    def _sync_dir(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
