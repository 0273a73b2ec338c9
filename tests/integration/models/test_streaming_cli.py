"""``underway runs stream RUN``: a run's live model output from the command line, as text or
as JSON lines with offsets, resumed after an offset, the read in the access log."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway.cli import app
from underway.runner import Runner
from underway.testing import ScriptedModel


class S(BaseModel):
    pass


def test_the_cli_follows_a_runs_stream(sqlite_url: str) -> None:
    store = uw.connect(sqlite_url)
    model = ScriptedModel([{"text": "low tide at noon"}])
    flow = uw.Flow("tide", state=S)

    @flow.step
    async def ask(ctx: uw.RunContext[S, Any]) -> Any:
        return ctx.done(await ctx.model(model, {"messages": []}, stream=True))

    engine = uw.Engine(store, flows=[flow])
    run_id, _ = engine.start(flow)
    asyncio.run(Runner(engine).run_until_idle())

    def cli(*args: str) -> str:
        done = CliRunner().invoke(app, ["runs", "stream", run_id, "--db", sqlite_url,
                                        "--by", "tester", *args])
        assert done.exit_code == 0, done.stderr
        return done.stdout

    assert cli() == "low tide at noon\n"
    lines = [json.loads(x) for x in cli("--json").splitlines()]
    assert [x["delta"].get("text") for x in lines] == ["low ", "tide ", "at ", "noon", None]
    assert all(x["key"] == lines[0]["key"] and x["attempt"] == 1 for x in lines)
    later = [json.loads(x) for x in cli("--json", "--after", str(lines[1]["offset"]))
             .splitlines()]
    assert later == lines[2:]
    log = store.list_access("default", run_id=run_id)
    assert len(log) == 3 and {a.key_name for a in log} == {"tester"}
    store.close()
