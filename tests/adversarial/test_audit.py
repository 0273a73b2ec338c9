"""An audit an insider cannot rewrite.

Invariants attacked here, on SQLite and PostgreSQL, with plain SQL as an insider would:

- ``audit verify`` never crashes on what the database holds: it checks every run, names
  every bad one (tenant, run, seq, reason) and exits 1; 0 when clean; 2 only for usage.
- With an anchor log signed by a key the database does not hold, re-hashing a chain,
  cutting its tail with the row rewritten, and deleting a run are all caught; an edited,
  pruned or foreign-signed anchor log is caught too.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from insider import Insider, insider
from pydantic import BaseModel
from typer.testing import CliRunner

from underway import CallInfo, Engine, Flow, ManualClock, RunContext, Runner, Worker, connect, tool
from underway.cli import app
from underway.codec import blob_key
from underway.events import canonical_json
from underway.flow import Next
from underway.guard.approvals import generate_keypair, load_private_key, write_private_key
from underway.ops.audit import Anchoring, FileAnchorLog, load_public_key, read_anchors, verify

# -- runs with read-only and mutating calls and a result ---------------------------------


class Order(BaseModel):
    amount: int = 1


class Totals(BaseModel):
    total: int = 0


audited: Flow[Totals, Order] = Flow("audited", state=Totals, input=Order)


@tool(mutating=False)
def price(args: Any, info: CallInfo) -> Any:
    return {"unit": 7}


@tool
def charge(args: Any, info: CallInfo) -> Any:
    return {"charged": args["amount"]}


@audited.step(start=True)
async def quote(ctx: RunContext[Totals, Order]) -> Next:
    unit = await ctx.call(price, {"amount": ctx.input.amount})
    ctx.state.total = unit["unit"] * ctx.input.amount
    return ctx.goto(pay)


@audited.step
async def pay(ctx: RunContext[Totals, Order]) -> Next:
    await ctx.call(charge, {"amount": ctx.state.total})
    return ctx.done({"total": ctx.state.total})


RUNS = [("acme", "r-1"), ("acme", "r-2"), ("globex", "r-1")]


def start(url: str, runs: list[tuple[str, str]]) -> None:
    store = connect(url)
    try:
        engine = Engine(store, flows=[audited], tools=[price, charge],
                        clock=ManualClock(1_700_000_000.0))
        for tenant, run_id in runs:
            engine.start(audited, {"amount": 2}, tenant_id=tenant, run_id=run_id)
    finally:
        store.close()


def finish(url: str, runs: list[tuple[str, str]]) -> None:
    store = connect(url)
    try:
        engine = Engine(store, flows=[audited], tools=[price, charge],
                        clock=ManualClock(1_700_000_100.0))
        for tenant, run_id in runs:
            state = asyncio.run(Runner(engine).run_until_complete(run_id, tenant_id=tenant))
            assert state.status == "completed"
    finally:
        store.close()


def populate(url: str, runs: list[tuple[str, str]] = RUNS) -> None:
    start(url, runs)
    finish(url, runs)


# -- keys, the CLI ------------------------------------------------------------------------


class Key:
    """An anchor key pair: the private half in a 0600 file, the public half as text."""

    def __init__(self, folder: Path, name: str) -> None:
        pem, self.public = generate_keypair()
        self.path = folder / f"{name}.key"
        write_private_key(self.path, pem)


@pytest.fixture
def key(tmp_path: Path) -> Key:
    return Key(tmp_path, "anchor")


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout + result.stderr


def audit(url: str, *args: str) -> tuple[int, str]:
    return cli("audit", "verify", "--db", url, *args)


def anchor(url: str, key: Key, log: Path, *args: str) -> None:
    code, out = cli("audit", "anchor", "--db", url, "--key", str(key.path), "--log", str(log),
                    *args)
    assert code == 0, out


def with_anchors(url: str, log: Path, public: str, *args: str) -> tuple[int, str]:
    return audit(url, "--all", "--anchors", str(log), "--public-key", public, *args)


def tampered(tenant: str, run: str, seq: int | None = None) -> str:
    at = f" at seq {seq}:" if seq is not None else ""
    return f"TAMPERED run {run} in tenant {tenant!r}{at}"


# -- a clean database -------------------------------------------------------------------


def test_a_clean_database_passes_with_and_without_anchors(
    db_url: str, key: Key, tmp_path: Path
) -> None:
    populate(db_url)
    log = tmp_path / "anchors.jsonl"
    anchor(db_url, key, log)
    anchor(db_url, key, log, "--tenant", "acme")
    code, out = audit(db_url, "--all")
    assert code == 0, out
    assert "verified 3 runs" in out
    code, out = with_anchors(db_url, log, key.public)
    assert code == 0, out
    assert "extends every head of 2 anchor records" in out
    # The public key may also be given as a file.
    pub = tmp_path / "anchor.pub"
    pub.write_text(key.public + "\n")
    assert with_anchors(db_url, log, str(pub))[0] == 0
    code, out = audit(db_url, "--tenant", "acme", "r-2", "--anchors", str(log),
                      "--public-key", key.public)
    assert code == 0, out
    assert "verified 1 run," in out
    record = json.loads(log.read_text().splitlines()[0])
    assert record["count"] == 3 and [leaf[:2] for leaf in record["leaves"]] == [
        ["acme", "r-1"], ["acme", "r-2"], ["globex", "r-1"]]


def test_journals_that_grow_after_an_anchor_still_extend_it(
    db_url: str, key: Key, tmp_path: Path
) -> None:
    log = tmp_path / "anchors.jsonl"
    start(db_url, RUNS)
    anchor(db_url, key, log)  # every run at seq 1
    finish(db_url, RUNS[:2])
    anchor(db_url, key, log)
    populate(db_url, [("acme", "r-new")])
    finish(db_url, RUNS[2:])
    code, out = with_anchors(db_url, log, key.public)
    assert code == 0, out
    assert "verified 4 runs" in out


# -- what only anchors catch --------------------------------------------------------------


def rehash_after_edit(sql: Insider) -> tuple[str, str, str]:
    """Change what the charge returned, then recompute the chain and the row's head."""
    seq, _, payload, _ = next(e for e in sql.events("acme", "r-1") if b'"charged"' in e[2])
    edited = payload.replace(b'"charged":14', b'"charged":1400')
    assert edited != payload
    sql.set_payload("acme", "r-1", seq, edited)
    sql.rehash("acme", "r-1")
    return "acme", "r-1", "rewritten and re-hashed"


def rehash_every_run(sql: Insider) -> tuple[str, str, str]:
    """Edit one run's first event, and re-hash every run so nothing looks touched."""
    seq, _, payload, _ = sql.events("globex", "r-1")[0]
    edited = payload.replace(b'"amount":2', b'"amount":9')
    assert edited != payload
    sql.set_payload("globex", "r-1", seq, edited)
    for tenant, run in RUNS:
        sql.rehash(tenant, run)
    return "globex", "r-1", "re-hashed in seq 1.."


def truncate_with_row(sql: Insider) -> tuple[str, str, str]:
    """Cut the tail (the charge and the result) and make the row end where the cut is."""
    sql.truncate("acme", "r-2", keep=3)
    return "acme", "r-2", "events were removed"


def delete_run(sql: Insider) -> tuple[str, str, str]:
    sql.delete_run("globex", "r-1")
    return "globex", "r-1", "the run is gone"


@pytest.mark.parametrize("attack", [rehash_after_edit, rehash_every_run, truncate_with_row,
                                    delete_run], ids=lambda f: f.__name__)
def test_anchors_catch_what_the_chain_alone_cannot(
    db_url: str, key: Key, tmp_path: Path, attack: Callable[[Insider], tuple[str, str, str]]
) -> None:
    populate(db_url)
    log = tmp_path / "anchors.jsonl"
    anchor(db_url, key, log)
    with insider(db_url) as sql:
        tenant, run, reason = attack(sql)

    # The threat model: the chain has no secret, so without anchors a consistent rewrite
    # may pass (a checkpoint the rewrite left behind can still give it away).
    code, out = audit(db_url, "--all")
    assert code in (0, 1), out

    code, out = with_anchors(db_url, log, key.public)
    assert code == 1, out
    lines = [line for line in out.splitlines() if line.startswith("TAMPERED")]
    # Only the attacked run is named (its checkpoint may be reported besides the anchor).
    assert lines and all(line.startswith(tampered(tenant, run)) for line in lines), out
    assert any(reason in line for line in lines), out
    assert "1 of 3 runs failed verification" in out
    # Scoped to the run's tenant, or to the run itself, it is named too.
    code, out = audit(db_url, "--tenant", tenant, "--anchors", str(log),
                      "--public-key", key.public)
    assert code == 1 and tampered(tenant, run) in out, out
    code, out = audit(db_url, "--tenant", tenant, run, "--anchors", str(log),
                      "--public-key", key.public)
    assert code == 1 and tampered(tenant, run) in out, out


def test_an_anchored_head_bounds_where_the_rewrite_is(
    db_url: str, key: Key, tmp_path: Path
) -> None:
    """With a head anchored mid-run and one at the end, an edit after the first is placed
    between them; the first still holds."""
    log = tmp_path / "anchors.jsonl"
    start(db_url, RUNS)
    anchor(db_url, key, log)
    finish(db_url, RUNS)
    anchor(db_url, key, log)
    with insider(db_url) as sql:
        rehash_after_edit(sql)
    code, out = with_anchors(db_url, log, key.public)
    assert code == 1, out
    assert "re-hashed in seq 2.." in out, out


# -- the verifier never crashes --------------------------------------------------------


def test_every_corrupt_run_is_reported_and_none_hides_another(db_url: str) -> None:
    runs = [("acme", f"r-{i}") for i in range(1, 11)] + [("globex", "r-1")]
    populate(db_url, runs)
    expected: dict[tuple[str, str], str] = {}
    with insider(db_url) as sql:

        def rewrite(run: str, seq: int, edit: Callable[[bytes], bytes]) -> None:
            payload = sql.events("acme", run)[seq - 1][2]
            sql.set_payload("acme", run, seq, edit(payload))
            sql.rehash("acme", run)

        # A row without events, saying last_seq 0: once an IndexError that ended the audit.
        sql.q("INSERT INTO runs (tenant_id, run_id, flow, status, last_seq, last_hash, "
              "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
              "acme", "r-empty", "audited", "ready", 0, "", 0.0, 0.0)
        expected[("acme", "r-empty")] = "the journal has no events"
        # ... next to a plain edit in another tenant, which it once hid.
        payload = sql.events("globex", "r-1")[2][2]
        sql.set_payload("globex", "r-1", 3, payload + b" ")
        expected[("globex", "r-1")] = "hash does not match"
        sql.q("DELETE FROM events WHERE tenant_id = ? AND run_id = ? AND seq = ?",
              "acme", "r-1", 4)
        expected[("acme", "r-1")] = "event 4 is missing"
        rewrite("r-2", 3, lambda _: b"\xff\xfe not even text")
        expected[("acme", "r-2")] = "payload is not valid JSON"
        rewrite("r-3", 3, lambda _: b"[1, 2, 3]")
        expected[("acme", "r-3")] = "payload is not a JSON object"
        rewrite("r-4", 3, lambda _: b"[" * 100_000 + b"]" * 100_000)
        expected[("acme", "r-4")] = "payload is not valid JSON"
        # An envelope that names its seq (as one stored before seq lived in the row only),
        # as true where the row says 1.
        rewrite("r-5", 1, lambda p: canonical_json({**json.loads(p), "seq": True,
                                                    "type": "RunStarted"}))
        expected[("acme", "r-5")] = "stored seq/type differ"
        sql.q("UPDATE runs SET last_seq = 0 WHERE tenant_id = ? AND run_id = ?", "acme", "r-6")
        expected[("acme", "r-6")] = "a run's journal starts at 1"
        sql.q("DELETE FROM runs WHERE tenant_id = ? AND run_id = ?", "acme", "r-7")
        expected[("acme", "r-7")] = "the run row is missing"
        # A reference to a blob whose content matches its address but is not JSON.
        garbage = b"\x00 not json"
        sql.q("INSERT INTO blobs (tenant_id, key, data) VALUES (?, ?, ?)",
              "acme", blob_key(garbage), garbage)

        def refer(payload: bytes) -> bytes:
            env = json.loads(payload)
            env["data"] = {"$blob": blob_key(garbage)}
            return canonical_json(env)

        last = len(sql.events("acme", "r-8"))
        rewrite("r-8", last, refer)
        expected[("acme", "r-8")] = "refers to blob"
        sql.q("UPDATE runs SET last_seq = 99 WHERE tenant_id = ? AND run_id = ?", "acme", "r-9")
        expected[("acme", "r-9")] = "run row says last seq 99"
        if sql.schema is None:
            # SQLite keeps any type in any column: a payload turned into text loads, and
            # (the same bytes) still verifies.
            sql.q("UPDATE events SET payload = CAST(payload AS TEXT) "
                  "WHERE tenant_id = ? AND run_id = ?", "acme", "r-10")
        else:
            sql.q("ALTER TABLE events ALTER COLUMN hash DROP NOT NULL")
            sql.q("UPDATE events SET hash = NULL WHERE tenant_id = ? AND run_id = ? AND seq = 2",
                  "acme", "r-10")
            expected[("acme", "r-10")] = "hash does not match"

    code, out = audit(db_url, "--all")
    assert code == 1, out
    assert "Traceback" not in out and "error" not in out.lower(), out
    for (tenant, run), reason in expected.items():
        line = next((x for x in out.splitlines() if x.startswith(tampered(tenant, run))), "")
        assert reason in line, f"{tenant}/{run}: {reason!r} not in\n{out}"
    assert sum(line.startswith("TAMPERED") for line in out.splitlines()) == len(expected), out
    assert f"{len(expected)} of {len(runs) + 1} runs failed verification" in out


# -- the anchor log itself ------------------------------------------------------------------


LogAttack = Callable[[str, Path, Key, Key], str]
"""(database URL, anchor log, the genuine key, an attacker's key) -> the reason expected."""


def edit_a_leaf(url: str, log: Path, key: Key, other: Key) -> str:
    lines = log.read_text().splitlines()
    record = json.loads(lines[0])
    record["leaves"][0][2] = 1  # claim the run was anchored at seq 1
    lines[0] = json.dumps(record)
    log.write_text("\n".join(lines) + "\n")
    return "line 1: the signature of record 1 does not verify"


def signed_by_another_key(url: str, log: Path, key: Key, other: Key) -> str:
    log.unlink()
    anchor(url, other, log)
    return "line 1: record 1 was signed by key"


def append_a_foreign_record(url: str, log: Path, key: Key, other: Key) -> str:
    anchor(url, other, log)
    return "line 3: record 3 was signed by key"


def remove_a_middle_record(url: str, log: Path, key: Key, other: Key) -> str:
    anchor(url, key, log)
    lines = log.read_text().splitlines()
    log.write_text(lines[0] + "\n" + lines[2] + "\n")
    return "line 2: record 3 does not follow the line before it"


def garbage_line(url: str, log: Path, key: Key, other: Key) -> str:
    with log.open("a") as f:
        f.write("{not json\n")
    return "line 3: not an anchor record"


def emptied(url: str, log: Path, key: Key, other: Key) -> str:
    log.write_text("")
    return "the anchor log holds no records"


@pytest.mark.parametrize("attack", [edit_a_leaf, signed_by_another_key, append_a_foreign_record,
                                    remove_a_middle_record, garbage_line, emptied],
                         ids=lambda f: f.__name__)
def test_an_edited_anchor_log_is_caught(
    db_url: str, key: Key, tmp_path: Path, attack: LogAttack
) -> None:
    populate(db_url)
    log = tmp_path / "anchors.jsonl"
    anchor(db_url, key, log)
    anchor(db_url, key, log)
    reason = attack(db_url, log, key, Key(tmp_path, "attacker"))
    code, out = with_anchors(db_url, log, key.public)
    assert code == 1, out
    assert f"TAMPERED anchor log: {reason}" in out, out
    # The database is clean: only the log is reported.
    assert "0 of 3 runs failed verification (2 tenants); " in out, out


def test_a_rewrite_stays_caught_when_the_insider_anchors_it_with_their_own_key(
    db_url: str, key: Key, tmp_path: Path
) -> None:
    populate(db_url)
    log = tmp_path / "anchors.jsonl"
    anchor(db_url, key, log)
    with insider(db_url) as sql:
        rehash_after_edit(sql)
    anchor(db_url, Key(tmp_path, "insider"), log)
    code, out = with_anchors(db_url, log, key.public)
    assert code == 1, out
    assert tampered("acme", "r-1") in out and "re-hashed" in out, out
    assert "TAMPERED anchor log: line 2: record 2 was signed by key" in out, out


def test_checking_with_the_wrong_public_key_fails(db_url: str, key: Key, tmp_path: Path) -> None:
    populate(db_url)
    log = tmp_path / "anchors.jsonl"
    anchor(db_url, key, log)
    code, out = with_anchors(db_url, log, Key(tmp_path, "other").public)
    assert code == 1, out
    assert "not by the given public key" in out


# -- usage -----------------------------------------------------------------------------------


def test_usage_errors_exit_2_and_nothing_else_does(db_url: str, key: Key, tmp_path: Path) -> None:
    populate(db_url)
    log = tmp_path / "anchors.jsonl"
    anchor(db_url, key, log)
    cases = [
        (["--all", "--anchors", str(log)], "go together"),
        (["--all", "--public-key", key.public], "go together"),
        (["--all", "--anchors", str(tmp_path / "missing"), "--public-key", key.public],
         "no anchor log"),
        (["--all", "--anchors", str(log), "--public-key", "not-a-key"], "not valid base64"),
        (["--all", "r-1"], "not both"),
        (["--tenant", "acme", "r-nope"], "no run 'r-nope'"),
    ]
    for args, message in cases:
        code, out = audit(db_url, *args)
        assert code == 2, (args, out)
        assert message in out, (args, out)
    code, out = cli("audit", "anchor", "--db", db_url, "--key", str(tmp_path / "nokey"),
                    "--log", str(log))
    assert code == 2 and "no private key file" in out, out
    # A run deleted after it was anchored is a finding, not "no such run".
    with insider(db_url) as sql:
        sql.delete_run("acme", "r-2")
    code, out = audit(db_url, "--tenant", "acme", "r-2", "--anchors", str(log),
                      "--public-key", key.public)
    assert code == 1 and "the run is gone" in out, out


def test_keygen_makes_a_key_that_anchors_and_verifies(db_url: str, tmp_path: Path) -> None:
    populate(db_url, RUNS[:1])
    path = tmp_path / "k.pem"
    code, out = cli("audit", "keygen", "--out", str(path))
    assert code == 0, out
    assert os.stat(path).st_mode & 0o077 == 0
    public = next(x for x in out.splitlines() if x.startswith("public key: ")).split(": ")[1]
    log = tmp_path / "a.jsonl"
    code, out = cli("audit", "anchor", "--db", db_url, "--key", str(path), "--log", str(log))
    assert code == 0 and "anchored 1 run as record 1" in out, out
    assert with_anchors(db_url, log, public)[0] == 0
    assert cli("audit", "keygen", "--out", str(path))[0] == 2  # never overwrites a key


# -- anchoring on a schedule ---------------------------------------------------------------


def test_a_worker_anchors_on_a_schedule_and_when_it_stops(
    db_url: str, key: Key, tmp_path: Path
) -> None:
    start(db_url, RUNS)
    log = tmp_path / "anchors.jsonl"
    store = connect(db_url)
    try:
        engine = Engine(store, flows=[audited], tools=[price, charge])
        anchoring = Anchoring(key=load_private_key(key.path), sink=FileAnchorLog(log),
                              every=0.05)
        worker = Worker(engine, anchoring=anchoring, poll=0.05)

        async def serve() -> None:
            task = asyncio.create_task(worker.run())
            while worker.anchored < 1 or any(
                (r := store.get_run(t, i)) is None or r.status != "completed" for t, i in RUNS
            ):
                await asyncio.sleep(0.02)
            worker.stop()
            await task

        asyncio.run(asyncio.wait_for(serve(), 60))
        lines = FileAnchorLog(log).lines()
        assert len(lines) == worker.anchored >= 1
        anchors = read_anchors(lines, load_public_key(key.public))
        assert anchors.findings == [] and anchors.records == len(lines)
        # Each record signs only heads that moved; the newest of each run, taken when the
        # worker stopped at the latest, is the journal's head now.
        signed = [(k, h.seq, h.head) for k, hs in anchors.heads.items() for h in hs]
        assert len(signed) == len(set(signed))
        newest = {k: max(hs, key=lambda h: h.record) for k, hs in anchors.heads.items()}
        assert {k: (h.seq, h.head) for k, h in newest.items()} == {
            (t, r): (s, h) for t, r, s, h in store.journal_heads()}
        assert verify(store, anchors=anchors).ok
        # Nothing moved since: anchoring again appends nothing.
        known = {k: (h.seq, h.head) for k, h in newest.items()}
        assert anchoring.run(store, known) is None
        assert len(FileAnchorLog(log).lines()) == len(lines)
    finally:
        store.close()


def test_worker_anchor_options_go_together(key: Key) -> None:
    code, out = cli("worker", "--app", "nowhere:flows", "--db", "memory://",
                    "--anchor-every", "5", "--anchor-key", str(key.path))
    assert code == 2 and "go together" in out, out
