"""Private key files: created owner-only, never overwritten, and refused with a clear
message when missing, unreadable, exposed to others, not a key, or a key of another kind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from underway.errors import ConfigurationError, UnderwayError
from underway.guard.approvals import (
    generate_keypair,
    load_private_key,
    public_key_of,
    register_approver,
    write_private_key,
)
from underway.guard.approvals.keys import decode_public_key
from underway.store import MemoryStore


def test_a_written_key_is_owner_only_and_loads_back(tmp_path: Path) -> None:
    pem, public = generate_keypair()
    path = tmp_path / "alice.pem"
    old = os.umask(0)  # the file must be 0600 whatever the umask
    try:
        write_private_key(path, pem)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public_key_of(load_private_key(path)) == public


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "alice.pem"
    first, _ = generate_keypair()
    write_private_key(path, first)
    second, _ = generate_keypair()
    with pytest.raises(ConfigurationError, match="refusing to overwrite"):
        write_private_key(path, second)
    assert path.read_bytes() == first


def test_writing_into_a_missing_directory_names_it(tmp_path: Path) -> None:
    pem, _ = generate_keypair()
    with pytest.raises(ConfigurationError, match="does not exist"):
        write_private_key(tmp_path / "nowhere" / "k.pem", pem)


def test_a_missing_key_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="underway keys new"):
        load_private_key(tmp_path / "absent.pem")


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    pem, _ = generate_keypair()
    path = tmp_path / "k.pem"
    write_private_key(path, pem)
    path.chmod(0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        load_private_key(path)


def test_an_unreadable_key_path_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("x")
    with pytest.raises(ConfigurationError, match="cannot read private key"):
        load_private_key(tmp_path / "plain-file" / "k.pem")


def test_a_file_that_is_not_a_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("dear diary")
    path.chmod(0o600)
    with pytest.raises(ConfigurationError, match="does not hold a PEM private key"):
        load_private_key(path)


def test_a_directory_is_not_a_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="directory"):
        load_private_key(tmp_path)


def test_a_key_of_another_kind_is_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path = tmp_path / "ec.pem"
    write_private_key(path, pem)
    with pytest.raises(ConfigurationError, match="Ed25519"):
        load_private_key(path)


def test_a_passphrase_protected_key_is_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    path = tmp_path / "locked.pem"
    write_private_key(path, pem)
    with pytest.raises(ConfigurationError, match="passphrase"):
        load_private_key(path)


@pytest.mark.parametrize("text,problem", [
    ("not base64!", "not valid base64"),
    ("AAAA", "decodes to 3 bytes"),
    ("", "decodes to 0 bytes"),
])
def test_a_bad_public_key_names_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        decode_public_key(text)


def test_registering_checks_the_id_roles_and_key() -> None:
    store = MemoryStore()
    _, public = generate_keypair()
    rec = register_approver(store, "alice", public_key=f" {public}\n",
                            roles=["finance", "finance", "ops"], now=5.0, tenant_id="acme")
    assert rec.public_key == public and rec.roles == ("finance", "ops")
    assert store.get_approver("acme", "alice") == rec
    bad_inputs = [("", ["ops"], public), ("al ice", ["ops"], public),
                  ("bob", ["fin ance"], public), ("bob", [""], public), ("bob", ["ops"], "AAAA")]
    for approver_id, roles, key in bad_inputs:
        with pytest.raises(UnderwayError):
            register_approver(store, approver_id, public_key=key, roles=roles, now=5.0)
    assert store.list_approvers("default") == []
