"""Key rotation through the real CLI: a KEK rotation re-wraps every data key (cheap; every
payload still opens); a data-key rotation makes a new key active at once and seals blobs,
checkpoints, waiting signals and schedules' input again under it as a journaled rotation
run, while journal events stay under the key that sealed them (the chain covers their
bytes); what was stored before encryption was turned on is sealed by the same sweep."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway.cli import app
from underway.codec import box_of, is_sealed, split_event
from underway.crypto import ROTATION_FLOW, KeyringFile, encrypt
from underway.crypto._box import box_key_id
from underway.scheduling.schedules import add_schedule, list_schedules
from underway.store import Store, connect
from underway.store.records import SEALED_KINDS

TENANT = "acme"


class Chat(BaseModel):
    messages: list[str] = []


class Who(BaseModel):
    who: str = ""


chat = uw.Flow("chat", state=Chat, input=Who, signals=["more"])


@chat.step(start=True)
async def talk(ctx: uw.RunContext[Chat, Who]) -> Any:
    for i in range(30):
        ctx.state.messages.append(f"message {len(ctx.state.messages)} {i} " + "x" * 1200)
    return ctx.wait("more", then=talk)


def cli(*args: str) -> Any:
    done = CliRunner().invoke(app, list(args))
    return done


def world(url: str, keyring: Path | None) -> tuple[Store, uw.Engine, list[str]]:
    """Two waiting runs with long conversations (blobs), their checkpoints, a signal
    waiting in an inbox, a schedule."""
    store = connect(url)
    if keyring is not None:
        encrypt(store, KeyringFile(keyring))
    engine = uw.Engine(store, flows=[chat])
    runs = [engine.start(chat, tenant_id=TENANT)[0] for _ in range(2)]
    asyncio.run(uw.Runner(engine).run_until_idle())
    engine.signal(runs[0], "more", {"n": 1}, tenant_id=TENANT)
    add_schedule(engine, "nightly", "chat", "0 2 * * *", {"who": "x"}, tenant_id=TENANT)
    return store, engine, runs


def key_ids(store: Store, kind: str) -> list[str | None]:
    """The data key each stored row of ``kind`` is sealed with (None: plaintext)."""
    rows = store.sealed_rows(TENANT, kind, after=(), limit=100_000)
    return [box_key_id(box_of(r.data)) if is_sealed(r.data) else None for r in rows]


def event_key_ids(store: Store, run_id: str) -> set[str | None]:
    out: set[str | None] = set()
    for e in store.load_events(TENANT, run_id):
        box = split_event(e.payload)[1]
        out.add(None if box is None else box_key_id(box))
    return out


def test_a_kek_rotation_rewraps_every_data_key_and_opens_everything(tmp_path: Path) -> None:
    keyring = tmp_path / "keyring.json"
    old = KeyringFile.create(keyring).kek_id
    url = f"sqlite:///{tmp_path / 'u.db'}"
    store, _, runs = world(url, keyring)
    done = cli("--db", url, "keys", "rotate", "--tenant", TENANT, "--by", "ops", "--kek-only",
               "--new-kek", "--keyring", str(keyring))
    assert done.exit_code == 0, done.output
    new = KeyringFile(keyring).kek_id
    assert new != old and f"1 data keys of tenant '{TENANT}' re-wrapped under {new}" in \
        done.output
    assert {k.kek_id for k in store.list_data_keys(TENANT)} == {new}
    # Nothing else changed: a fresh process with the keyring opens every payload.
    fresh = connect(url)
    encrypt(fresh, KeyringFile(keyring))
    assert len(uw.Client(fresh).state(runs[0], tenant_id=TENANT).state["messages"]) == 30
    assert not uw.Client(fresh).list_runs(tenant_id=TENANT, flow=ROTATION_FLOW).runs


@pytest.mark.parametrize("encrypted_before", [True, False])
def test_a_data_key_rotation_seals_every_mutable_payload_again(
    tmp_path: Path, encrypted_before: bool
) -> None:
    keyring = tmp_path / "keyring.json"
    KeyringFile.create(keyring)
    url = f"sqlite:///{tmp_path / 'u.db'}"
    store, _, runs = world(url, keyring if encrypted_before else None)
    before = {kind: key_ids(store, kind) for kind in SEALED_KINDS}
    assert all(before.values())
    done = cli("--keyring", str(keyring), "--db", url, "keys", "rotate", "--tenant", TENANT,
               "--by", "ops")
    assert done.exit_code == 0, done.output
    assert "rotation" in done.output and "completed" in done.output
    keys = store.list_data_keys(TENANT)
    active = next(k.key_id for k in keys if k.state == "active")
    assert [k.state for k in keys] == (["retired", "active"] if encrypted_before
                                       else ["active"])
    for kind in SEALED_KINDS:
        after = key_ids(store, kind)
        assert after and set(after) == {active}, kind
        assert len(after) >= len(before[kind])  # nothing lost
    # Journal events keep the key that sealed them, or stay as they were written.
    assert event_key_ids(store, runs[0]) == ({keys[0].key_id} if encrypted_before else {None})
    # Everything still opens, in a fresh process with the keyring; the audit agrees.
    fresh = connect(url)
    encrypt(fresh, KeyringFile(keyring))
    client = uw.Client(fresh)
    for run in runs:
        assert len(client.state(run, tenant_id=TENANT).state["messages"]) == 30
    assert list_schedules(client, tenant_id=TENANT)[0].input == {"who": "x"}
    assert [s.signal_id for s in fresh.pending_signals(TENANT, runs[0])]
    assert cli("--db", url, "audit", "verify", "--all").exit_code == 0
    # The rotation is a run, journaled: `keys ls` shows it, `runs show` its steps.
    listed = cli("--db", url, "keys", "ls", "--tenant", TENANT, "--json")
    rotations = json.loads(listed.output)["rotations"]
    assert [r["status"] for r in rotations] == ["completed"]
    shown = cli("--keyring", str(keyring), "--db", url, "runs", "show",
                rotations[0]["run_id"], "--tenant", TENANT)
    assert "underway.keys.reseal" in shown.output
    # New writes use the new key: the events of the step the waiting signal wakes.
    asyncio.run(uw.Runner(uw.Engine(fresh, flows=[chat])).run_until_idle())
    assert active in event_key_ids(fresh, runs[0])
