"""Failover under load on a real Patroni cluster: nothing committed is lost.

Two ``underway worker`` processes (group commit on, as by default) drive 100 runs of the
chaos app (:mod:`app`) through the cluster's multi-host URL
(``target_session_attrs=read-write``), and every mutating call reaches the outside
service (:mod:`fakes.outside_service`), which records it. While the runs are in flight:

1. a planned switchover (Patroni's REST ``/switchover``) moves the primary to the
   synchronous standby; the old primary comes back as the new standby;
2. once it streams synchronously again, the journals are snapshotted and their heads
   anchored (``underway audit anchor``), and the primary — its Patroni and every
   PostgreSQL process of it — is killed with SIGKILL. Patroni promotes the standby.

Then, with the same workers (none dies, none is replaced):

- every committed event seen before the kill is still in the journal, byte for byte,
  and so is every one a snapshot saw at any time;
- the outside service saw each non-idempotent effect once; every run completed with the
  result its effects imply;
- no two workers held a lease on one run at once (:func:`harness.fencing_problems`);
- ``underway audit verify --anchors`` proves the journals extend the anchored heads;
- ``underway serve``, started before and never restarted, answers for every run from the
  new primary (the CLI, too, works through the multi-host URL);
- the time from the kill to the first step committed on the new primary, and to each
  worker's first step there, is measured and printed (docs/high-availability.md
  records it); only a generous bound is asserted, to end a hung test.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from app import build
from ha_cluster import Cluster, Node, patroni_cluster
from harness import (
    SERVICE_DELAY_S,
    STUCK_AFTER_S,
    Db,
    Plan,
    Tally,
    Workers,
    journals,
    unfinished,
    unleash,
    verify,
)

from fakes.invariants import Journals, check_prefix
from fakes.outside_service import OutsideService
from fakes.serving import serve

pytestmark = [pytest.mark.crash, pytest.mark.postgres, pytest.mark.timeout(1200)]

RUNS = 100
LOOPS = 24
"""Laps of each run's loop: enough steps that both changes land while runs are in flight."""
EVENTS_PER_RUN = 21 + 4 * LOOPS
"""About how many events a run of the chaos app commits."""
LEASE_TTL = 2.0
CONCURRENCY = 50
"""Runs each worker drives at once: the two together hold every run in flight."""
UNDERWAY = Path(sys.executable).with_name("underway")


@dataclass
class Failover:
    """What the cluster went through, and what the test saw around the kill."""

    cluster: Cluster
    switched: bool = False
    killed: Node | None = None
    before_kill: Journals = field(default_factory=dict)
    events_at_switchover: int = 0
    events_at_resume: int = 0
    events_at_kill: int = 0
    in_flight_at_kill: int = 0
    killed_at: float = 0.0
    """``time.time()`` of the SIGKILL."""
    writable_after_s: float = 0.0
    """From the kill until the multi-host URL reached a writable new primary."""
    first_commit_after_s: float = 0.0
    """From the kill until the first event committed on the new primary."""
    switchover_s: float = 0.0
    recovered: dict[str, float] = field(default_factory=dict)
    """Per worker, from the kill until it held a lease granted or renewed on the new
    primary (a write of its own there)."""


COUNT = "SELECT count(*) FROM events"


def events(url: str) -> int:
    """How many events the journals hold (one query, on a connection of its own)."""
    with psycopg.connect(url, connect_timeout=10, autocommit=True) as conn:
        row = conn.execute(COUNT).fetchone()
        return int(row[0]) if row else 0


def cli(*args: str) -> str:
    """Run ``underway *args``; its output (fails the test on a non-zero exit)."""
    done = subprocess.run([str(UNDERWAY), *args], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, f"underway {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def progress(url: str, since: float) -> tuple[int, set[str]]:
    """How many events the journals hold, and which workers hold a lease that expires
    after ``since`` (granted or renewed after ``since - ttl``)."""
    with psycopg.connect(url, connect_timeout=10, autocommit=True) as conn:
        row = conn.execute(COUNT).fetchone()
        holders = conn.execute("SELECT DISTINCT lease_owner FROM runs "
                               "WHERE lease_expires_at > %s", [since]).fetchall()
        return (int(row[0]) if row else 0), {str(h[0]) for h in holders}


def test_switchover_and_primary_killed_under_load_lose_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    tally = Tally("patroni")
    key, log = tmp_path / "anchor.pem", tmp_path / "anchors.jsonl"
    public = cli("audit", "keygen", "--out", str(key)).split("public key: ")[1].split()[0]
    with patroni_cluster() as cluster, OutsideService(delay=SERVICE_DELAY_S) as svc:
        url = cluster.url
        cli("db", "migrate", "--db", url)
        token = cli("apikeys", "new", "--tenant", "default", "--role", "operator",
                    "--db", url).strip()
        flows, tools = build(svc.url)
        db = Db(url, flows, tools)
        workers = Workers(url, svc.url, tmp_path, concurrency=CONCURRENCY,
                          lease_ttl=LEASE_TTL)
        plan = Plan(runs=RUNS, seconds=1.0, sigkills=0, sigstops=0, lease_ttl=LEASE_TTL,
                    loops=LOOPS)
        expected = RUNS * EVENTS_PER_RUN
        fo = Failover(cluster)

        def change_when_due(elapsed: float) -> bool:
            if fo.killed is not None or not unfinished(db.store):
                return False  # done, or the load ended first (the test then fails)
            with db.store.pool.connection() as conn:
                row = conn.execute(COUNT).fetchone()
                now = int(row[0]) if row else 0
            if not fo.switched and now >= expected // 16:
                leader, standby = cluster.wait_healthy()
                fo.events_at_switchover = now
                began = time.monotonic()
                cluster.switchover(leader, standby)
                cluster.wait_writable(not_on=leader)
                fo.switchover_s = time.monotonic() - began
                fo.switched = True
                # The old primary comes back as the standby. Until it streams, the new
                # primary has no synchronous standby, and its death could take commits
                # with it (docs/high-availability.md): the runs wait meanwhile, at their
                # next call, so that the kill still finds them in flight.
                svc.hold()
                cluster.wait_healthy()
                svc.release()
                fo.events_at_resume = events(url)
            elif fo.switched and now >= fo.events_at_resume + expected // 16:
                # The runs wait while the test takes what it compares with afterwards,
                # then go on: the kill lands among commits in flight.
                svc.hold()
                leader, _ = cluster.wait_healthy()
                fo.before_kill = journals(db.store)
                cli("audit", "anchor", "--db", url, "--key", str(key), "--log", str(log))
                fo.in_flight_at_kill = unfinished(db.store)
                moving = events(url) + RUNS
                svc.release()
                while events(url) < moving and unfinished(db.store):
                    time.sleep(0.01)
                fo.events_at_kill = events(url)
                fo.killed_at = time.time()
                began = time.monotonic()
                cluster.kill(leader)
                fo.killed = leader
                cluster.wait_writable(not_on=leader)
                fo.writable_after_s = time.monotonic() - began
                at_writable = events(url)
                owners = {w.owner for w in workers.all}
                deadline = time.monotonic() + STUCK_AFTER_S
                while (not fo.first_commit_after_s or fo.recovered.keys() < owners) and \
                        time.monotonic() < deadline and unfinished(db.store):
                    committed, holders = progress(url, fo.killed_at + LEASE_TTL)
                    after = time.monotonic() - began
                    if committed > at_writable and not fo.first_commit_after_s:
                        fo.first_commit_after_s = after
                    for owner in holders & owners:
                        fo.recovered.setdefault(owner, after)
                    time.sleep(0.02)
            return True

        with serve(url) as (api, _):
            try:
                for _ in range(2):
                    workers.spawn()
                unleash(db, workers, plan, random.Random(0), tally,
                        between=change_when_due)
                verify(db.engine, svc, workers, plan, [], tally)
                # `underway serve`, up all along, answers from the new primary.
                with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {token}"},
                                  timeout=60) as http:
                    served = {http.get(f"/v1/runs/{r.run_id}").json()["status"]
                              for r in db.store.list_runs("default", limit=1_000)}
                after = journals(db.store)
                check_prefix(fo.before_kill, after, tally.problems, "after the failover")
                # Commits whose answer the kill took: retried, fenced, refused, reloaded.
                gave_up = sum(workers.log(w).count("gave up run") for w in workers.all)
                verified = cli("audit", "verify", "--db", url, "--anchors", str(log),
                               "--public-key", public)
            finally:
                workers.kill_all()
                db.close()
    with capsys.disabled():
        per_worker = {o: round(t, 2) for o, t in sorted(fo.recovered.items())}
        print(f"\nfailover {tally.summary()} events_at_switchover={fo.events_at_switchover} "
              f"events_at_kill={fo.events_at_kill} in_flight_at_kill={fo.in_flight_at_kill} "
              f"switchover_s={fo.switchover_s:.2f} "
              f"writable_after_s={fo.writable_after_s:.2f} "
              f"first_commit_after_s={fo.first_commit_after_s:.2f} "
              f"workers_back_after_s={per_worker} gave_up={gave_up} events={cluster.events}")
    assert not tally.problems, "\n".join(tally.problems[:20])
    assert fo.switched and fo.killed is not None, "the load ended before both changes"
    assert fo.events_at_kill < tally.events, "nothing was committed after the kill"
    assert fo.in_flight_at_kill >= RUNS // 2, "the kill came too late to hit a live load"
    assert sum(len(j) for j in fo.before_kill.values()) > 0
    assert tally.runs == RUNS
    assert served == {"completed"}
    assert tally.duplicate_effects == 0
    assert tally.workers_started == 2  # the same workers carried on: none died
    assert "extends every head of 1 anchor record" in verified, verified
    # Both workers wrote again on the new primary, each within a bound that only ends a
    # hung test (the figures measured are printed above).
    assert fo.first_commit_after_s > 0
    assert len(fo.recovered) == 2, fo.recovered
    assert all(t < STUCK_AFTER_S for t in fo.recovered.values()), fo.recovered
