"""Prometheus metrics scraped over HTTP from a real server: ``/metrics`` of ``underway
serve`` (what the database says, with an in-process engine's registry) and a worker's own
metrics endpoint (``serve_metrics``), after real runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

import underway as uw
from underway.apikeys import issue_key
from underway.clock import ManualClock
from underway.effects import ModelReply
from underway.runner import Runner
from underway.service import ServerThread, create_app
from underway.store import connect
from underway.telemetry import PrometheusMetrics, serve_metrics


class Job(BaseModel):
    n: int = 1


class Seen(BaseModel):
    total: int = 0


class FixedModel:
    """A model charging 10 input and 5 output tokens, 0.25 USD, per call."""

    name = "m-test"

    async def complete(self, request: Any) -> ModelReply:
        return ModelReply({"text": "ok"}, "m-test", 10, 5, 0.25)


@uw.tool(idempotent=True)
async def add(args: Job) -> dict[str, Any]:
    """Add one."""
    return {"n": args.n + 1}


@uw.tool()
async def hang(args: Job) -> dict[str, Any]:
    """Wait for a gate never opened (the first worker dies while waiting)."""
    await asyncio.Event().wait()
    return {"n": args.n}


work: uw.Flow[Seen, Job] = uw.Flow("work", state=Seen, input=Job, tools=[add])
broken: uw.Flow[Seen, Job] = uw.Flow("broken", state=Seen, input=Job)
slow: uw.Flow[Seen, Job] = uw.Flow("slow", state=Seen, input=Job, tools=[hang])


@work.step
async def one(ctx: uw.RunContext[Seen, Job]) -> Any:
    out = await ctx.call(add, {"n": ctx.input.n})
    await ctx.model(FixedModel(), {"prompt": "secret"})
    ctx.state.total = out["n"]
    return ctx.goto(two)


@work.step
async def two(ctx: uw.RunContext[Seen, Job]) -> Any:
    return ctx.done({"total": ctx.state.total})


@broken.step
async def explode(ctx: uw.RunContext[Seen, Job]) -> Any:
    raise ValueError("boom")


@slow.step
async def wait_gate(ctx: uw.RunContext[Seen, Job]) -> Any:
    return ctx.done(await ctx.call(hang, {"n": 1}))


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


def test_metrics_count_runs_steps_calls_and_database_state(db_url: str) -> None:
    clock = ManualClock(time.time())
    store, worker_store = connect(db_url), connect(db_url)
    metrics = PrometheusMetrics()
    flows = [work, broken, slow]
    engine = uw.Engine(worker_store, flows=flows, clock=clock, metrics=metrics, lease_ttl=30)
    app = create_app(uw.Client(store, clock=clock), metrics=metrics.registry)
    token = issue_key(store, tenant_id="acme", role="operator", name="op",
                      now=clock.now()).token
    worker_http, _ = serve_metrics(metrics.registry, 0, addr="127.0.0.1")
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
            for flow in ("work", "work", "broken"):
                r = http.post("/v1/runs", json={"flow": flow, "input": {"n": 1}},
                              headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == 201, r.text
            assert asyncio.run(Runner(engine).run_until_idle()) == 3

            # A run taken over: its first worker dies in the middle of a mutating call.
            r = http.post("/v1/runs", json={"flow": "slow", "input": {"n": 1}},
                          headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 201, r.text
            dying = uw.Engine(connect(db_url), flows=flows, clock=clock, lease_ttl=30)

            async def die() -> None:
                (lease,) = await dying.io(dying.claim)
                task = asyncio.create_task(dying.activate(lease))
                while not hang_started(dying):
                    await asyncio.sleep(0.01)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

            def hang_started(e: uw.Engine) -> bool:
                rows = e.store.list_runs("acme", flow="slow")
                return bool(rows) and any(
                    type(x.event).__name__ == "ToolStarted"
                    for x in e.client.history(rows[0].run_id, tenant_id="acme"))

            asyncio.run(die())
            dying.store.close()
            clock.advance(31)
            assert asyncio.run(Runner(engine).run_until_idle()) == 1

            scraped = http.get("/metrics")
            assert scraped.status_code == 200
            assert scraped.headers["content-type"].startswith("text/plain")
            from_worker = httpx.get(f"http://127.0.0.1:{worker_http.server_port}/metrics")
    finally:
        worker_http.shutdown()
        worker_http.server_close()
        store.close()
        worker_store.close()

    for text in (scraped.text, from_worker.text):
        m = samples(text)
        assert value(m, "underway_steps_total", flow="work", step="one") == 2
        assert value(m, "underway_steps_total", flow="work", step="two") == 2
        assert value(m, "underway_step_duration_seconds_count", flow="work", step="one") == 2
        assert value(m, "underway_tool_calls_total", tool="add", outcome="succeeded") == 2
        # Taken over in the middle of a call that is not idempotent: escalated.
        assert value(m, "underway_escalations_total", flow="slow",
                     cause="unknown_outcome") == 1
        assert value(m, "underway_tool_duration_seconds_count", tool="add") == 2
        assert value(m, "underway_model_calls_total", model="m-test") == 2
        assert value(m, "underway_model_tokens_total", model="m-test", direction="input") == 20
        assert value(m, "underway_model_tokens_total", model="m-test",
                     direction="output") == 10
        assert value(m, "underway_model_cost_usd_total", model="m-test") == 0.5
        assert value(m, "underway_runs_ended_total", flow="work", status="completed") == 2
        assert value(m, "underway_runs_ended_total", flow="broken", status="dead") == 1
        assert value(m, "underway_runs_ended_total", flow="slow", status="completed") == 0
        assert value(m, "underway_dead_runs_total", flow="broken") == 1
        assert value(m, "underway_activations_total", flow="slow") == 1
        assert value(m, "underway_lease_takeovers_total", flow="slow") == 1
        assert value(m, "underway_lease_takeovers_total", flow="work") == 0
        activations = sum(value(m, "underway_activations_total", flow=f)
                          for f in ("work", "broken", "slow"))
        assert activations == 4
        assert value(m, "underway_wakeup_latency_seconds_count") == activations

    # What the database says, on the serve app only.
    m = samples(scraped.text)
    assert value(m, "underway_runs", tenant="acme", status="completed") == 2
    assert value(m, "underway_runs", tenant="acme", status="escalated") == 1
    assert value(m, "underway_runs", tenant="acme", status="dead") == 1
    assert value(m, "underway_dead_runs", tenant="acme") == 1
    assert value(m, "underway_pending_requests", tenant="acme", kind="approval") == 0
    assert value(m, "underway_pending_requests", tenant="acme", kind="resolution") == 1
    assert "underway_runs{" not in from_worker.text
