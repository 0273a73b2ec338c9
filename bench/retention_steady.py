"""What retention keeps of a run, round after round, on PostgreSQL.

Two databases take the same rounds: each round ``RUNS`` runs finish (two steps, each
adding a 2 KB value to the state, so a checkpoint and blobs of their own), then the clock
moves a day on. In one database the retention sweep purges finished runs older than an
hour after each round; the other keeps everything. After each round both are vacuumed (as
autovacuum would) and their tables measured (``pg_total_relation_size``, rows).

A purge keeps a skeleton that still verifies: the runs row, each event's hash and a
tombstone in place of its payload, and a purge record. Checkpoints go at once, and the
blobs nothing refers to any more at the sweep's collection (here a second after their last
write: between rounds no run is live, and no two runs share a value; beside live workers
the collector waits ``BLOB_GRACE``, two days and an hour). So the figures are the bytes a
purged run keeps against the bytes a kept run holds, and which tables stop growing.

A third database forgets too (``forget_after`` two days): each round the runs purged two
rounds before are forgotten, their skeleton deleted and a line of the forget log kept. So
the runs, events and purge tables level off, and what a run keeps for good is its forget
log line.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
from pydantic import BaseModel

import underway as uw
from common import Figure, pg_schema
from underway.privacy.retention import Retention, sweep
from underway.runner import Runner

RUNS = 200
ROUNDS = 8
DAY = 86_400.0
T0 = 1_800_000_000.0
TABLES = ("runs", "events", "checkpoints", "checkpoint_history", "blobs", "blob_links",
          "signals", "run_labels", "purged_runs", "forgotten_runs")
FORGET_AFTER = 2.5 * DAY
"""Runs are forgotten in the second sweep after their purge."""


class Notes(BaseModel):
    """A state that grows by a value a step."""

    notes: list[str] = []


retained: uw.Flow[Notes, Any] = uw.Flow("bench_retained", state=Notes)


@retained.step(start=True)
async def first(ctx: uw.RunContext[Notes, Any]) -> Any:
    ctx.state.notes.append(ctx.uuid() * 56)
    return ctx.goto(second)


@retained.step
async def second(ctx: uw.RunContext[Notes, Any]) -> Any:
    ctx.state.notes.append(ctx.uuid() * 56)
    return ctx.done({"notes": len(ctx.state.notes)})


def _sizes(url: str) -> dict[str, tuple[int, int]]:
    """(bytes, rows) of each table, after a vacuum."""
    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute("VACUUM")
        out = {}
        for t in TABLES:
            if conn.execute("SELECT to_regclass(%s)", (t,)).fetchone() == (None,):
                continue
            row = conn.execute(f"SELECT pg_total_relation_size('{t}'), "
                               f"(SELECT count(*) FROM {t})").fetchone()
            assert row is not None
            out[t] = (int(row[0]), int(row[1]))
        return out


def rounds(url: str, *, purge: bool, forget: bool = False
           ) -> list[dict[str, tuple[int, int]]]:
    """The tables after each round, with or without the retention sweep (which, with
    ``forget``, forgets the runs it purged two rounds before)."""
    clock = uw.ManualClock(T0)
    client = uw.Client.connect(url, clock=clock)
    engine = uw.Engine(client.store, flows=[retained], clock=clock)
    # Between rounds no run is live, and no two runs share a value: the collector may take
    # a blob a second after its last write (a live worker needs BLOB_GRACE).
    policy = Retention(completed=3600.0, blob_grace=1.0,
                       forget_after=FORGET_AFTER if forget else None)
    out = []
    try:
        for _ in range(ROUNDS):
            for _ in range(RUNS):
                engine.start(retained, {}, tenant_id="acme")
            asyncio.run(Runner(engine).run_until_idle())
            clock.advance(DAY)
            if purge:
                report = sweep(client.store, policy, clock=clock)
                purged = sum(1 for t in report.tenants for o in t.outcomes if o.action == "purged")
                if purged != RUNS:
                    raise RuntimeError(f"the sweep purged {purged} runs of {RUNS}")
                if forget and len(out) >= 2 and report.forgotten != RUNS:
                    raise RuntimeError(f"the sweep forgot {report.forgotten} runs of {RUNS}")
            out.append(_sizes(url))
    finally:
        client.close()
    return out


def bench_postgres() -> list[Figure]:
    """Bytes a run keeps after its purge, against a run kept whole; which tables level."""
    logging.getLogger("underway").setLevel(logging.ERROR)
    with pg_schema() as (_, swept_url), pg_schema() as (_, kept_url), \
            pg_schema() as (_, forgot_url):
        swept = rounds(swept_url, purge=True)
        kept = rounds(kept_url, purge=False)
        forgot = rounds(forgot_url, purge=True, forget=True)

    def growth(history: list[dict[str, tuple[int, int]]], tables: tuple[str, ...],
               since: int = 3) -> float:
        """Bytes a run of the rounds after round ``since`` added (after blobs, or
        skeletons, began to leave)."""
        total = [sum(h[t][0] for t in tables if t in h) for h in history]
        return (total[-1] - total[since - 1]) / ((len(total) - since) * RUNS)

    every = tuple(TABLES)
    swept_per_run, kept_per_run = growth(swept, every), growth(kept, every)
    # Level: no more rows after the last round than after one of the first three.
    level = [t for t in ("checkpoints", "blobs", "blob_links") if t in swept[-1]
             and swept[-1][t][1] <= max(h[t][1] for h in swept[:3])]
    rows = {t: swept[-1][t][1] - swept[2][t][1] for t in ("runs", "events", "purged_runs")}
    # The first forgets are in round 3; from round 5 on, as many runs leave as come.
    forgot_per_run = growth(forgot, every, since=5)
    skeleton = ("runs", "events", "purged_runs")
    steady = {t: forgot[-1][t][1] - forgot[4][t][1] for t in skeleton}
    log_per_run = growth(forgot, ("forgotten_runs",), since=5)

    def grown(history: list[dict[str, tuple[int, int]]]) -> float:
        """The skeleton tables' bytes after the last round over those after round 5."""
        return (sum(history[-1][t][0] for t in skeleton)
                / sum(history[4][t][0] for t in skeleton))
    return [
        Figure("postgres.retention_bytes_per_purged_run", swept_per_run, "bytes",
               kept_per_run, swept_per_run / kept_per_run, "diagnostic",
               note=f"{RUNS} runs a round, a day a round, swept after each; growth of every "
                    f"table over rounds 4-{ROUNDS}, per run; baseline: the same rounds "
                    f"unswept. Level: {', '.join(level) or 'none'}; still growing by "
                    + ", ".join(f"{t} {n:,} rows" for t, n in rows.items())),
        Figure("postgres.retention_bytes_per_forgotten_run", forgot_per_run, "bytes",
               kept_per_run, forgot_per_run / kept_per_run, "diagnostic",
               note=f"as above, forget_after {FORGET_AFTER / DAY:g} days: growth of every "
                    f"table over rounds 6-{ROUNDS}, per run, of which the forget log "
                    f"{log_per_run:,.0f} bytes; rows added over those rounds: "
                    + ", ".join(f"{t} {n:,}" for t, n in steady.items())),
        Figure("postgres.retention_forget_skeleton_growth", grown(forgot), "x",
               grown(swept), grown(forgot) / grown(swept), "diagnostic",
               note=f"bytes of the runs, events and purged_runs tables after round {ROUNDS} "
                    "over after round 5, forgetting; baseline: the same, purging only"),
    ]


if __name__ == "__main__":
    for fig in bench_postgres():
        print(fig)
