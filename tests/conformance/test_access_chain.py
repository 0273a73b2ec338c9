"""The access log's hash chain on every backend: each tenant's entries link to the one
before, the store keeps the chain's head, and appends from many processes at once keep
one line. An attacker with the database's owner rights drops the append-only triggers and
edits the rows — deletes, alters, inserts, cuts the tail, re-hashes — and
:func:`verify_access_log` names the first bad entry."""

from __future__ import annotations

import dataclasses
import itertools
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from store_backends import Backend

from underway.store import Store
from underway.store.access import entry_hash, genesis, verify_access_log
from underway.store.base import AccessRecord


def entry(n: int, *, tenant: str = "acme", purpose: str = "operations",
          revealed: bool = False) -> AccessRecord:
    return AccessRecord(tenant, 1000.0 + n, f"k{n % 3}", f"name-{n % 3}", f"run-{n}",
                        "GET /v1/runs/{run_id}", purpose=purpose, revealed=revealed)


def fill(store: Store, count: int = 6) -> list[AccessRecord]:
    """``count`` entries of acme, with globex's between them (so acme's seqs have gaps)."""
    stored = []
    for n in range(count):
        stored += store.log_access([entry(n)])
        store.log_access([entry(n, tenant="globex")])
    return stored


class Raw:
    """The access log's table as an attacker with the database's owner rights sees it:
    the triggers dropped, any statement allowed."""

    def __init__(self, backend: Backend, store: Store) -> None:
        self.backend = backend
        self.store = store

    @contextmanager
    def _sql(self) -> Iterator[Any]:
        assert self.backend.url is not None
        if self.backend.name == "sqlite":
            conn = sqlite3.connect(self.backend.url.removeprefix("sqlite:///"),
                                   isolation_level=None)
            try:
                yield conn
            finally:
                conn.close()
        else:
            assert self.backend.direct_url is not None
            base, schema = self.backend.direct_url.split("?schema=")
            with psycopg.connect(base, autocommit=True) as pg:
                pg.execute(f'SET search_path TO "{schema}"')
                yield pg

    def drop_triggers(self) -> None:
        if self.backend.in_memory:
            return
        with self._sql() as c:
            if self.backend.name == "sqlite":
                c.execute("DROP TRIGGER access_log_no_update")
                c.execute("DROP TRIGGER access_log_no_delete")
            else:
                c.execute("DROP TRIGGER access_log_no_change ON access_log")

    def delete(self, seq: int) -> None:
        if self.backend.in_memory:
            for memory in self.backend.memories(self.store):
                log = memory._access_log
                log[:] = [r for r in log if r.seq != seq]
            return
        with self._sql() as c:
            c.execute(f"DELETE FROM access_log WHERE seq = {seq}")

    def update(self, seq: int, **values: Any) -> None:
        if self.backend.in_memory:
            for memory in self.backend.memories(self.store):
                log = memory._access_log
                log[:] = [dataclasses.replace(r, **values) if r.seq == seq else r
                          for r in log]
            return
        marks = "?" if self.backend.name == "sqlite" else "%s"
        sets = ", ".join(f"{k} = {marks}" for k in values)
        with self._sql() as c:
            c.execute(f"UPDATE access_log SET {sets} WHERE seq = {seq}", tuple(values.values()))

    def insert(self, rec: AccessRecord) -> None:
        if self.backend.in_memory:
            log = self.backend.memory_of(self.store, rec.tenant_id)._access_log
            log.append(rec)
            log.sort(key=lambda r: r.seq)
            return
        names = ("seq, tenant_id, at, key_id, key_name, run_id, endpoint, purpose, revealed, "
                 "prev_hash, hash")
        row = (rec.seq, rec.tenant_id, rec.at, rec.key_id, rec.key_name, rec.run_id,
               rec.endpoint, rec.purpose, rec.revealed, rec.prev_hash, rec.hash)
        with self._sql() as c:
            if self.backend.name == "sqlite":
                c.execute(f"INSERT INTO access_log ({names}) VALUES "
                          f"({', '.join('?' * len(row))})", row)
            else:
                c.execute(f"INSERT INTO access_log ({names}) OVERRIDING SYSTEM VALUE VALUES "
                          f"({', '.join(['%s'] * len(row))})", row)
                c.execute("SELECT setval(pg_get_serial_sequence('access_log', 'seq'), "
                          "(SELECT max(seq) FROM access_log))")


@pytest.fixture
def raw(backend: Backend, store: Store) -> Raw:
    return Raw(backend, store)


def test_each_tenants_entries_link_to_the_one_before(store: Store) -> None:
    stored = fill(store, 3)
    assert stored[0].prev_hash == genesis("acme")
    for before, after in itertools.pairwise(stored):
        assert after.prev_hash == before.hash and after.seq > before.seq
    for rec in stored:
        assert rec.hash == entry_hash(rec.prev_hash, rec)
    assert list(reversed(store.list_access("acme"))) == stored
    assert store.access_chain("acme") == stored
    assert store.access_chain("acme", after=stored[0].seq, limit=1) == stored[1:2]
    head = store.access_head("acme")
    assert head is not None and (head.seq, head.hash, head.entries) == (
        stored[-1].seq, stored[-1].hash, 3)
    assert store.access_head("initech") is None
    globex = store.access_chain("globex")
    assert globex[0].prev_hash == genesis("globex") and len(globex) == 3


def test_what_the_caller_says_of_seq_and_hashes_is_ignored(store: Store) -> None:
    forged = dataclasses.replace(entry(1), seq=999_999, prev_hash="x" * 64, hash="y" * 64)
    [stored] = store.log_access([forged])
    assert stored.prev_hash == genesis("acme") and stored.hash != "y" * 64
    assert verify_access_log(store, "acme").ok


def test_purpose_and_revealed_are_kept_and_covered_by_the_hash(store: Store) -> None:
    [rec] = store.log_access([entry(1, purpose="support ticket 42", revealed=True)])
    [found] = store.list_access("acme")
    assert (found.purpose, found.revealed) == ("support ticket 42", True)
    assert entry_hash(rec.prev_hash, dataclasses.replace(found, revealed=False)) != rec.hash


def test_an_untouched_log_verifies(store: Store) -> None:
    fill(store, 5)
    verdict = verify_access_log(store, "acme", page=2)
    assert (verdict.ok, verdict.entries, verdict.legacy, verdict.bad_seq) == (True, 5, 0, None)
    assert verify_access_log(store, "initech").ok


def test_a_deleted_entry_is_named_by_the_entry_after_it(raw: Raw, store: Store) -> None:
    stored = fill(store)
    raw.drop_triggers()
    raw.delete(stored[2].seq)
    verdict = verify_access_log(store, "acme", page=2)
    assert not verdict.ok and verdict.bad_seq == stored[3].seq
    assert f"(seq {stored[1].seq})" in verdict.problem and "deleted" in verdict.problem
    assert verify_access_log(store, "globex").ok


@pytest.mark.parametrize("column", ["run_id", "key_name", "purpose", "at", "revealed"])
def test_an_altered_entry_is_named(raw: Raw, store: Store, column: str) -> None:
    stored = fill(store)
    raw.drop_triggers()
    value = {"run_id": "other-run", "key_name": "someone", "purpose": "marketing",
             "at": 5.0, "revealed": True}[column]
    raw.update(stored[3].seq, **{column: value})
    verdict = verify_access_log(store, "acme")
    assert (verdict.ok, verdict.bad_seq) == (False, stored[3].seq)
    assert "altered" in verdict.problem


def test_an_inserted_entry_is_named(raw: Raw, store: Store) -> None:
    stored = fill(store)
    raw.drop_triggers()
    gap = stored[2].seq + 1  # globex's entry sits there; acme's chain skips it
    raw.delete(gap)
    forged = dataclasses.replace(entry(99), seq=gap, prev_hash=stored[2].hash, hash="f" * 64)
    raw.insert(forged)
    verdict = verify_access_log(store, "acme")
    assert (verdict.ok, verdict.bad_seq) == (False, gap) and "altered" in verdict.problem


def test_an_entry_inserted_with_a_correct_hash_breaks_the_link_after_it(
    raw: Raw, store: Store
) -> None:
    stored = fill(store)
    raw.drop_triggers()
    gap = stored[2].seq + 1
    raw.delete(gap)
    forged = dataclasses.replace(entry(99), seq=gap, prev_hash=stored[2].hash)
    raw.insert(dataclasses.replace(forged, hash=entry_hash(stored[2].hash, forged)))
    verdict = verify_access_log(store, "acme")
    assert (verdict.ok, verdict.bad_seq) == (False, stored[3].seq)
    assert f"(seq {gap})" in verdict.problem


def test_a_cut_tail_is_named_by_the_head(raw: Raw, store: Store) -> None:
    stored = fill(store)
    raw.drop_triggers()
    for rec in stored[-2:]:
        raw.delete(rec.seq)
    verdict = verify_access_log(store, "acme")
    assert (verdict.ok, verdict.bad_seq) == (False, stored[-1].seq)
    assert "at its end were deleted" in verdict.problem


def test_an_entry_appended_behind_the_stores_back_is_named(raw: Raw, store: Store) -> None:
    stored = fill(store)
    raw.drop_triggers()
    last = stored[-1]
    forged = dataclasses.replace(entry(99), seq=last.seq + 1000, prev_hash=last.hash)
    raw.insert(dataclasses.replace(forged, hash=entry_hash(last.hash, forged)))
    verdict = verify_access_log(store, "acme")
    assert (verdict.ok, verdict.bad_seq) == (False, last.seq + 1000)
    assert "beyond the head" in verdict.problem


def test_a_hashless_entry_after_the_chain_began_is_named(raw: Raw, store: Store) -> None:
    stored = fill(store)
    raw.drop_triggers()
    raw.delete(stored[2].seq + 1)
    raw.insert(dataclasses.replace(entry(99), seq=stored[2].seq + 1))
    verdict = verify_access_log(store, "acme")
    assert (verdict.ok, verdict.bad_seq) == (False, stored[2].seq + 1)
    assert "no hash" in verdict.problem


def test_entries_from_before_the_chain_are_counted_apart(raw: Raw, store: Store) -> None:
    raw.drop_triggers()
    raw.insert(dataclasses.replace(entry(0), seq=1))  # as migration 0012 left old entries
    raw.insert(dataclasses.replace(entry(1), seq=2))
    fill(store, 2)
    verdict = verify_access_log(store, "acme")
    assert (verdict.ok, verdict.entries, verdict.legacy) == (True, 2, 2)


APPENDER = textwrap.dedent("""
    import sys
    from underway.store import connect
    from underway.store.base import AccessRecord

    url, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = connect(url, migrate=False)
    print("ready", flush=True)
    sys.stdin.readline()
    for n in range(rounds):
        batch = [AccessRecord(tenant, float(n), name, name, f"run-{n}", "cli runs show")
                 for tenant in (("acme",) if n % 3 else ("acme", "globex", "acme"))]
        store.log_access(batch)
    store.close()
""")


def test_appends_from_several_processes_at_once_keep_one_chain(backend: Backend,
                                                               store: Store) -> None:
    if backend.url is None:
        pytest.skip("the memory store lives in one process")
    procs, rounds = 4, 40
    workers = [subprocess.Popen([sys.executable, "-c", APPENDER, backend.url, f"p{i}",
                                 str(rounds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True) for i in range(procs)]
    for w in workers:
        assert w.stdout is not None and w.stdout.readline().strip() == "ready"
    for w in workers:  # all at once
        assert w.stdin is not None
        w.stdin.write("go\n")
        w.stdin.flush()
    for w in workers:
        assert w.wait(timeout=300) == 0
        for pipe in (w.stdin, w.stdout):
            assert pipe is not None
            pipe.close()
    per_process = sum(2 if n % 3 == 0 else 1 for n in range(rounds))
    acme, globex = verify_access_log(store, "acme"), verify_access_log(store, "globex")
    assert acme.ok and globex.ok, (acme, globex)
    assert acme.entries == procs * per_process
    assert globex.entries == procs * (rounds + 2) // 3
    chain = store.access_chain("acme", limit=10_000)
    assert len({r.prev_hash for r in chain}) == len(chain)  # no fork: each hash used once
