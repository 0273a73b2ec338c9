"""The console at 10,000 labelled runs: the runs list, a page of it filtered by a label,
the approvals inbox and a run page, against the API's first page of the listing,
``GET /v1/runs?limit=50``, on the same server.

One tenant holds ``RUNS`` runs, each with four typed labels: ``sku`` (one of 200 values,
so one matches about 50 runs: a page), ``region`` (one of 5), ``amount`` (a number) and
``rush`` (a boolean). Every ``EVERY``-th run pays a supplier through a tool the flow's
policy holds for approval by procurement: a worker takes it to its held call, where it
waits for a person (``HELD`` runs, the inbox's rows, the inbox showing its first 200). The
others are started and wait for a worker. The held runs are spread through the list, so
the runs list's first page holds a few of them, as a live desk's would.

Requests are sequential, one browser (a signed-in httpx client) in this process, each
figure's request interleaved with the baseline's so load drift hits both. Targets: every
console page answers in under 300 ms (p50) and costs at most 10 API listings.
"""

from __future__ import annotations

import asyncio
import gc
import re
import time
from decimal import Decimal
from typing import Any

import httpx
from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir
from console import _ms, _p99, _sign_in
from underway.apikeys import issue_key
from underway.guard.policy import policy_from_dict
from underway.service import ServerThread, create_app

RUNS = 10_000
EVERY = 20
HELD = RUNS // EVERY
SKUS = 200
REQUESTS = 60
TARGET_MS = 300.0
TARGET_RATIO = 10.0
TENANT = "bench"
T0 = 1_717_200_000.0


class Order(BaseModel):
    po: str
    supplier: str
    amount: Decimal
    currency: str = "INR"
    from_account: str = "HDFC-OPS-0042"


class Notes(BaseModel):
    paid: bool = False


@uw.tool(irreversible=True, amount="amount", currency="arg:currency", money_direction="out",
         account="from_account", summary="Pay {amount:money} to {supplier} for {po}")
async def pay_supplier(args: Order) -> dict[str, Any]:
    """Pay a supplier for a purchase order."""
    return {"paid": args.po}


POLICY = policy_from_dict({"version": "p1", "rules": [
    {"id": "payments", "tools": ["pay_supplier"], "outcome": "require_approval",
     "approver_role": "procurement", "expires_in": 86400},
]})

procure: uw.Flow[Notes, Order] = uw.Flow("procure", state=Notes, input=Order,
                                         tools=[pay_supplier], policy=POLICY)


@procure.step
async def pay(ctx: uw.RunContext[Notes, Order]) -> Any:
    return ctx.done(await ctx.call(
        pay_supplier, ctx.input,
        evidence={"po": ctx.input.po, "goods_received": True},
        risks=["a payment cannot be recalled"]))


def _labels(i: int) -> dict[str, Any]:
    return {"sku": f"SKU-{i % SKUS:03d}", "region": f"R{i % 5}",
            "amount": 1000 + (i * 37) % 90_000, "rush": i % 7 == 0}


async def _hold(engine: uw.Engine, run_ids: list[str]) -> None:
    """Take each held run to its held call, as a worker would."""
    for run_id in run_ids:
        [lease] = engine.claim(tenant_id=TENANT, run_id=run_id)
        state = await engine.activate(lease)
        assert state.status == "waiting", (run_id, state.status)


def _fill(client: uw.Client, clock: uw.ManualClock) -> list[str]:
    """Start the runs, oldest first; the held ones reach their approval. Their ids."""
    engine = uw.Engine(client.store, flows=[procure], clock=clock)
    held, batch = [], []
    for i in range(RUNS):
        labels = _labels(i)
        if i % EVERY == EVERY - 1:
            run_id, _ = client.start("procure", {
                "po": f"PO-{i:05d}", "supplier": f"Supplier {i % 40}",
                "amount": str(labels["amount"])}, tenant_id=TENANT, labels=labels)
            batch.append(run_id)
        else:
            client.start("orders", {"n": i}, tenant_id=TENANT, labels=labels)
        if len(batch) == 50:
            asyncio.run(_hold(engine, batch))
            held += batch
            batch = []
        if i % 3 == 2:
            clock.advance(1)
    asyncio.run(_hold(engine, batch))
    return held + batch


def _figures(url: str, db: str, analyze: Any = None) -> list[Figure]:
    clock = uw.ManualClock(T0)
    client = uw.Client.connect(url, clock=clock)
    try:
        began = time.perf_counter()
        held = _fill(client, clock)
        if analyze is not None:
            analyze()
        built = time.perf_counter() - began
        gc.collect()  # the build's garbage is not a serving process's
        token = issue_key(client.store, tenant_id=TENANT, role="approver", name="bench",
                          now=clock.now()).token
        auth = {"Authorization": f"Bearer {token}"}
        paths = {"api": "/v1/runs?limit=50", "runs": "/runs",
                 "filtered": "/runs?label=sku=SKU-019", "inbox": "/approvals",
                 "run": f"/runs/{held[-1]}"}
        samples: dict[str, list[float]] = {k: [] for k in paths}
        with ServerThread(create_app(client)) as server, \
                httpx.Client(base_url=server.url, timeout=120.0) as http:
            _sign_in(http, token)
            _check(http, held)
            for _ in range(3):  # warm up
                for name, path in paths.items():
                    _ms(http, path, auth if name == "api" else None)
            for _ in range(REQUESTS):
                for name in ("runs", "filtered", "inbox", "run"):
                    samples["api"].append(_ms(http, paths["api"], auth))
                    samples[name].append(_ms(http, paths[name]))
    finally:
        client.close()
    base50, base99 = median(samples["api"]), _p99(samples["api"])
    note = (f"{RUNS:,} runs with 4 labels, {len(held)} held for approval (built in "
            f"{built:.0f}s), {REQUESTS} sequential requests each; baseline GET /v1/runs?limit=50")
    figures = []
    for name, what in (("runs", "runs_list"), ("filtered", "runs_by_label"),
                       ("inbox", "inbox"), ("run", "run_page")):
        p50, p99 = median(samples[name]), _p99(samples[name])
        ok = p50 < TARGET_MS and p50 / base50 <= TARGET_RATIO
        figures.append(Figure(f"{db}.console_10k_{what}_p50", p50, "ms", base50, p50 / base50,
                              f"<= {TARGET_RATIO:g}, < {TARGET_MS:g} ms", ok,
                              note=note if name == "runs" else ""))
        figures.append(Figure(f"{db}.console_10k_{what}_p99", p99, "ms", base99, p99 / base99,
                              "diagnostic"))
    return figures


def _check(http: httpx.Client, held: list[str]) -> None:
    """The pages show what they are measured for: label columns, held rows, a summary."""
    runs = http.get("/runs").text
    assert runs.count("approval by procurement") >= 2 and "SKU-" in runs, runs[:2000]
    filtered = http.get("/runs?label=sku=SKU-019").text
    assert len(set(re.findall(r"SKU-\d{3}", filtered))) == 1, filtered[:2000]
    inbox = http.get("/approvals").text
    assert inbox.count("<tr data-run=") == min(len(held), 200) and "SKU-" in inbox, inbox[:2000]
    page = http.get(f"/runs/{held[-1]}").text
    assert "approval by procurement" in page and "SKU-" in page, page[:2000]


def bench_sqlite() -> list[Figure]:
    """The console's pages at 10,000 labelled runs on SQLite."""
    with sqlite_dir() as d:
        return _figures(f"sqlite:///{d}/console.db", "sqlite")


def bench_postgres() -> list[Figure]:
    """The console's pages at 10,000 labelled runs on PostgreSQL."""
    with pg_schema() as (schema, url):
        def analyze() -> None:  # as autovacuum does soon after a bulk insert
            import psycopg

            with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
                for table in ("runs", "run_labels", "events"):
                    conn.execute(f'ANALYZE "{schema}".{table}')

        return _figures(url, "postgres", analyze)
