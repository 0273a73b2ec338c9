"""The scale simulation (bench/scale_sim.py, docs/scale.md) runs on a real PostgreSQL and its
model holds together: the measured inputs are real (positive CPU, claims that lease what
they ask for), one shard is the one-cluster figure whichever way workers meet it, pinned
shards divide what the model says they divide, and its M/M/c agrees with M/M/1's closed
form."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest

BENCH = str(Path(__file__).resolve().parents[3] / "bench")
if BENCH not in sys.path:
    sys.path.append(BENCH)

import scale_model  # noqa: E402
import scale_sim  # noqa: E402
from scale_model import Load, Measured, Workload  # noqa: E402

FIELDS = [f.name for f in dataclasses.fields(Load) if f.name not in ("shards", "mode")]


def same(a: Load, b: Load) -> bool:
    return all(math.isclose(getattr(a, f), getattr(b, f), rel_tol=1e-12) for f in FIELDS)


@pytest.mark.postgres
def test_the_simulation_measures_real_costs_and_its_model_holds_together(pg_url: str) -> None:
    m, facts = scale_sim.measure(pg_url, tenants=4, more_tenants=40, due=20, finished=20,
                                 waiting=10, claims=24, claimers=(1, 2), notifies=20)
    # Measured: every cost is CPU really spent; claims leased what they asked.
    for name in ("claim_lease_s", "claim_empty_s", "next_due_s", "schedules_s", "loop_client_s",
                 "notify_send_s", "notify_deliver_s", "claim_pages"):
        assert getattr(m, name) > 0, name
    assert m.claim_per_run_s >= 0 and m.claim_per_tenant_s >= 0
    assert set(m.contention) == {1, 2} and m.contention[1] == 1.0 and m.contention[2] > 0
    assert facts["runs_per_claim_1"] == 1.0 and facts["runs_per_claim_10"] == 10.0
    assert m.claim_lease_s > m.next_due_s  # a leasing transaction against one MIN()

    w = Workload()
    base = scale_model.load(m, w, shards=1)
    # One shard is one cluster, whether workers are pinned or serve every shard.
    assert same(base, scale_model.load(m, w, shards=1, mode="every"))
    assert base.total_cpu_cores == base.cpu_cores
    # Every due run is leased once, by one claim, wherever it lives.
    for n in (4, 16):
        for mode in ("pinned", "every"):
            ld = scale_model.load(m, w, shards=n, mode=mode)  # type: ignore[arg-type]
            assert math.isclose(ld.leasing_claims * n, w.activations_per_s)
            assert math.isclose(ld.total_cpu_cores, ld.cpu_cores * n)
            assert math.isclose(ld.claims, ld.leasing_claims + ld.empty_claims)
    # Pinned workers: runs, workers and connections divide by N; a notification reaches
    # N times fewer listeners, and there are N times fewer of them: N² fewer deliveries.
    pinned = scale_model.load(m, w, shards=16)
    assert math.isclose(pinned.activations, base.activations / 16)
    assert math.isclose(pinned.connections, base.connections / 16)
    assert math.isclose(pinned.deliveries, base.deliveries / 16 ** 2)
    assert pinned.total_cpu_cores < base.total_cpu_cores
    # Workers on every shard: each shard keeps every worker's connections and listeners.
    every = scale_model.load(m, w, shards=16, mode="every")
    assert every.connections == base.connections
    assert math.isclose(every.total_connections, 16 * base.connections)
    assert math.isclose(every.deliveries, base.deliveries / 16)
    # Waking k workers per due run instead of every idle one: k deliveries each.
    woken = scale_model.load(m, scale_model.damped(w, 2), shards=1)
    assert math.isclose(woken.deliveries, 2 * woken.notifies)
    assert woken.claims < base.claims


def test_the_queueing_formulas_match_their_closed_forms() -> None:
    # M/M/1: P(wait) = rho, time in system = s / (1 - rho).
    assert math.isclose(scale_model.erlang_c(1, 0.5), 0.5)
    assert math.isclose(scale_model.mmc_response(1, 50.0, 0.01), 0.01 / (1 - 0.5))
    # M/M/2 at a = 1 Erlang: C(2, 1) = 1/3.
    assert math.isclose(scale_model.erlang_c(2, 1.0), 1 / 3)
    assert scale_model.mmc_response(4, 1000.0, 0.004) == math.inf
    assert scale_model.erlang_c(8, 0.0) == 0.0


def test_claim_costs_follow_the_tenants_a_shard_holds() -> None:
    m = Measured(claim_lease_s=1e-3, claim_per_run_s=1e-4, claim_empty_s=2e-4,
                 claim_per_tenant_s=1e-6, tenants=20, next_due_s=2e-5, schedules_s=2e-5,
                 loop_client_s=1e-4, notify_send_s=2e-5, notify_send_per_listener_s=1e-6,
                 notify_deliver_s=1e-5, claim_pages=200, contention={1: 1.0, 2: 1.2, 8: 1.5})
    assert math.isclose(m.at_tenants(1020).claim_empty_s, 2e-4 + 1e-3)
    assert math.isclose(m.at_tenants(0).claim_empty_s, 2e-4 - 20e-6)
    steep = dataclasses.replace(m, claim_per_tenant_s=1e-5)
    assert math.isclose(steep.at_tenants(0).claim_empty_s, 2e-4 / 5)  # the floor
    assert m.contention_at(0.3) == 1.0
    assert math.isclose(m.contention_at(5), 1.2 + 0.3 * 3 / 6)
    assert m.contention_at(100) == 1.5
