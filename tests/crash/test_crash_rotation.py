"""A data-key rotation killed by SIGKILL mid-way resumes and finishes, on SQLite and
PostgreSQL: the real ``underway keys rotate`` is killed once at a fault point (a batch of
blobs sealed again and stored, its outcome not yet journaled) and once from outside while it
works; run again, it resumes the same rotation run and finishes it. Then every blob is
sealed under the new key, none is lost, every run's payloads open in a fresh process, and
the journals verify (with and without keys)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway.codec import box_of, is_sealed
from underway.crypto import ROTATION_FLOW, KeyringFile, encrypt
from underway.crypto._box import box_key_id
from underway.store import Store, connect

pytestmark = [pytest.mark.crash, pytest.mark.timeout(900)]

TENANT = "acme"
RUNS = 4
MESSAGES = 200
"""Each run's conversation: a blob per message and per chain node, some 1,600 blobs in all,
so the rotation takes several batches."""
BACKEND_PARAMS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


class Chat(BaseModel):
    messages: list[str] = []


chat = uw.Flow("chat", state=Chat, signals=["more"])


@chat.step(start=True)
async def talk(ctx: uw.RunContext[Chat, Any]) -> Any:
    for i in range(MESSAGES):
        ctx.state.messages.append(f"{ctx.run_id} message {i} " + "x" * 1100)
    return ctx.wait("more", then=talk)


def underway_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    script = Path(sys.executable).with_name("underway")
    base = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    return subprocess.Popen([str(script), *args], env={**base, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen[bytes], timeout: float = 300) -> tuple[int, str]:
    """Wait for ``proc``: its exit status and its output."""
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(errors="replace")


def sealed_by(store: Store) -> dict[str, str | None]:
    """Each blob's address and the data key it is sealed with."""
    rows = store.sealed_rows(TENANT, "blob", after=(), limit=1_000_000)
    return {r.position[0]: box_key_id(box_of(r.data)) if is_sealed(r.data) else None
            for r in rows}


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_a_rotation_killed_twice_resumes_and_finishes(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    keyring = tmp_path / "keyring.json"
    KeyringFile.create(keyring)
    store = connect(url)
    encrypt(store, KeyringFile(keyring))
    engine = uw.Engine(store, flows=[chat])
    runs = [engine.start(chat, tenant_id=TENANT)[0] for _ in range(RUNS)]
    asyncio.run(uw.Runner(engine).run_until_idle())
    [old] = store.list_data_keys(TENANT)
    before = sealed_by(store)
    assert len(before) > 1000 and set(before.values()) == {old.key_id}
    rotate = ("--keyring", str(keyring), "--db", url, "keys", "rotate", "--tenant", TENANT,
              "--by", "ops")

    # 1. Killed at a fault point: its third batch is stored, its outcome not journaled.
    first = underway_cli(*rotate, env={"UNDERWAY_CRASH_AFTER": "3",
                                       "UNDERWAY_CRASH_POINTS": "reseal.after_batch"})
    code, out = finish(first)
    assert code == -signal.SIGKILL, out
    new = store.active_data_key(TENANT)
    assert new is not None and new.key_id != old.key_id
    done = sum(1 for k in sealed_by(store).values() if k == new.key_id)
    assert 0 < done < len(before)
    [rotation] = store.list_runs(TENANT, flow=ROTATION_FLOW)
    assert rotation.status not in ("completed", "failed")

    # 2. Resumed, then killed from outside as soon as it says it resumes (mid-way still:
    # the first process left batches to do).
    second = underway_cli(*rotate)
    assert second.stdout is not None
    said = []
    while not any("resuming rotation" in line for line in said):
        line = second.stdout.readline().decode()
        assert line, "".join(said)
        said.append(line)
    second.send_signal(signal.SIGKILL)
    code, out = finish(second)
    assert code == -signal.SIGKILL, "".join(said) + out
    assert f"resuming rotation {rotation.run_id}" in "".join(said)

    # 3. Run again: it finishes the same rotation.
    code, out = finish(underway_cli(*rotate))
    assert code == 0 and f"rotation {rotation.run_id} completed" in out, out
    assert [r.run_id for r in store.list_runs(TENANT, flow=ROTATION_FLOW)] == [rotation.run_id]
    assert store.active_data_key(TENANT) == new
    after = sealed_by(store)
    assert set(after) >= set(before)  # no blob lost
    assert set(after.values()) == {new.key_id}

    # Every payload opens in a fresh process with the keyring; the journals verify.
    fresh = connect(url)
    encrypt(fresh, KeyringFile(keyring))
    client = uw.Client(fresh)
    for run in runs:
        state = client.state(run, tenant_id=TENANT)
        assert state.state["messages"] == [f"{run} message {i} " + "x" * 1100
                                           for i in range(MESSAGES)]
        assert client.verify(run, tenant_id=TENANT).ok
    assert client.verify(rotation.run_id, tenant_id=TENANT).ok
    code, out = finish(underway_cli("--db", url, "audit", "verify", "--all"))
    assert code == 0, out
    fresh.close()
    store.close()
