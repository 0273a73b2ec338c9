"""Invariant: key rotation is live. A process that was running before a rotation made by
another process — a real ``underway worker``, and this test's own process with its store
and client — goes on finishing and reading runs after ``underway keys rotate --new-kek``,
without a restart, on SQLite and PostgreSQL.

What such a process meets after the rotation: the tenant's new active data key, wrapped by
a KEK it has never read; data keys made since by other processes (a new tenant's, a new
data subject's), wrapped by that KEK; its own keys re-wrapped under it; the rotation run
itself, which a worker may carry on. Each must open (the provider reads the keyring again
when a data key does not unwrap), and what the process wraps from then on is wrapped by
the new KEK.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import underway as uw
from underway.codec import box_of, is_sealed
from underway.crypto import ROTATION_FLOW, EnvKey, KeyringFile, encrypt, new_kek
from underway.crypto._box import box_key_id
from underway.crypto.datakeys import DataKeys
from underway.errors import KeyUnavailable
from underway.store import Store, connect

pytestmark = pytest.mark.timeout(600)

UNDERWAY = Path(sys.executable).with_name("underway")
APP_DIR = Path(__file__).resolve().parents[1] / "integration"
"""Where ``worker_app`` lives (a job: two tool calls, then done with the worker's pid)."""
PATIENCE_S = 120.0
"""A guard against hangs, never reached when things work, even on a busy machine."""
TENANT = "acme"


def wait_until(done: Callable[[], bool], what: str) -> None:
    """Poll ``done`` until it holds; fail naming ``what`` after :data:`PATIENCE_S`."""
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {PATIENCE_S:g}s waiting for {what}")
        time.sleep(0.02)


class Worker:
    """A real ``underway worker`` process; its output is collected as it comes."""

    def __init__(self, url: str, keyring: Path) -> None:
        self.proc = subprocess.Popen(
            [str(UNDERWAY), "worker", "--db", url, "--keyring", str(keyring),
             "--app", "worker_app:app", "--poll", "0.05"],
            cwd=APP_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def expect(self, word: str) -> None:
        """Wait for a line of output holding ``word``."""
        deadline = time.monotonic() + PATIENCE_S
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"the worker printed no {word!r}: {self.output()}")
            self.seen.append(line)
            if word in line:
                return

    def output(self) -> str:
        """Everything the worker printed so far."""
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "\n".join(self.seen)

    def stop(self) -> None:
        """SIGTERM it and wait for a clean exit."""
        self.proc.terminate()
        self.proc.wait(timeout=PATIENCE_S)
        self._reader.join(timeout=5)
        assert self.proc.returncode == 0, self.output()

    def close(self) -> None:
        """Kill it if it still runs; release its pipe."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def worker() -> Iterator[Callable[[str, Path], Worker]]:
    started: list[Worker] = []

    def start(url: str, keyring: Path) -> Worker:
        w = Worker(url, keyring)
        started.append(w)
        w.expect("ready")
        return w

    yield start
    for w in started:
        w.close()


def cli(*args: str) -> str:
    """Run an ``underway`` command in a process of its own; its output (it must succeed)."""
    done = subprocess.run([str(UNDERWAY), *args], capture_output=True, text=True,
                          timeout=PATIENCE_S, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def start_by_cli(url: str, keyring: Path, n: int, *, tenant: str = TENANT,
                 subject: str | None = None) -> str:
    """A job started by ``underway runs start`` (a process that reads the keyring now)."""
    about = ("--subject", subject) if subject else ()
    out = cli("--keyring", str(keyring), "--db", url, "runs", "start", "job",
              "--input", json.dumps({"n": n}), "--tenant", tenant, *about, "--json")
    return str(json.loads(out)["run_id"])


def finished(store: Store, runs: dict[str, str]) -> Callable[[], bool]:
    def done() -> bool:
        rows = [store.get_run(t, r) for r, t in runs.items()]
        bad = [r for r in rows if r is not None and r.status in ("failed", "dead")]
        assert not bad, [(r.run_id, r.status, r.error) for r in bad]
        return all(r is not None and r.status == "completed" for r in rows)
    return done


def test_a_running_worker_and_client_follow_kek_and_data_key_rotations(
    db_url: str, tmp_path: Path, worker: Callable[[str, Path], Worker]
) -> None:
    keyring = tmp_path / "underway.keyring"
    first_kek = KeyringFile.create(keyring).kek_id
    store = connect(db_url)
    encrypt(store, KeyringFile(keyring))  # this process: started before every rotation
    client = uw.Client(store)
    w = worker(db_url, keyring)
    pid = w.proc.pid

    before, _ = client.start("job", {"n": 1}, tenant_id=TENANT)
    wait_until(finished(store, {before: TENANT}), "the run started before the rotation")
    [old] = store.list_data_keys(TENANT)
    assert old.kek_id == first_kek

    # 1. A new KEK and a new data key, from another process, while both processes run.
    out = cli("--keyring", str(keyring), "--db", db_url, "keys", "rotate", "--tenant",
              TENANT, "--by", "ops", "--new-kek")
    assert "completed" in out, out
    second_kek = KeyringFile(keyring).kek_id
    new = store.active_data_key(TENANT)
    assert new is not None and new.key_id != old.key_id and new.kek_id == second_kek
    assert {k.kek_id for k in store.list_data_keys(TENANT)} == {second_kek}

    # Runs started by other processes after it: under the new data key, a new tenant's
    # key and a new subject's key, all wrapped by the KEK the worker never read.
    after = {start_by_cli(db_url, keyring, 2): TENANT,
             start_by_cli(db_url, keyring, 3, subject="cust-1"): TENANT,
             start_by_cli(db_url, keyring, 4, tenant="globex"): "globex"}
    # And by this process, whose keyring was read before the rotation.
    mine, _ = client.start("job", {"n": 5}, tenant_id=TENANT, subject="cust-9")
    after[mine] = TENANT
    wait_until(finished(store, after), "the worker to finish the runs started after it")
    for run_id, tenant in after.items():
        result = client.state(run_id, tenant_id=tenant).result
        assert isinstance(result, dict) and set(result["pids"]) == {pid}, result
    # What this process wrapped after the rotation is wrapped by the new KEK.
    [nine] = [k for k in store.list_data_keys(TENANT) if k.scope == "subject:cust-9"]
    assert nine.kek_id == second_kek
    # The run started before: its events, under the retired key, still open.
    assert client.state(before, tenant_id=TENANT).result["pids"] == [pid, pid]

    # 2. A KEK rotation only, again from another process: every key re-wrapped.
    cli("--keyring", str(keyring), "--db", db_url, "keys", "rotate", "--tenant", TENANT,
        "--by", "ops", "--new-kek", "--kek-only")
    third_kek = KeyringFile(keyring).kek_id
    assert {k.kek_id for k in store.list_data_keys(TENANT)} == {third_kek}
    more = {start_by_cli(db_url, keyring, 6): TENANT,
            start_by_cli(db_url, keyring, 7, subject="cust-2"): TENANT}
    wait_until(finished(store, more), "the worker to finish the runs after the second")
    fresh = connect(db_url)
    try:
        encrypt(fresh, KeyringFile(keyring))
        for run_id, tenant in {**after, **more, before: TENANT}.items():
            assert uw.Client(fresh).verify(run_id, tenant_id=tenant).ok
    finally:
        fresh.close()

    w.stop()
    assert "KeyUnavailable" not in w.output() and "does not hold" not in w.output()
    [rotation] = store.list_runs(TENANT, flow=ROTATION_FLOW)
    assert rotation.status == "completed"
    store.close()


def test_a_rotation_a_worker_carries_on_seals_under_the_new_key(
    db_url: str, tmp_path: Path, worker: Callable[[str, Path], Worker]
) -> None:
    """`keys rotate --no-wait` leaves the re-sealing to the workers: one that has known
    the retired key as active for a while seals under the new key, not the old one."""
    keyring = tmp_path / "underway.keyring"
    KeyringFile.create(keyring)
    store = connect(db_url)
    encrypt(store, KeyringFile(keyring))
    w = worker(db_url, keyring)
    # Large inputs are kept as blobs: what the rotation must seal again.
    runs = {uw.Client(store).start("job", {"n": i, "pad": f"{i}" * 5000},
                                   tenant_id=TENANT)[0]: TENANT for i in range(3)}
    wait_until(finished(store, runs), "the runs before the rotation")
    [old] = store.list_data_keys(TENANT)
    blobs = store.sealed_rows(TENANT, "blob", after=(), limit=100_000)
    assert blobs and {box_key_id(box_of(r.data)) for r in blobs} == {old.key_id}
    cli("--keyring", str(keyring), "--db", db_url, "keys", "rotate", "--tenant", TENANT,
        "--by", "ops", "--new-kek", "--no-wait")
    [rotation] = store.list_runs(TENANT, flow=ROTATION_FLOW)
    wait_until(finished(store, {rotation.run_id: TENANT}), "a worker to finish the rotation")
    new = store.active_data_key(TENANT)
    assert new is not None
    rows = [r for kind in ("blob", "signal", "schedule")
            for r in store.sealed_rows(TENANT, kind, after=(), limit=100_000)]
    keys = {box_key_id(box_of(r.data)) for r in rows if is_sealed(r.data)}
    assert keys <= {new.key_id}, keys
    w.stop()
    assert "KeyUnavailable" not in w.output()
    store.close()


def test_data_keys_read_the_keyring_again_once_when_a_key_does_not_unwrap(
    db_url: str, tmp_path: Path
) -> None:
    """The one place: a data key wrapped by a KEK the provider has not read yet opens
    after the provider reads the keyring again; one wrapped by a KEK nowhere still fails,
    saying which KEK it needs."""
    keyring = tmp_path / "underway.keyring"
    KeyringFile.create(keyring)
    store = connect(db_url)
    try:
        stale = DataKeys(store, KeyringFile(keyring))
        rotator = DataKeys(store, KeyringFile(keyring))
        assert isinstance(rotator.provider, KeyringFile)
        added = rotator.provider.add_kek()
        made = rotator.active(TENANT)
        assert store.get_data_key(TENANT, made.key_id).kek_id == added  # type: ignore[union-attr]
        assert stale.get(TENANT, made.key_id).key_id == made.key_id
        assert stale.provider.kek_id == added
        # A KEK in no keyring: still unavailable, named.
        other = tmp_path / "other.keyring"
        KeyringFile.create(other)
        foreign = DataKeys(store, KeyringFile(other)).active("initech")
        with pytest.raises(KeyUnavailable, match="does not hold"):
            stale.get("initech", foreign.key_id)
    finally:
        store.close()


def test_an_environment_kek_is_read_again_when_this_process_changes_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An environment variable cannot be changed from outside a process; one changed
    inside it (a configuration reload) is read again the same way."""
    monkeypatch.setenv("UW_TEST_KEK", base64.b64encode(new_kek()).decode())
    store = connect(f"sqlite:///{tmp_path}/env.db")
    try:
        keys = DataKeys(store, EnvKey("UW_TEST_KEK", previous=["UW_TEST_OLD"]))
        before = keys.active(TENANT)
        old = keys.provider.kek_id
        monkeypatch.setenv("UW_TEST_OLD", os.environ["UW_TEST_KEK"])
        monkeypatch.setenv("UW_TEST_KEK", base64.b64encode(new_kek()).decode())
        assert keys.rewrap(TENANT) == 1
        assert keys.provider.kek_id != old
        fresh = DataKeys(store, EnvKey("UW_TEST_KEK"))
        assert fresh.get(TENANT, before.key_id).key_id == before.key_id
    finally:
        store.close()
