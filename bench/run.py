"""Run the benchmarks, write ``bench/results.json`` and print a table.

    .venv/bin/python bench/run.py                 # everything (what `make bench` runs)
    .venv/bin/python bench/run.py --only resume   # some groups; merges into results.json

Each goal is a ratio against a baseline measured in the same run on the same database;
see bench/README.md for what every figure means and its target. PostgreSQL is the server
named by ``UNDERWAY_TEST_PG`` (default postgresql://postgres@127.0.0.1:5432/test); every
benchmark works in a fresh schema and drops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable

import agent
import api
import big_values
import budget_ledger
import client_http
import console
import console_labels
import deploy_check
import encryption
import evaluation
import groupcommit
import guard
import imports
import injection
import labels
import listing
import long_runs
import mcp_tools
import million
import observe
import openai_agents
import pgbouncer
import policy
import provenance
import pydantic_ai_overhead
import resume
import retention_steady
import sandbox
import scale_sim
import service
import starts
import step_bytes
import step_cpu
import storage
import streaming
import tenant_usage
import throughput
import timers
import tracing
import workers
from common import Figure, pg_base_url, pg_reachable, pg_store_missing

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json")

GROUPS: dict[str, list[tuple[str, Callable[[], list[Figure]]]]] = {
    "imports": [("import time", imports.bench)],
    "throughput": [
        ("SQLite step throughput", throughput.bench_sqlite),
        ("PostgreSQL step throughput", throughput.bench_postgres),
    ],
    "groupcommit": [
        ("SQLite group commit, 100 runs in flight", groupcommit.bench_sqlite),
        ("PostgreSQL group commit, 100 runs in flight", groupcommit.bench_postgres),
        ("PostgreSQL worker processes, 100 runs in flight", groupcommit.bench_postgres_workers),
    ],
    "step_cpu": [("instructions per read-only step (callgrind, in-memory store)",
                  step_cpu.bench)],
    "starts": [
        ("SQLite 100 runs of 10 steps, start + claim or eager start", starts.bench_sqlite),
        ("PostgreSQL 100 runs of 10 steps, start + claim or eager start",
         starts.bench_postgres),
    ],
    "resume": [
        ("SQLite resume latency", resume.bench_sqlite),
        ("PostgreSQL resume latency", resume.bench_postgres),
    ],
    "big_values": [
        ("SQLite 200 MB tool result: worker RSS and other runs' steps", big_values.bench_sqlite),
        ("PostgreSQL 200 MB tool result: worker RSS and other runs' steps",
         big_values.bench_postgres),
    ],
    "long_runs": [
        ("SQLite long runs: signals, steps, checkpoints, inbox", long_runs.bench_sqlite),
        ("PostgreSQL long runs: signals, steps, checkpoints, inbox",
         long_runs.bench_postgres),
    ],
    "storage": [
        ("SQLite bytes per turn", storage.bench_sqlite),
        ("PostgreSQL bytes per turn", storage.bench_postgres),
    ],
    "step_bytes": [
        ("SQLite bytes per step", step_bytes.bench_sqlite),
        ("PostgreSQL bytes per step", step_bytes.bench_postgres),
    ],
    "workers": [
        ("SQLite worker processes", workers.bench_sqlite),
        ("PostgreSQL worker processes", workers.bench_postgres),
    ],
    "guard": [
        ("policy evaluation", policy.bench),
        ("approval verification and guarded calls", guard.bench),
        ("tenant usage, from scratch and kept", tenant_usage.bench),
    ],
    "budgets": [
        ("SQLite tenant budget on the hot path", budget_ledger.bench_sqlite),
        ("PostgreSQL tenant budget on the hot path", budget_ledger.bench_postgres),
    ],
    "agent": [
        ("agent iteration (memory)", agent.bench_memory),
        ("SQLite agent iterations", agent.bench_sqlite),
        ("PostgreSQL agent iterations", agent.bench_postgres),
    ],
    "pydantic_ai": [
        ("pydantic-ai run, durable against bare (memory)", pydantic_ai_overhead.bench_memory),
        ("SQLite pydantic-ai run, durable against bare", pydantic_ai_overhead.bench_sqlite),
        ("PostgreSQL pydantic-ai run, durable against bare",
         pydantic_ai_overhead.bench_postgres),
    ],
    "listing": [
        ("SQLite run listing", listing.bench_sqlite),
        ("PostgreSQL run listing", listing.bench_postgres),
    ],
    "openai_agents": [
        ("SQLite OpenAI Agents SDK run, durable against bare", openai_agents.bench_sqlite),
        ("PostgreSQL OpenAI Agents SDK run, durable against bare",
         openai_agents.bench_postgres),
    ],
    "labels": [
        ("SQLite runs by label", labels.bench_sqlite),
        ("PostgreSQL runs by label", labels.bench_postgres),
    ],
    "sandbox": [("bubblewrap sandbox overhead", sandbox.bench)],
    "mcp": [("MCP tool calls and a sandboxed MCP server's start", mcp_tools.bench)],
    "service": [
        ("SQLite HTTP API under load", service.bench_sqlite),
        ("PostgreSQL HTTP API under load", service.bench_postgres),
    ],
    "api": [
        ("SQLite underway serve against a bare FastAPI endpoint", api.bench_sqlite),
        ("PostgreSQL underway serve against a bare FastAPI endpoint", api.bench_postgres),
    ],
    "client_http": [
        ("SQLite client over HTTP", client_http.bench_sqlite),
        ("PostgreSQL client over HTTP", client_http.bench_postgres),
    ],
    "console": [
        ("SQLite console run page", console.bench_sqlite),
        ("PostgreSQL console run page", console.bench_postgres),
    ],
    "console_labels": [
        ("SQLite console pages at 10,000 labelled runs", console_labels.bench_sqlite),
        ("PostgreSQL console pages at 10,000 labelled runs", console_labels.bench_postgres),
    ],
    "observe": [
        ("SQLite cheap observation: /metrics, a deep state, the runs list at 1M runs",
         observe.bench_sqlite),
        ("PostgreSQL cheap observation: /metrics, a deep state, the runs list at 1M runs",
         observe.bench_postgres),
    ],
    "million": [
        ("SQLite a million runs: claims, the next timer, a worker's memory",
         million.bench_sqlite),
        ("PostgreSQL a million runs: claims, the next timer, a worker's memory",
         million.bench_postgres),
    ],
    "timers": [("PostgreSQL timers due at 1,000 a second", timers.bench_postgres)],
    "retention_steady": [("PostgreSQL what retention keeps of a run, round after round",
                          retention_steady.bench_postgres)],
    "startup": [("underway serve start-up", service.bench_startup)],
    "deploy": [
        ("SQLite deploy check of 10,000 parked runs", deploy_check.bench_sqlite),
        ("PostgreSQL deploy check of 10,000 parked runs", deploy_check.bench_postgres),
    ],
    "encryption": [
        ("SQLite encryption at rest", encryption.bench_sqlite),
        ("PostgreSQL encryption at rest", encryption.bench_postgres),
    ],
    "evaluation": [
        ("SQLite eval and drift", evaluation.bench_sqlite),
        ("PostgreSQL eval and drift", evaluation.bench_postgres),
    ],
    "tracing": [
        ("SQLite traces from the journal", tracing.bench_sqlite),
        ("PostgreSQL traces from the journal", tracing.bench_postgres),
    ],
    "injection": [("prompt injection: utility and attacks, defence off, per context and per "
                   "value", injection.bench)],
    "provenance": [("provenance per value: what tracing costs an agent", provenance.bench)],
    "scale": [("PostgreSQL past one cluster: claim costs measured, 10,000 workers modelled on "
               "1 and N shards", scale_sim.bench)],
    "pgbouncer": [("PostgreSQL through PgBouncer in transaction mode: wake latency and cost",
                   pgbouncer.bench_postgres)],
    "streaming": [
        ("SQLite first streamed token", streaming.bench_sqlite),
        ("PostgreSQL first streamed token", streaming.bench_postgres),
    ],
}


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0 or 0.01 <= abs(x) < 1e10:
        return f"{x:,.3f}" if abs(x) < 10 else f"{x:,.1f}"
    return f"{x:.3g}"


def table(figures: list[Figure]) -> str:
    """The figures as a fixed-width table, with notes underneath."""
    head = ("figure", "value", "unit", "baseline", "ratio", "target", "")
    rows = [head] + [
        (f.name, _fmt(f.value), f.unit, _fmt(f.baseline), _fmt(f.ratio), f.target,
         "" if f.ok is None else ("ok" if f.ok else "MISSED"))
        for f in figures
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    right = {1, 3, 4}
    lines = []
    for n, r in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in
                 enumerate(zip(r, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    notes = [f"  {f.name}: {f.note}" for f in figures if f.note]
    return "\n".join(lines + (["", "notes:", *notes] if notes else []))


def main() -> int:
    """Parse arguments, run the chosen groups, write results, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated groups: " + ", ".join(GROUPS))
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL figures")
    args = parser.parse_args()
    chosen = [g for g in args.only.split(",") if g] or list(GROUPS)
    unknown = set(chosen) - set(GROUPS)
    if unknown:
        parser.error(f"unknown groups {sorted(unknown)}; choose from {list(GROUPS)}")

    use_pg = not args.no_postgres
    if use_pg and (why := pg_reachable()):
        print(f"error: {why}\n(set UNDERWAY_TEST_PG, or pass --no-postgres)", file=sys.stderr)
        return 2
    print(f"underway benchmarks — Python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs" + (f", PostgreSQL {pg_base_url()}" if use_pg else ""))
    if use_pg and (missing := pg_store_missing()):
        print(f"note: PostgreSQL engine figures skipped: {missing}")

    figures: list[Figure] = []
    began = time.perf_counter()
    for group in chosen:
        for title, fn in GROUPS[group]:
            if "PostgreSQL" in title and not use_pg:
                continue
            t = time.perf_counter()
            print(f"· {title} ...", end="", flush=True)
            got = fn()
            figures.extend(got)
            print(f" {time.perf_counter() - t:.1f}s ({len(got)} figures)", flush=True)

    results: dict[str, dict[str, object]] = {}
    if args.only and os.path.exists(RESULTS):
        with open(RESULTS, encoding="utf-8") as f:
            results = json.load(f)
    results.update({fig.name: fig.record() for fig in figures})
    with open(RESULTS, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2, sort_keys=True)
        f.write("\n")

    print()
    print(table(figures))
    missed = [f.name for f in figures if f.ok is False]
    print(f"\n{len(figures)} figures in {time.perf_counter() - began:.0f}s -> {RESULTS}")
    if missed:
        print("missed targets: " + ", ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
