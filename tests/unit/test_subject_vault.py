"""The subject vault: one secret per (tenant, subject), the same for racing creators, gone
for good when destroyed, refused when others may read it or damaged; and data keys of a
subject wrapped twice (KEK, then the subject's secret) so that destroying the secret leaves
them unopenable even with the KEK."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from underway.crypto import EnvKey, KeyringFile
from underway.crypto.datakeys import VAULTED, DataKeys
from underway.crypto.vault import SubjectDir, vault_of
from underway.errors import ConfigurationError, KeyUnavailable, SubjectErased
from underway.store import connect
from underway.store.records import subject_scope


def test_a_secret_is_made_once_and_kept(tmp_path: Path) -> None:
    vault = SubjectDir(tmp_path / "v")
    assert vault.subject_secret("acme", "c1", create=False) is None
    first = vault.subject_secret("acme", "c1", create=True)
    assert first is not None and len(first) == 32
    assert vault.subject_secret("acme", "c1", create=True) == first
    assert vault.subject_secret("acme", "c2", create=True) != first
    assert vault.subject_secret("globex", "c1", create=True) != first
    assert oct((tmp_path / "v").stat().st_mode & 0o777) == "0o700"
    names = os.listdir(tmp_path / "v")
    assert len(names) == 3 and not any("c1" in n or "acme" in n for n in names)
    assert all((tmp_path / "v" / n).stat().st_mode & 0o777 == 0o600 for n in names)


def test_racing_creators_get_one_secret(tmp_path: Path) -> None:
    got: list[bytes | None] = []
    barrier = threading.Barrier(8)

    def make() -> None:
        barrier.wait()
        got.append(SubjectDir(tmp_path / "v").subject_secret("acme", "c1", create=True))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and got[0] is not None
    assert len(os.listdir(tmp_path / "v")) == 1  # no temporary file left behind


def test_a_destroyed_secret_is_gone(tmp_path: Path) -> None:
    vault = SubjectDir(tmp_path / "v")
    vault.subject_secret("acme", "c1", create=True)
    assert vault.destroy_subject("acme", "c1") is True
    assert vault.subject_secret("acme", "c1", create=False) is None
    assert vault.destroy_subject("acme", "c1") is False


def test_an_open_or_damaged_vault_is_refused(tmp_path: Path) -> None:
    (tmp_path / "v").mkdir(mode=0o755)
    (tmp_path / "v").chmod(0o755)
    with pytest.raises(ConfigurationError, match="chmod 700"):
        SubjectDir(tmp_path / "v").subject_secret("acme", "c1", create=True)
    (tmp_path / "v").chmod(0o700)
    vault = SubjectDir(tmp_path / "v")
    vault.subject_secret("acme", "c1", create=True)
    (name,) = os.listdir(tmp_path / "v")
    (tmp_path / "v" / name).write_bytes(b"short")
    with pytest.raises(KeyUnavailable, match="damaged"):
        vault.subject_secret("acme", "c1", create=False)


def test_a_subject_key_needs_both_the_kek_and_the_subject_secret(tmp_path: Path) -> None:
    store = connect("memory://")
    keyring = KeyringFile.create(tmp_path / "k.keyring")
    assert vault_of(keyring) is not None
    keys = DataKeys(store, keyring)
    key = keys.active("acme", subject_scope("c1"))
    rec = store.active_data_key("acme", subject_scope("c1"))
    assert rec is not None and rec.wrapped.startswith(VAULTED)
    tenant = store.active_data_key("acme", "")
    assert tenant is None or not tenant.wrapped.startswith(VAULTED)
    # Another process with the same keyring and vault opens it.
    assert DataKeys(store, KeyringFile(tmp_path / "k.keyring"))._open(rec).key_id == key.key_id
    assert keyring.vault.destroy_subject("acme", "c1")
    with pytest.raises(SubjectErased, match="vault no longer holds"):
        DataKeys(store, KeyringFile(tmp_path / "k.keyring"))._open(rec)


def test_a_kek_rotation_rewraps_a_subject_key_inside_its_subject_wrap(tmp_path: Path) -> None:
    store = connect("memory://")
    keyring = KeyringFile.create(tmp_path / "k.keyring")
    keys = DataKeys(store, keyring)
    key = keys.active("acme", subject_scope("c1"))
    keyring.add_kek()
    assert keys.rewrap() == 1
    rec = store.active_data_key("acme", subject_scope("c1"))
    assert rec is not None and rec.kek_id == keyring.kek_id and rec.wrapped.startswith(VAULTED)
    assert DataKeys(store, KeyringFile(tmp_path / "k.keyring"))._open(rec).key_id == key.key_id


def test_an_env_kek_without_a_vault_wraps_subject_keys_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNDERWAY_KEK", "a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U=")
    store = connect("memory://")
    provider = EnvKey()
    assert vault_of(provider) is None
    DataKeys(store, provider).active("acme", subject_scope("c1"))
    rec = store.active_data_key("acme", subject_scope("c1"))
    assert rec is not None and not rec.wrapped.startswith(VAULTED)
    vaulted = EnvKey(subjects=tmp_path / "v")
    assert vault_of(vaulted) is not None
