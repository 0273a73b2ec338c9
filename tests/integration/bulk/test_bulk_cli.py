"""``underway runs bulk``: a dry run unless --yes, one command for many runs, on SQLite
and a real PostgreSQL."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bulk_world import World
from typer.testing import CliRunner

from fakes import bulk_flows
from fakes.bulk_flows import QUESTION
from underway import events as ev
from underway.cli import app


def cli(*args: str, db: str | None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args, "--db", db] if db else list(args))
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def new_key(world: World, tmp_path: Path, name: str, role: str) -> Path:
    path = tmp_path / f"{name}.pem"
    code, out, _ = cli("keys", "new", "--out", str(path), "--approver", name, db=None)
    assert code == 0
    public = re.search(r"public key: (\S+)", out)
    assert public is not None
    assert cli("approvers", "add", name, "--public-key", public.group(1), "--role", role,
               db=world.url)[0] == 0
    return path


def test_runs_bulk_resume_is_a_dry_run_until_yes(world: World) -> None:
    dead = world.start("brittle", 9)
    bulk_flows.OUTAGE[0] = False

    code, out, _ = cli("runs", "bulk", "resume", "--flow", "brittle", "--by", "ops@acme",
                       db=world.url)
    assert code == 0
    assert "dry run: 9 runs match; resume would act on 9, skip 0" in out
    assert "nothing was sent; run it again with --yes to act" in out
    assert sum(run_id in out for run_id in dead) == 9
    world.drive()
    assert {world.status(r) for r in dead} == {"dead"}

    code, out, _ = cli("runs", "bulk", "resume", "--flow", "brittle", "--by", "ops@acme",
                       "--since", "2000-01-01", "--yes", db=world.url)
    assert code == 0, out
    assert "resume: 9 sent, 0 skipped, 0 failed of 9 runs matched" in out
    assert sum(f"done     {r}" in out for r in dead) == 9
    world.drive()
    for run_id in dead:
        assert world.status(run_id) == "completed"
        assert [e.by for e in world.events(run_id, ev.RunResumed)] == ["ops@acme"]


def test_runs_bulk_answer_answers_every_run_asking_the_question(
    world: World, tmp_path: Path,
) -> None:
    key = new_key(world, tmp_path, "priya", "support")
    asking = world.start("asking", 28)
    code, out, _ = cli("runs", "bulk", "answer", "--question", QUESTION, "--answer",
                       '"Pune"', "--key", str(key), "--as", "priya", "--yes", "--json",
                       db=world.url)
    assert code == 0, out
    report = json.loads(out)
    assert (report["action"], report["matched"], report["counts"]["done"]) == (
        "answer", 28, 28)
    assert report["filter"] == {"status": "escalated"}
    world.drive()
    for run_id in asking:
        [answered] = world.events(run_id, ev.EscalationAnswered)
        assert (answered.approver_id, answered.answer) == ("priya", "Pune")
        assert world.status(run_id) == "completed"


def test_runs_bulk_refuses_bad_options_clearly(world: World, tmp_path: Path) -> None:
    world.start("brittle", 1)
    key = new_key(world, tmp_path, "priya", "support")
    code, _, err = cli("runs", "bulk", "resume", "--status", "deadish", "--by", "x",
                       db=world.url)
    assert code == 2 and "unknown status 'deadish'" in err
    code, _, err = cli("runs", "bulk", "resume", "--since", "yesterday", "--by", "x",
                       db=world.url)
    assert code == 2 and "--since 'yesterday' is not a time" in err
    code, _, err = cli("runs", "bulk", "resume", "--key", str(key), "--by", "x", db=world.url)
    assert code == 2 and "--key and --as go together" in err
    code, _, err = cli("runs", "bulk", "answer", "--question", QUESTION, "--answer", "A",
                       "--key", str(key), "--as", "nobody", db=world.url)
    assert code == 2 and "no approver 'nobody'" in err
    code, _, err = cli("runs", "bulk", "resolve", "--resolution", "maybe", "--by", "x",
                       db=world.url)
    assert code == 2 and "--resolution must be succeeded, failed or retry" in err


def test_runs_bulk_resume_under_signed_resolutions_refuses_or_signs_per_run(
    world: World, tmp_path: Path,
) -> None:
    dead = world.start("brittle", 2)
    config = tmp_path / "underway.toml"
    config.write_text("[approvals]\nsigned_resolutions = true\n")
    code, _, err = cli("runs", "bulk", "resume", "--by", "ops", "--yes", "--config",
                       str(config), db=world.url)
    assert code == 2
    assert "an unsigned bulk resume is refused here" in err
    assert "--key FILE --as APPROVER" in err
    assert all(world.client_store.pending_signals("default", r) == [] for r in dead)

    key = new_key(world, tmp_path, "lead", "ops")
    code, out, _ = cli("runs", "bulk", "resume", "--by", "lead", "--key", str(key), "--as",
                       "lead", "--yes", "--config", str(config), db=world.url)
    assert code == 0 and "2 sent" in out
    bulk_flows.OUTAGE[0] = False
    world.engine.guard.signed_resolutions = True
    world.drive()
    assert {world.status(r) for r in dead} == {"completed"}


def test_runs_bulk_cancel_names_what_it_skipped(world: World) -> None:
    asking = world.start("asking", 2)
    bulk_flows.OUTAGE[0] = False
    done = world.start("brittle", 1)
    code, out, _ = cli("runs", "bulk", "cancel", "--by", "ops", "--reason", "recall",
                       db=world.url)
    assert code == 0
    assert "cancel would act on 2, skip 1" in out
    assert "skip it is already completed: 1" in out
    code, out, _ = cli("runs", "bulk", "cancel", "--by", "ops", "--yes", db=world.url)
    assert f"skipped  {done[0]}: it is already completed" in out
    world.drive()
    assert {world.status(r) for r in asking} == {"cancelled"}


def test_runs_bulk_answer_exits_1_when_the_runs_would_refuse_it(
    world: World, tmp_path: Path,
) -> None:
    asking = world.start("asking", 2)
    key = new_key(world, tmp_path, "sam", "sales")
    code, out, err = cli("runs", "bulk", "answer", "--question", QUESTION, "--answer", "B",
                         "--key", str(key), "--as", "sam", "--yes", db=world.url)
    assert code == 1
    assert "0 sent, 0 skipped, 2 failed of 2 runs matched" in out
    assert out.count("the approver lacks the role the request requires") == 2
    assert "2 of 2 runs failed" in err
    assert all(world.client_store.pending_signals("default", r) == [] for r in asking)
