"""``underway retention sweep`` with ``forget_after`` on real databases: the dry run names
the runs it would forget, the sweep forgets them, ``retention log`` counts them and
``--forgotten`` lists the forget log, and ``audit verify --anchors`` passes, saying how
many anchored runs retention forgot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_retention_cli import BACKENDS, cli, config

from fakes.retention_world import make_runs
from underway.store import connect

RULES = '[retention]\ncompleted = "90d"\nforget_after = "400d"\n'


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite"
                                       else "pg_url"))


def test_a_sweep_forgets_purged_runs_and_the_audit_knows(url: str, tmp_path: Path) -> None:
    store = connect(url)
    try:
        runs = make_runs(store)
    finally:
        store.close()
    rules = config(tmp_path, url, RULES)
    keys = cli("audit", "keygen", "--out", str(tmp_path / "anchor.pem"))
    public = keys.output.split("public key: ")[1].split()[0]
    anchors = str(tmp_path / "anchors.jsonl")
    assert cli("audit", "anchor", "--key", str(tmp_path / "anchor.pem"), "--log", anchors,
               "--db", url).exit_code == 0

    # The runs ended years ago: purged first (forget_after not said yet), then forgotten.
    (tmp_path / "purge").mkdir()
    done = cli("retention", "sweep", "--config", config(tmp_path / "purge", url,
                                                         '[retention]\ncompleted = "90d"\n'))
    assert done.exit_code == 0, done.output
    assert "purged 2 runs" in done.output and "forgot" not in done.output
    dry = cli("retention", "sweep", "--dry-run", "--config", rules)
    assert "would forget 2 purged runs" in dry.output, dry.output
    assert f"would forget {runs['letter']}" in dry.output
    assert "retention.forget_after = 400d" in dry.output
    shown = cli("runs", "show", runs["letter"], "--db", url)
    assert shown.exit_code == 0  # the dry run changed nothing

    done = cli("retention", "sweep", "--config", rules)
    assert "forgot 2 purged runs" in done.output, done.output
    logged = cli("retention", "log", "--db", url)
    assert "2 forgotten" in logged.output, logged.output
    listed = cli("retention", "log", "--tenant", "default", "--forgotten", "--json",
                 "--db", url)
    lines = json.loads(listed.output)
    assert sorted(f["run_id"] for f in lines) == sorted([runs["letter"], runs["letter_ann"]])
    assert [f["seq"] for f in lines] == [1, 2]

    verified = cli("audit", "verify", "--all", "--anchors", anchors, "--public-key", public,
                   "--db", url)
    assert verified.exit_code == 0, verified.output
    assert "2 anchored runs forgotten by retention" in verified.output
    gone = cli("runs", "show", runs["letter"], "--db", url)
    assert gone.exit_code != 0
