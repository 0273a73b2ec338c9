"""Encryption at rest attacked path by path on a real SQLite file: a ciphertext moved to
another seq, run, blob address, signal or checkpoint fails to open there (reported, never
read as the wrong data); the hash chain verifies without keys and after a key is destroyed;
a reader without keys — the CLI, the HTTP API, the console — shows ``[encrypted]`` and
never crashes, and refuses to write plaintext; a worker without keys will not start."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from fakes.console_browser import sign_in
from fakes.service_world import World
from underway.cli import app
from underway.codec import split_event
from underway.crypto import Envelope, KeyringFile, encrypt, refuse_plaintext
from underway.errors import IntegrityError, KeyUnavailable
from underway.events import genesis_hash, link_hash
from underway.guard.policy import policy_from_dict
from underway.store import Store, connect

SECRET = "2345 6789 0123"


class Notes(BaseModel):
    seen: list[str] = []


notes = uw.Flow("notes", state=Notes, signals=["more"])


@uw.tool(mutating=False)
async def read_file(args: dict[str, Any]) -> dict[str, Any]:
    """A large answer: stored as a blob."""
    return {"text": f"customer {SECRET} " * 200}


@notes.step(start=True)
async def first(ctx: uw.RunContext[Notes, Any]) -> Any:
    got = await ctx.call(read_file, {"who": SECRET})
    ctx.state.seen.append(got["text"][:40])
    return ctx.wait("more", then=first)


@pytest.fixture
def keyring(tmp_path: Path) -> Path:
    path = tmp_path / "keyring.json"
    KeyringFile.create(path)
    return path


def sealed_store(url: str, keyring: Path) -> Store:
    store = connect(url)
    encrypt(store, KeyringFile(keyring))
    return store


def one_run(store: Store, *, signal: bool = True,
            tenant: str = "acme") -> tuple[uw.Engine, str]:
    engine = uw.Engine(store, flows=[notes])
    run_id, _ = engine.start(notes, tenant_id=tenant)
    asyncio.run(uw.Runner(engine).run_until_idle())
    if signal:
        engine.signal(run_id, "more", {"id": SECRET}, tenant_id=tenant)
        asyncio.run(uw.Runner(engine).run_until_idle())
    return engine, run_id


def sql(path: Path, query: str, *args: Any) -> list[Any]:
    with sqlite3.connect(path) as conn:
        return conn.execute(query, args).fetchall()


def rehash(path: Path, tenant: str, run_id: str) -> None:
    """Recompute the run's chain (and row head) as an insider who can write the database
    would: the chain alone then vouches for whatever the rows hold."""
    prev = genesis_hash(tenant, run_id)
    rows = sql(path, "SELECT seq, type, payload FROM events WHERE tenant_id = ? AND "
               "run_id = ? ORDER BY seq", tenant, run_id)
    for seq, kind, payload in rows:
        prev = link_hash(prev, seq, kind, bytes(payload))
        sql(path, "UPDATE events SET hash = ? WHERE tenant_id = ? AND run_id = ? AND seq = ?",
            bytes.fromhex(prev), tenant, run_id, seq)
    sql(path, "UPDATE runs SET last_hash = (SELECT lower(hex(hash)) FROM events e WHERE "
        "e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id AND e.seq = runs.last_seq) "
        "WHERE tenant_id = ? AND run_id = ?", tenant, run_id)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


# -- ciphertexts moved elsewhere -------------------------------------------------------------
def test_an_event_payload_copied_to_another_seq_or_run_does_not_open_there(
    tmp_path: Path, keyring: Path
) -> None:
    path = tmp_path / "u.db"
    store = sealed_store(f"sqlite:///{path}", keyring)
    engine, a = one_run(store)
    _, b = one_run(store)
    # Run a's ToolSucceeded (its seal holds the tool's answer) is put, type and all, at the
    # same seq of run b and at seq 2 of run a, and both chains are re-hashed: only the
    # seal can tell now.
    seq, payload = sql(path, "SELECT seq, payload FROM events WHERE run_id = ? AND "
                       "type = 'ToolSucceeded' ORDER BY seq", a)[0]
    sql(path, "UPDATE events SET payload = ?, type = 'ToolSucceeded' WHERE run_id = ? AND "
        "seq = ?", payload, b, seq)
    # Within the run, at seq 2: the readable envelope names no seq or type (the row's are
    # hashed with it), so the re-hashed chain takes it there.
    header, _ = split_event(payload)
    assert "seq" not in header and "type" not in header
    sql(path, "UPDATE events SET payload = ?, type = 'ToolSucceeded' WHERE run_id = ? "
        "AND seq = 2", payload, a)
    for run in (a, b):
        rehash(path, "acme", run)
    fresh = sealed_store(f"sqlite:///{path}", keyring)
    client = uw.Client(fresh)
    for run, at in ((b, seq), (a, 2)):
        with pytest.raises(IntegrityError, match="does not open under data key"):
            client.history(run, tenant_id="acme")
        with pytest.raises(IntegrityError, match="does not open"):
            client.events(run, tenant_id="acme")
        report = client.verify(run, tenant_id="acme")
        assert (report.ok, report.bad_seq) == (False, at)
        assert "does not open under its key" in report.reason
    # The audit with the keys catches what the re-hashed chain hides; without them the
    # chain alone cannot (that is what anchors outside the database are for).
    url = f"sqlite:///{path}"
    assert cli("audit", "verify", "--all", "--db", url).exit_code == 0
    found = cli("--keyring", str(keyring), "audit", "verify", "--all", "--db", url)
    assert found.exit_code == 1 and "does not open under its key" in found.stdout
    engine.store.close()


def test_a_blob_moved_to_another_address_or_a_signal_to_another_id_is_refused(
    tmp_path: Path, keyring: Path
) -> None:
    path = tmp_path / "u.db"
    url = f"sqlite:///{path}"
    store = sealed_store(url, keyring)
    engine, run = one_run(store, signal=False)
    # A signal sealed under a key destroyed since (the tenant's keys rotated, the new one
    # destroyed): consumed, and why journaled, never a poison loop.
    envelope = store.codec.sealer
    assert isinstance(envelope, Envelope)
    doomed = envelope.keys.rotate("acme")
    engine.signal(run, "more", {"n": 0}, tenant_id="acme", signal_id="s0")
    store.destroy_data_key("acme", doomed.key_id)
    envelope.keys.forget()
    asyncio.run(uw.Runner(engine).run_until_idle())
    history = [r.event for r in engine.journal.history("acme", run)]
    ignored = [e for e in history if isinstance(e, uw.events.SignalIgnored)]
    assert [e.signal_id for e in ignored] == ["s0"] and "destroyed" in ignored[0].reason
    # Two signals wait; the second's sealed payload is copied over the first's: the
    # activation refuses to act on it (and, failing, the run backs off and stops dead).
    engine.signal(run, "more", {"n": 1}, tenant_id="acme", signal_id="s1")
    engine.signal(run, "more", {"n": 2}, tenant_id="acme", signal_id="s2")
    second = sql(path, "SELECT payload FROM signals WHERE signal_id = 's2'")[0][0]
    sql(path, "UPDATE signals SET payload = ? WHERE signal_id = 's1'", second)
    with pytest.raises(IntegrityError, match="does not open under data key"):
        asyncio.run(uw.Runner(engine).run_until_idle())
    received = [r.event for r in engine.journal.history("acme", run)
                if isinstance(r.event, uw.events.SignalReceived)]
    assert received == []
    # A blob's bytes put at another blob's address: the read fails, naming the blob.
    # The same content in another tenant: sealed under its key, at its own address. Its
    # bytes put at this tenant's address do not open there.
    one_run(store, signal=False, tenant="globex")
    [(other,), *_] = sql(path, "SELECT data FROM blobs WHERE tenant_id = 'globex'")
    sql(path, "UPDATE blobs SET data = ? WHERE tenant_id = 'acme'", other)
    fresh = sealed_store(url, keyring)
    with pytest.raises(IntegrityError, match="copied here from another tenant"):
        uw.Client(fresh).history(run, tenant_id="acme")
    assert not uw.Client(fresh).verify(run, tenant_id="acme").ok


def test_a_checkpoint_copied_from_another_run_is_not_trusted(
    tmp_path: Path, keyring: Path
) -> None:
    path = tmp_path / "u.db"
    url = f"sqlite:///{path}"
    store = sealed_store(url, keyring)
    _, a = one_run(store)
    _, b = one_run(store)
    seq_a, state_a = sql(path, "SELECT seq, state FROM checkpoints WHERE run_id = ?", a)[0]
    sql(path, "UPDATE checkpoints SET seq = ?, state = ? WHERE run_id = ?", seq_a, state_a, b)
    fresh = uw.Client(sealed_store(url, keyring))
    # Folded from b's own journal instead, and the audit names the forged row.
    assert fresh.state(b, tenant_id="acme").run_id == b
    assert not fresh.verify(b, tenant_id="acme").ok


# -- the chain without keys -------------------------------------------------------------------
def test_audit_verify_needs_no_keys_and_survives_their_destruction(
    tmp_path: Path, keyring: Path
) -> None:
    path = tmp_path / "u.db"
    url = f"sqlite:///{path}"
    store = sealed_store(url, keyring)
    _, run = one_run(store)
    for keys in ([], ["--keyring", str(keyring)]):
        done = cli(*keys, "audit", "verify", "--all", "--db", url)
        assert done.exit_code == 0 and "every hash chain is intact" in done.stdout, \
            done.stdout + done.stderr
    # Destroy the tenant's data key: nothing of the run can be opened again, by anyone.
    [key] = store.list_data_keys("acme")
    assert store.destroy_data_key("acme", key.key_id)
    gone = sealed_store(url, keyring)
    with pytest.raises(KeyUnavailable, match="destroyed"):
        uw.Client(gone).state(run, tenant_id="acme")
    for keys in ([], ["--keyring", str(keyring)]):
        done = cli(*keys, "audit", "verify", "--all", "--db", url)
        assert done.exit_code == 0 and "every hash chain is intact" in done.stdout, \
            done.stdout + done.stderr
        shown = cli(*keys, "runs", "show", run, "--tenant", "acme", "--db", url)
        assert shown.exit_code == 0 and "[encrypted]" in shown.stdout
    # An edit is still caught without any key.
    sql(path, "UPDATE events SET payload = CAST(? AS BLOB) WHERE run_id = ? AND seq = 2",
        b'{"edited":true}', run)
    done = cli("audit", "verify", "--all", "--db", url)
    assert done.exit_code == 1 and "seq 2" in done.stdout


# -- readers and writers without keys ----------------------------------------------------------
def test_the_cli_without_keys_shows_encrypted_and_refuses_plaintext(
    tmp_path: Path, keyring: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    store = sealed_store(url, keyring)
    _, run = one_run(store)
    with_key = cli("--keyring", str(keyring), "runs", "show", run, "--tenant", "acme",
                   "--db", url)
    assert with_key.exit_code == 0 and SECRET in with_key.stdout
    for args in (["runs", "show", run], ["runs", "events", run], ["runs", "events", run,
                                                                   "--json"],
                 ["usage"], ["approvals", "ls"], ["runs", "ls"]):
        done = cli(*args, "--tenant", "acme", "--db", url)
        assert done.exit_code == 0, (args, done.stdout)
        assert SECRET not in done.stdout
    shown = cli("runs", "show", run, "--tenant", "acme", "--events", "--db", url).stdout
    assert "payloads [encrypted]" in shown and "ToolSucceeded   [encrypted]" in shown
    assert "not counted: 1 runs" in cli("usage", "--tenant", "acme", "--db", url).stdout
    refused = cli("runs", "signal", run, "more", "--payload", '{"id": 1}', "--tenant", "acme",
                  "--db", url)
    assert refused.exit_code == 2
    assert "in plaintext on a database whose payloads are encrypted" in refused.stderr
    assert len(store.pending_signals("acme", run)) == 0


def test_a_worker_without_keys_will_not_start_on_an_encrypted_database(
    tmp_path: Path, keyring: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    one_run(sealed_store(url, keyring))
    (tmp_path / "app.py").write_text(
        "import underway as uw\nfrom pydantic import BaseModel\n\n\nclass S(BaseModel):\n"
        "    pass\n\n\nflow = uw.Flow('noop', state=S)\n")
    done = subprocess.run(
        [str(Path(sys.executable).with_name("underway")), "worker", "--app", "app:flow",
         "--db", url],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stderr
    assert "holds encrypted payloads" in done.stderr and "--keyring" in done.stderr


def test_the_api_and_console_without_keys_show_encrypted(sqlite_url: str,
                                                         keyring: Path) -> None:
    world = World(sqlite_url)
    try:
        encrypt(world.worker_store, KeyringFile(keyring))
        run, _ = world.engine.start("reminders", {"invoice": SECRET, "amount": 5},
                                    tenant_id="acme")
        world.drive()
        assert refuse_plaintext(world.store, "give the server keys")
        r = world.call("GET", f"/v1/runs/{run}", role="viewer")
        assert r.status_code == 200 and r.json()["status"] == "waiting"
        r = world.call("GET", f"/v1/runs/{run}/events", role="viewer")
        assert r.status_code == 200
        assert {e["type"] for e in r.json()} >= {"RunStarted", "SignalAwaited"}
        assert all(e["data"] == {"payload": "[encrypted]"} for e in r.json())
        assert SECRET not in r.text
        r = world.call("POST", "/v1/runs", role="operator",
                       json={"flow": "reminders", "input": {"invoice": "x", "amount": 1}})
        assert r.status_code == 503 and r.json()["type"].endswith("keys-unavailable")
        with sign_in(world) as browser:
            page = browser.get(f"/runs/{run}")
            assert page.status_code == 200 and "[encrypted]" in page.text
            assert SECRET not in page.text
        encrypt(world.store, KeyringFile(keyring))
        r = world.call("GET", f"/v1/runs/{run}/events", role="viewer")
        assert r.json()[0]["data"]["input"]["invoice"] == SECRET
    finally:
        world.close()



@uw.tool(irreversible=True)
async def wire(args: dict[str, Any]) -> dict[str, Any]:
    """A payment the policy holds for approval."""
    return {"sent": args["to"]}


def test_the_inbox_without_keys_lists_every_held_run_as_encrypted(
    tmp_path: Path, keyring: Path
) -> None:
    policy = policy_from_dict({"version": "p1", "rules": [
        {"id": "wires", "tools": ["wire"], "outcome": "require_approval",
         "approver_role": "finance"}]})
    pay = uw.Flow("pay", state=Notes, tools=[wire], policy=policy)

    @pay.step(start=True)
    async def send(ctx: uw.RunContext[Notes, Any]) -> Any:
        return ctx.done(await ctx.call(wire, {"to": SECRET}))

    url = f"sqlite:///{tmp_path / 'u.db'}"
    store = sealed_store(url, keyring)
    engine = uw.Engine(store, flows=[pay, notes])
    held = {engine.start(pay, tenant_id="acme")[0] for _ in range(3)}
    engine.start(notes, tenant_id="acme")  # waits on a signal: no one's to decide
    asyncio.run(uw.Runner(engine).run_until_idle())

    with_keys = uw.Client(store).pending_requests(tenant_id="acme")
    assert {r.run_id for r in with_keys} == held
    assert {(r.kind, r.tool, r.required_role) for r in with_keys} == {
        ("approval", "wire", "finance")}
    keyless = uw.Client(connect(url)).pending_requests(tenant_id="acme")
    assert {r.run_id for r in keyless} == held
    assert {(r.kind, r.tool, r.args) for r in keyless} == {
        ("approval", "[encrypted]", "[encrypted]")}
