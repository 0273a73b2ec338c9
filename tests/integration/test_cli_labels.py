"""Run labels through the CLI on a real database: ``runs start --label`` typed as given,
``runs ls --label`` (several AND together) with a column per label, ``--json`` typed,
a sensitive label redacted unless ``--reveal`` in ``runs ls``, ``runs show`` and
``approvals ls``, and bad labels refused naming the label, with nothing stored."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from typer.testing import CliRunner

import underway as uw
from fakes.invoice_flows import refunds, reminders
from underway.cli import app
from underway.runner import Runner


def run(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, list(args))
    return done.exit_code, done.stdout, done.stderr


def listed(db: str, *args: str) -> list[dict[str, Any]]:
    code, out, err = run("runs", "ls", "--db", db, "--json", *args)
    assert code == 0, err
    found: list[dict[str, Any]] = json.loads(out)
    return found


def test_labels_set_listed_filtered_and_shown(sqlite_url: str) -> None:
    db = sqlite_url
    uw.connect(db).close()
    code, out, err = run("runs", "start", "reminders", "--db", db, "--json", "--input",
                         '{"invoice": "INV-1", "amount": 5}', "--label", "sku=RICE-25KG",
                         "--label", "qty=40", "--label", "code=007", "--label", "rush=true",
                         "--sensitive-label", "patient=Asha Rao")
    assert code == 0, err
    first = json.loads(out)["run_id"]
    code, out, err = run("runs", "start", "reminders", "--db", db, "--json", "--input",
                         '{"invoice": "INV-2", "amount": 5}', "--label", "sku=DAL-10KG",
                         "--label", "qty=40")
    second = json.loads(out)["run_id"]
    labels = {r["run_id"]: r["labels"] for r in listed(db)}
    # Typed when the text is exactly the value: 40 a number, 007 text, true a flag.
    assert labels[first] == {"code": "007", "patient": "[redacted]", "qty": 40, "rush": True,
                             "sku": "RICE-25KG"}
    assert {r["run_id"] for r in listed(db, "--label", "qty=40")} == {first, second}
    assert [r["run_id"] for r in listed(db, "--label", "qty=40", "--label",
                                        "sku=DAL-10KG")] == [second]
    assert listed(db, "--label", "sku=NONE") == []
    revealed = listed(db, "--label", "patient=Asha Rao", "--reveal")
    assert [r["labels"]["patient"] for r in revealed] == ["Asha Rao"]
    code, out, _ = run("runs", "ls", "--db", db, "--wide")
    header = out.splitlines()[0].split()
    assert header[7:13] == ["CODE", "PATIENT", "QTY", "RUSH", "SKU", "NOTE"]
    assert "Asha Rao" not in out and "[redacted]" in out
    code, out, _ = run("runs", "show", first, "--db", db)
    assert "labels   code=007, patient=[redacted], qty=40, rush=true, sku=RICE-25KG" in out
    code, out, _ = run("runs", "events", first, "--db", db)
    assert code == 0 and "Asha Rao" not in out


def test_approvals_ls_shows_the_labels_of_the_runs_that_wait(sqlite_url: str) -> None:
    engine = uw.Engine(uw.connect(sqlite_url), flows=[refunds, reminders])
    engine.start("refunds", {"invoice": "INV-7", "amount": 5},
                 labels={"supplier": "Sri Balaji Traders", "po": "PO-7"},
                 sensitive_labels=["supplier"])
    asyncio.run(Runner(engine).run_until_idle())
    code, out, err = run("approvals", "ls", "--db", sqlite_url)
    assert code == 0, err
    assert "po=PO-7, supplier=[redacted]" in out and "Sri Balaji" not in out
    code, out, _ = run("approvals", "ls", "--db", sqlite_url, "--json", "--reveal")
    assert json.loads(out)[0]["labels"] == {"po": "PO-7", "supplier": "Sri Balaji Traders"}


def test_bad_labels_are_refused_and_nothing_is_stored(sqlite_url: str) -> None:
    db = sqlite_url
    uw.connect(db).close()
    for args, message in (
            (["--label", "9sku=A"], "--label: bad label name '9sku'"),
            (["--label", "sku"], "--label: 'sku': give a label as name=value"),
            (["--label", "sku=" + "x" * 201], "201 characters; at most 200"),
            (["--label", "sku=A", "--label", "sku=B"], "label 'sku' is given twice"),
            (["--sensitive-label", "bad name=1"], "--sensitive-label: bad label name")):
        code, _, err = run("runs", "start", "reminders", "--db", db, *args)
        assert code == 2 and message in err, (args, err)
    assert listed(db) == []
    code, _, err = run("runs", "ls", "--db", db, "--label", "x y=1")
    assert code == 2 and "bad label name 'x y'" in err
