"""Approvers' Ed25519 keys: making them, keeping the private half in a file, and reading
public keys in the form the registry stores (base64 of the raw 32 bytes).

The private key never leaves the approver's machine: the command line signs there and
sends only the signed decision. ``cryptography`` is imported on first use, so importing
underway does not pay for it.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import ConfigurationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "decode_public_key",
    "generate_keypair",
    "load_private_key",
    "public_key_of",
    "write_private_key",
]

PUBLIC_KEY_BYTES = 32


def generate_keypair() -> tuple[bytes, str]:
    """A new Ed25519 key pair: the private key as unencrypted PKCS#8 PEM bytes and the
    public key as base64 of its raw 32 bytes."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem, public_key_of(key)


def write_private_key(path: str | os.PathLike[str], pem: bytes) -> None:
    """Create ``path`` holding ``pem``, readable and writable by its owner only (0600).

    Refuses to replace an existing file: overwriting a key would lose the only copy of an
    approver's identity.
    """
    target = Path(path)
    if not target.parent.is_dir():
        raise ConfigurationError(
            f"cannot write private key {str(target)!r}: directory {str(target.parent)!r} "
            "does not exist"
        )
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigurationError(
            f"{str(target)!r} already exists; refusing to overwrite a key file (choose "
            "another --out, or remove the old key deliberately)"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"cannot write private key {str(target)!r}: {exc.strerror}"
        ) from None
    try:
        with os.fdopen(fd, "wb") as out:
            # O_CREAT's mode passes through the umask; set it exactly.
            os.fchmod(out.fileno(), 0o600)
            out.write(pem)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        target.unlink(missing_ok=True)
        raise


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """The Ed25519 private key in the PEM file ``path``.

    Refuses, naming the file and what to do: a missing or unreadable file, one that other
    users may read (as ssh does), one that holds no private key, and a key of another kind.
    """
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    source = Path(path)
    name = str(source)
    try:
        mode = source.stat().st_mode
        data = source.read_bytes()
    except FileNotFoundError:
        raise ConfigurationError(
            f"no private key file at {name!r}; create one with `underway keys new --out FILE`"
        ) from None
    except IsADirectoryError:
        raise ConfigurationError(f"{name!r} is a directory, not a private key file") from None
    except OSError as exc:
        raise ConfigurationError(f"cannot read private key {name!r}: {exc.strerror}") from None
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigurationError(
            f"private key {name!r} is accessible by other users (mode "
            f"{stat.S_IMODE(mode):04o}); restrict it with `chmod 600 {name}`"
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise ConfigurationError(
            f"private key {name!r} is encrypted with a passphrase; underway reads "
            "unencrypted PKCS#8 keys only"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigurationError(
            f"{name!r} does not hold a PEM private key that underway can read (expected "
            "a file written by `underway keys new`)"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigurationError(
            f"{name!r} holds a {type(key).__name__.removeprefix('_')} key; approvals are "
            "signed with Ed25519 keys (`underway keys new`)"
        )
    return key


def public_key_of(private_key: Ed25519PrivateKey) -> str:
    """The base64 of the raw 32-byte public key of ``private_key``."""
    from cryptography.hazmat.primitives import serialization

    raw = private_key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return base64.b64encode(raw).decode("ascii")


def decode_public_key(text: str) -> Ed25519PublicKey:
    """The Ed25519 public key that ``text`` (base64 of the raw 32 bytes) encodes.

    Raises :class:`~underway.errors.ConfigurationError` naming what is wrong with it.
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigurationError(
            f"public key {text!r} is not valid base64 (expected the line printed by "
            "`underway keys new`)"
        ) from None
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ConfigurationError(
            f"public key {text!r} decodes to {len(raw)} bytes; an Ed25519 public key has "
            f"{PUBLIC_KEY_BYTES}"
        )
    try:
        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError as exc:
        raise ConfigurationError(f"public key {text!r} is not an Ed25519 key: {exc}") from None
