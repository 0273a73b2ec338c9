"""``underway erase subject`` and ``underway erase log``: an encrypted database (keyring and
its subject vault), a refusal while a run is active or a legal hold stands (nothing
destroyed), a plaintext database (the database is reached, backups are said not to be),
bad input; on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway.cli import app
from underway.crypto import KeyringFile, encrypt, refuse_plaintext
from underway.privacy.erasure import ErasureRefused, erase_subject
from underway.store.base import Store
from underway.store.records import HoldRecord


class Case(BaseModel):
    phone: str = ""


class Notes(BaseModel):
    seen: list[str] = []


def _flow() -> uw.Flow[Any, Any]:
    flow = uw.Flow("note", state=Notes, input=Case, signals=["more"])

    @flow.step(start=True)
    async def first(ctx: uw.RunContext[Notes, Case]) -> Any:
        ctx.state.seen.append(ctx.input.phone)
        if ctx.input.phone.startswith("wait"):
            return ctx.wait("more", then=first)
        return ctx.done({"phone": ctx.input.phone})

    return flow


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    s = uw.connect(url)
    yield s
    s.close()


def _run(store: Store, phone: str, subject: str) -> str:
    engine = uw.Engine(store, flows=[_flow()])
    run_id, _ = engine.start("note", {"phone": phone}, subject=subject)
    asyncio.run(uw.Runner(engine).run_until_idle())
    return run_id


def test_erase_on_an_encrypted_database(url: str, store: Store, tmp_path: Path) -> None:
    keyring = tmp_path / "k.keyring"
    encrypt(store, KeyringFile.create(keyring))
    done = _run(store, "+91 98765 43210", "cust-1")
    waiting = _run(store, "wait +91 11111", "cust-1")
    other = _run(store, "+91 22222", "cust-2")
    args = ("--keyring", str(keyring), "erase", "subject", "cust-1", "--db", url)
    code, out, err = cli(*args, "--by", "dpo", "--reason", "request 7")
    assert code == 2 and "still active" in err and waiting in err
    assert all(k.state == "active" for k in store.list_data_keys())
    store.put_hold(HoldRecord("default", "subject", "cust-1", "litigation 4", "legal", 1.0))
    uw.Client(store).cancel(waiting, by="ops", reason="done")
    asyncio.run(uw.Runner(uw.Engine(store, flows=[_flow()])).run_until_idle())
    code, out, err = cli(*args, "--by", "dpo", "--reason", "request 7")
    assert code == 2 and "legal hold" in err and "litigation 4" in err
    store.release_hold("default", "subject", "cust-1", by="legal", at=2.0)
    code, out, err = cli(*args, "--by", "dpo", "--reason", "request 7", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert set(result["purged"]) == {done, waiting}
    assert (result["vault"], result["keys"], result["runs"]) == ("destroyed", 1, 2)
    client = uw.Client(store)
    assert client.verify(done).ok and client.verify(waiting).ok
    assert client.state(other).result == {"phone": "+91 22222"}
    code, out, _ = cli("erase", "log", "--db", url)
    assert code == 0 and "subject=cust-1" in out and "by=dpo" in out and "vault=destroyed" in out
    code, out, _ = cli("erase", "log", "--db", url, "--subject", "cust-2")
    assert (code, out.strip()) == (0, "no erasures")


def test_erase_on_a_plaintext_database_says_backups_were_not_reached(
    url: str, store: Store
) -> None:
    run_id = _run(store, "+91 98765 43210", "cust-9")
    code, out, err = cli("erase", "subject", "cust-9", "--db", url, "--by", "dpo",
                         "--reason", "request 8")
    assert code == 0, err
    assert "runs reduced to their skeleton: 1" in out and "NOT reached" in out
    events = uw.Client(store).events(run_id)
    assert "98765" not in repr(events)
    assert uw.Client(store).verify(run_id).ok


@pytest.mark.parametrize(("args", "problem"), [
    (("subject", "cust 1", "--by", "dpo", "--reason", "r"), "whitespace"),
    (("subject", "cust-1", "--by", " ", "--reason", "r"), "who asks"),
    (("subject", "cust-1", "--by", "dpo", "--reason", ""), "who asks"),
])
def test_bad_input_is_one_line_and_changes_nothing(
    url: str, store: Store, args: tuple[str, ...], problem: str
) -> None:
    _run(store, "+91 1", "cust-1")
    code, _, err = cli("erase", *args, "--db", url)
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1
    assert store.list_erasures() == []
    assert len(store.runs_of_subject("default", "cust-1")) == 1


def test_an_encrypted_database_without_keys_refuses_and_destroys_nothing(
    url: str, store: Store, tmp_path: Path
) -> None:
    encrypt(store, KeyringFile.create(tmp_path / "k.keyring"))
    run_id = _run(store, "+91 98765 43210", "cust-1")
    code, _, err = cli("erase", "subject", "cust-1", "--db", url, "--by", "dpo",
                       "--reason", "request 9")
    assert code == 2 and "no keys" in err and len(err.strip().splitlines()) == 1
    assert store.list_erasures() == []
    assert all(k.state == "active" for k in store.list_data_keys())
    assert uw.Client(store).state(run_id).result == {"phone": "+91 98765 43210"}


def test_the_erasure_itself_refuses_a_store_without_keys(
    url: str, store: Store, tmp_path: Path
) -> None:
    encrypt(store, KeyringFile.create(tmp_path / "k.keyring"))
    _run(store, "+91 98765 43210", "cust-1")
    keyless = uw.connect(url)
    try:
        assert refuse_plaintext(keyless, "give it keys")
        with pytest.raises(ErasureRefused, match="give it keys"):
            erase_subject(keyless, "cust-1", by="dpo", reason="request 9")
    finally:
        keyless.close()
    assert store.list_erasures() == []
    assert len(store.runs_of_subject("default", "cust-1")) == 1
