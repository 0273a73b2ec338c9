"""Encryption at rest, piece by piece: the sealed box (version byte, key id, bound to where
it is stored), per-tenant data keys wrapped by a KEK (first key made once, rotation, KEK
re-wrap, destruction), keyed blob addresses, the three key providers (a keyring file kept
0600 and refused otherwise, a KEK in the environment, callbacks around a KMS), and the
``[encryption]`` table of ``underway.toml``."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from fakes.keys import encrypted, memory_keys
from underway.codec import SEALED_VERSION, Codec, Where
from underway.config import ConfigError, load_config
from underway.crypto import (
    CallbackKeys,
    EnvKey,
    KeyringFile,
    encrypt,
    kek_fingerprint,
    new_kek,
    refuse_plaintext,
)
from underway.crypto._box import box_key_id
from underway.errors import ConfigurationError, IntegrityError, KeyUnavailable
from underway.store import MemoryStore

HERE = Where("event", "acme", ("r1", 3, "ToolSucceeded"), "r1")


def sealed_store(kek: bytes = b"k" * 32) -> MemoryStore:
    store = MemoryStore()
    encrypted(store, kek)
    return store


def test_a_box_names_its_format_and_key_and_opens_only_where_it_was_sealed() -> None:
    store = sealed_store()
    codec = store.codec
    box = codec.seal(b'{"aadhaar":"2345 6789 0123"}', HERE)
    assert box[0] == SEALED_VERSION and b"2345 6789" not in box
    [key] = store.list_data_keys("acme")
    assert box_key_id(box) == key.key_id
    assert codec.open(box, HERE) == b'{"aadhaar":"2345 6789 0123"}'
    for elsewhere in (Where("event", "acme", ("r1", 4, "ToolSucceeded"), "r1"),
                      Where("event", "acme", ("r2", 3, "ToolSucceeded"), "r2"),
                      Where("event", "acme", ("r1", 3, "ToolFailed"), "r1"),
                      Where("signal", "acme", ("r1", 3, "ToolSucceeded"))):
        with pytest.raises(IntegrityError, match="copied here from another place"):
            codec.open(box, elsewhere)
    # Another tenant has another key: the box names a key that tenant never had.
    with pytest.raises(IntegrityError, match="copied here from another tenant"):
        codec.open(box, Where("event", "globex", HERE.ident, "r1"))
    # A flipped bit, in the key id or the ciphertext, never opens.
    for i in (2, len(box) - 1):
        bad = box[:i] + bytes([box[i] ^ 1]) + box[i + 1:]
        with pytest.raises((IntegrityError, KeyUnavailable)):
            codec.open(bad, HERE)


def test_without_keys_a_box_is_unavailable_and_plaintext_passes() -> None:
    box = sealed_store().codec.seal(b"secret", HERE)
    with pytest.raises(KeyUnavailable, match="an event of tenant 'acme' is encrypted"):
        Codec().open(box, HERE)
    assert Codec().open(b'{"plain":1}', HERE) == b'{"plain":1}'
    assert sealed_store().codec.open(b'{"plain":1}', HERE) == b'{"plain":1}'


def test_a_process_without_keys_on_an_encrypted_database_refuses_plaintext() -> None:
    store = sealed_store()
    box = store.codec.seal(b"secret", HERE)
    store.codec = Codec()
    assert refuse_plaintext(store, "give the keys")
    with pytest.raises(KeyUnavailable, match=r"refusing to store an event .* in plaintext"):
        store.codec.seal(b"x", HERE)
    with pytest.raises(KeyUnavailable, match="give the keys"):
        store.codec.open(box, HERE)
    assert not refuse_plaintext(MemoryStore(), "unencrypted database: nothing to refuse")


def test_blob_addresses_are_keyed_per_tenant() -> None:
    store = sealed_store()
    codec = store.codec
    blobs: dict[str, bytes] = {}
    big = "x" * 5000
    ref_a = codec.externalize({"doc": big}, blobs, Where("event", "acme"))
    ref_b = codec.externalize({"doc": big}, blobs, Where("event", "globex"))
    assert ref_a != ref_b and len(blobs) == 2
    assert all(b"xxxx" not in v for v in blobs.values())
    assert Codec().externalize({"doc": big}, {}, Where("event", "acme")) not in (ref_a, ref_b)


def test_data_keys_first_rotation_rewrap_and_destruction() -> None:
    store = MemoryStore()
    provider = memory_keys(b"a" * 32, "kek-a")
    envelope = encrypt(store, provider)
    keys = envelope.keys
    first = keys.active("acme")
    assert keys.active("acme") is first and len(store.list_data_keys("acme")) == 1
    old_box = envelope.seal(b"old", HERE)
    rec = keys.rotate("acme")
    assert keys.active("acme").key_id == rec.key_id != first.key_id
    assert envelope.open(old_box, HERE) == b"old"  # a retired key still opens
    # A KEK rotation: the provider's new KEK wraps every key anew; the old KEK is gone.
    rotated = memory_keys(b"b" * 32, "kek-b")
    assert encrypt(store, CallbackKeys(kek_id="kek-b", wrap=lambda d, c: rotated.wrap(
        d, context=c), unwrap=lambda w, k, c: (provider if k == "kek-a" else rotated).unwrap(
            w, kek_id=k, context=c))).keys.rewrap() == 2
    assert {k.kek_id for k in store.list_data_keys()} == {"kek-b"}
    only_new = encrypt(store, rotated)
    assert only_new.open(old_box, HERE) == b"old"
    store.destroy_data_key("acme", first.key_id)
    only_new.keys.forget()
    with pytest.raises(KeyUnavailable, match="destroyed"):
        only_new.open(old_box, HERE)


def test_a_keyring_file_is_made_0600_and_refused_when_others_may_read_it(
    tmp_path: Path
) -> None:
    path = tmp_path / "keyring.json"
    ring = KeyringFile.create(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(ConfigurationError, match="exists already"):
        KeyringFile.create(path)
    old = ring.kek_id
    wrapped = ring.wrap(b"d" * 32, context=b"ctx")
    new = ring.add_kek()
    assert new != old and KeyringFile(path).kek_id == new
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert KeyringFile(path).unwrap(wrapped, kek_id=old, context=b"ctx") == b"d" * 32
    with pytest.raises(KeyUnavailable, match="does not unwrap"):
        ring.unwrap(wrapped, kek_id=old, context=b"another tenant's key")
    os.chmod(path, 0o644)
    with pytest.raises(ConfigurationError, match=r"has mode 0644.*chmod 600"):
        KeyringFile(path)
    os.chmod(path, 0o600)
    path.write_text("{}")
    with pytest.raises(ConfigurationError, match="cannot be read"):
        KeyringFile(path)
    with pytest.raises(ConfigurationError, match=r"no keyring at .*underway keys init"):
        KeyringFile(tmp_path / "missing.json")


def test_a_kek_in_the_environment_with_earlier_ones_beside_it(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = new_kek(), new_kek()
    monkeypatch.setenv("UNDERWAY_KEK", base64.b64encode(old).decode())
    wrapped = EnvKey().wrap(b"d" * 32, context=b"c")
    monkeypatch.setenv("UNDERWAY_KEK", base64.b64encode(new).decode())
    monkeypatch.setenv("UNDERWAY_KEK_OLD", base64.b64encode(old).decode())
    keys = EnvKey(previous=["UNDERWAY_KEK_OLD"])
    assert keys.kek_id == kek_fingerprint(new)
    assert keys.unwrap(wrapped, kek_id=kek_fingerprint(old), context=b"c") == b"d" * 32
    with pytest.raises(KeyUnavailable, match="does not hold"):
        EnvKey().unwrap(wrapped, kek_id=kek_fingerprint(old), context=b"c")
    monkeypatch.setenv("UNDERWAY_KEK", "not a key")
    with pytest.raises(ConfigurationError, match="base64 of 32 bytes"):
        EnvKey()
    monkeypatch.delenv("UNDERWAY_KEK")
    with pytest.raises(ConfigurationError, match="UNDERWAY_KEK is not set"):
        EnvKey()


def test_a_callback_provider_reports_a_refusing_kms_as_unavailable() -> None:
    def refuse(wrapped: bytes, kek_id: str, context: bytes) -> bytes:
        raise PermissionError("AccessDeniedException")

    keys = CallbackKeys(kek_id="arn:kms:1", wrap=lambda d, c: d[::-1], unwrap=refuse)
    with pytest.raises(KeyUnavailable, match="AccessDeniedException"):
        keys.unwrap(b"x", kek_id="arn:kms:1", context=b"c")


def test_the_encryption_table_of_underway_toml(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    KeyringFile.create(tmp_path / "keys.json")
    (tmp_path / "underway.toml").write_text('[encryption]\nprovider = "keyring"\n'
                                            'keyring = "keys.json"\nrefresh = 2.0\n')
    config = load_config(tmp_path / "underway.toml")
    assert isinstance(config.make_key_provider(), KeyringFile)
    (tmp_path / "bad.toml").write_text('[encryption]\nprovider = "keyring"\n')
    with pytest.raises(ConfigError, match="needs keyring"):
        load_config(tmp_path / "bad.toml")
    (tmp_path / "env.toml").write_text('[encryption]\nprovider = "env"\nenv = "MY_KEK"\n')
    monkeypatch.delenv("MY_KEK", raising=False)
    with pytest.raises(ConfigError, match=r"encryption\.env: environment variable MY_KEK"):
        load_config(tmp_path / "env.toml").make_key_provider()
    (tmp_path / "py.toml").write_text('[encryption]\nprovider = "python"\n'
                                      'factory = "fakes.keys:memory_keys"\n')
    assert isinstance(load_config(tmp_path / "py.toml").make_key_provider(), CallbackKeys)
