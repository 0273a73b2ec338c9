"""``underway eval`` by label on every backend: the figures per value of a label (runs
without it in a group of their own, a sensitive value never shown), only the runs with a
label when asked, and bad options named; through Python and the CLI."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway.cli import app
from underway.clock import ManualClock
from underway.errors import InvalidInput
from underway.flow import Next
from underway.ops.evaluation import eval_html, eval_text, evaluate
from underway.redaction import REDACTED
from underway.runner import Runner
from underway.store import Store, connect


class Order(BaseModel):
    fail: bool = False


class Seen(BaseModel):
    pass


def orders() -> uw.Flow[Seen, Order]:
    flow: uw.Flow[Seen, Order] = uw.Flow("orders", state=Seen, input=Order)

    @flow.step(start=True)
    async def place(ctx: uw.RunContext[Seen, Order]) -> Next:
        if ctx.input.fail:
            return ctx.fail("supplier refused")
        ctx.label(placed=True)
        return ctx.done({})

    return flow


RUNS: list[tuple[dict[str, Any], bool]] = [
    ({"sku": "RICE", "region": "south"}, False),
    ({"sku": "RICE", "region": "north"}, True),
    ({"sku": "RICE", "region": "south"}, False),
    ({"sku": "DAL", "region": "south"}, True),
    ({"region": "south"}, False),
]


def seed(store: Store) -> None:
    engine = uw.Engine(store, flows=[orders()], clock=ManualClock(1.7e9))
    for labels, fail in RUNS:
        engine.start("orders", {"fail": fail}, labels=labels)
    engine.start("orders", {}, labels={"patient": "Asha Rao"}, sensitive_labels=["patient"])
    asyncio.run(Runner(engine).run_until_idle())


def test_eval_gives_the_figures_per_label_value(store: Store) -> None:
    seed(store)
    found = evaluate(store, group_by="sku")
    groups = {g.flow: (g.outcomes.started, g.outcomes.completed, g.outcomes.failed)
              for g in found.groups}
    assert groups == {"RICE": (3, 2, 1), "DAL": (1, 0, 1), "-": (2, 2, 0)}
    rates = {g["flow"]: g["outcomes"]["completion_rate"] for g in found.to_json()["groups"]}
    assert rates == {"-": 1.0, "DAL": 0.0, "RICE": 2 / 3}
    text = eval_text(found)
    assert "per label sku:" in text and "RICE" in text
    assert "per label sku" in eval_html(found)
    # A label the flow set is grouped by too.
    placed = {g.flow: g.outcomes.started for g in evaluate(store, group_by="placed").groups}
    assert placed == {"true": 4, "-": 2}
    # A sensitive value is never shown: its runs are one group.
    hidden = evaluate(store, group_by="patient")
    assert {g.flow for g in hidden.groups} == {REDACTED, "-"}
    assert "Asha Rao" not in eval_text(hidden) + json.dumps(hidden.to_json())


def test_eval_measures_only_the_runs_with_a_label(store: Store) -> None:
    seed(store)
    south = evaluate(store, labels={"region": "south"}, group_by="sku")
    assert south.outcomes.started == 4 and south.labels == {"region": "south"}
    assert {g.flow: g.outcomes.started for g in south.groups} == {"RICE": 2, "DAL": 1,
                                                                   "-": 1}
    assert evaluate(store, labels={"region": "west"}).outcomes.started == 0
    with pytest.raises(InvalidInput, match="bad label name"):
        evaluate(store, group_by="9sku")
    with pytest.raises(InvalidInput, match="bad label name"):
        evaluate(store, labels={"no way": "x"})


def test_the_cli_groups_by_a_label(sqlite_url: str) -> None:
    store = connect(sqlite_url)
    try:
        seed(store)
    finally:
        store.close()
    runner = CliRunner()
    done = runner.invoke(app, ["eval", "--db", sqlite_url, "--group-by", "label:sku",
                               "--label", "region=south", "--json"])
    assert done.exit_code == 0, done.output
    figures = json.loads(done.stdout)
    assert figures["group_by"] == "sku" and figures["labels"] == {"region": "south"}
    assert {g["flow"]: g["outcomes"]["started"] for g in figures["groups"]} == {
        "RICE": 2, "DAL": 1, "-": 1}
    text = runner.invoke(app, ["eval", "--db", sqlite_url, "--group-by", "label:sku"])
    assert text.exit_code == 0 and "per label sku:" in text.stdout
    for args, message in ((["--group-by", "sku"], "give label:NAME"),
                          (["--group-by", "label:9x"], "bad label name"),
                          (["--label", "region"], "give a label as name=value")):
        bad = runner.invoke(app, ["eval", "--db", sqlite_url, *args])
        assert bad.exit_code == 2 and message in bad.stderr, bad.output
