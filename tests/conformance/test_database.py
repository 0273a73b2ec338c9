"""What every backend is besides its roles: a repeatable migration, a declared dialect."""

from __future__ import annotations

from store_backends import Backend

from underway.store import Store


def test_migrate_is_repeatable(store: Store) -> None:
    version = store.schema_version()
    assert version >= 1
    assert store.migrate() == version
    assert store.schema_version() == version


def test_a_store_declares_its_dialect(store: Store, backend: Backend) -> None:
    assert store.dialect == backend.dialect
