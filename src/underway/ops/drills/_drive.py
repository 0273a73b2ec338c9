"""Running a drill: the scratch database, the scenario, the runs started, the worker
processes (killed, for the crash drill), and the report read back from the ledger."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ...client import Client
from ...errors import ConfigurationError, UnderwayError
from ...events import JSON
from ...loading import load_app, put_on_path
from ...scheduling.intake import intake
from ...store import connect
from ._inject import Logbook
from ._plan import CRASH_POINTS, FAULTS, DrillSite, Fault, Plan, Scenario, load_setup
from ._report import DrillReport, DrillRun, build_report, settled
from ._scratch import scratch_database

DUPLICATE_STARTS = 3
"""How many times a duplicates drill starts each run (or delivers its event) at once."""
CRASH_WITHIN = 12
"""A crash drill's worker dies at one of its first this many fault points (seeded): each
worker after it resumes the runs from their journals, so the kills move through them."""
NAMESPACE = uuid.UUID("6a1b3c58-0d47-4c1e-9a55-3d1f0d6e2b71")


class DrillError(UnderwayError):
    """A drill could not be carried out (a worker would not start, the app is broken):
    not a finding about the flow, a reason the drill has none."""


@dataclass(frozen=True, kw_only=True)
class DrillOptions:
    """What ``underway drill`` was asked: the app (``module:attribute``, as for ``underway
    worker --app``), the database kind and server (``db``: a scratch database is made
    there), the faults, how many runs, the seed, and the scenario (``setup``, or ``input``
    and ``flow``). ``patience``: seconds the drill waits for its runs to settle."""

    app: str
    db: str
    only: tuple[Fault, ...] = FAULTS
    runs: int = 10
    seed: int = 0
    setup: str | None = None
    input: JSON = None
    flow: str | None = None
    patience: float = 300.0
    workers: int = 2
    environment: str | None = None
    secrets_env_prefix: str | None = None
    keep: bool = False
    timeout_cap: float = 2.0
    lease_ttl: float = 3.0

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ConfigurationError(f"--runs {self.runs}: a drill needs at least one run")
        if not self.only:
            raise ConfigurationError("a drill needs at least one fault")
        if not self.patience > 0 or not self.timeout_cap > 0 or self.workers < 1:
            raise ConfigurationError("patience, timeout cap and workers must be positive")


def run_drill(opts: DrillOptions, *, say: Callable[[str], None] = lambda _: None
              ) -> DrillReport:
    """Run the drill ``opts`` describes and return what it found; ``say`` hears progress.
    The current directory is on the import path, as for ``underway worker``."""
    put_on_path([os.getcwd()])
    workdir = Path(tempfile.mkdtemp(prefix="underway-drill-"))
    try:
        with scratch_database(opts.db, workdir, keep=opts.keep) as url:
            site = DrillSite(workdir, url)
            with load_setup(opts.setup, site, input=opts.input, flow=opts.flow) as scenario, \
                    _environ({**scenario.env, "UNDERWAY_DB": url}):
                report = _Drill(opts, scenario, site, say).run()
        if opts.keep:
            report.scratch = f"{url} (files in {workdir})"
        return report
    finally:
        if not opts.keep:
            shutil.rmtree(workdir, ignore_errors=True)


class _Drill:
    def __init__(self, opts: DrillOptions, scenario: Scenario, site: DrillSite,
                 say: Callable[[str], None]) -> None:
        self.opts, self.scenario, self.site, self.say = opts, scenario, site, say
        self.procs: list[tuple[subprocess.Popen[bytes], IO[bytes], Path]] = []
        self.spawned = 0
        self.deadline = time.monotonic() + opts.patience

    def run(self) -> DrillReport:
        flows, _ = load_app(self.opts.app)
        names = [f.name for f in flows]
        self.flow = self.scenario.flow or names[0]
        if self.flow not in names:
            raise ConfigurationError(f"flow {self.flow!r} is not in --app {self.opts.app!r} "
                                     f"(it has {', '.join(names)})")
        store = connect(self.site.db)
        self.client = Client(store, flows=flows)
        try:
            faults = [self.opts.only[i % len(self.opts.only)] for i in range(self.opts.runs)]
            first = [self._start(i, f) for i, f in enumerate(faults) if f != "crash"]
            self.plan = Plan(app=self.opts.app, db=self.site.db, workdir=str(self.site.workdir),
                             seed=self.opts.seed, faults={r.run_id: r.fault for r in first},
                             timeout_cap=self.opts.timeout_cap, lease_ttl=self.opts.lease_ttl,
                             environment=self.opts.environment,
                             secrets_env_prefix=self.opts.secrets_env_prefix)
            self.plan_file = self.site.workdir / "plan.json"
            self.plan.save(self.plan_file)
            if first:
                self.say(f"{len(first)} runs under {', '.join(sorted({r.fault for r in first}))}"
                         f" with {self.opts.workers} workers")
                for _ in range(self.opts.workers):
                    self._spawn()
                self._wait(first)
                self._stop_all()
            kills = 0
            crashed = [self._start(i, f) for i, f in enumerate(faults) if f == "crash"]
            if crashed:
                kills = self._crash(crashed)
            return build_report(
                self.client, first + crashed, seed=self.opts.seed,
                database=store.dialect, kills=kills,
                executions=Logbook(self.plan.executions),
                injections=Logbook(self.plan.injections),
                tenant_id=self.scenario.tenant_id)
        finally:
            self._stop_all()
            store.close()

    # -- starting runs ----------------------------------------------------------------------

    def _start(self, i: int, fault: Fault) -> DrillRun:
        """Start run ``i`` (made once, then delivered three times at once for the
        duplicates drill): by its intake event when the scenario gives one."""
        sc = self.scenario
        if sc.event is not None:
            if sc.routes is None:
                raise ConfigurationError("the scenario gives intake events but no routes")
            event, routes = sc.event(i), sc.routes

            def once() -> str:
                result = intake(self.client, event, routes)
                if result.run_id is None:
                    raise DrillError(f"intake ignored the scenario's event {i}: "
                                     f"{result.reason}")
                return result.run_id
        else:
            value = sc.input_for(i)
            run_id = str(uuid.uuid5(NAMESPACE, f"{self.opts.seed}:{i}"))

            def once() -> str:
                started, _ = self.client.start(
                    self.flow, value, tenant_id=sc.tenant_id, run_id=run_id,
                    idempotency_key=f"underway-drill:{self.opts.seed}:{i}")
                return started
        if fault != "duplicates":
            return DrillRun(i, fault, once())
        with ThreadPoolExecutor(DUPLICATE_STARTS) as pool:
            ids = list(pool.map(lambda _: once(), range(DUPLICATE_STARTS)))
        return DrillRun(i, fault, ids[0], tuple(ids))

    # -- workers ----------------------------------------------------------------------------

    def _spawn(self, crash_after: int | None = None) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH"))
                                            if p)
        if crash_after is not None:
            env |= {"UNDERWAY_CRASH_AFTER": str(crash_after),
                    "UNDERWAY_CRASH_POINTS": ",".join(CRASH_POINTS)}
        self.spawned += 1
        path = self.site.workdir / f"worker-{self.spawned}.log"
        log = path.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "underway.ops.drills._worker", str(self.plan_file)],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append((proc, log, path))
        return proc

    def _exited(self, proc: subprocess.Popen[bytes]) -> DrillError:
        path = next(p for q, _, p in self.procs if q is proc)
        tail = path.read_text(errors="replace")[-1500:].strip() or "(no output)"
        return DrillError(f"a drill worker exited with status {proc.returncode}:\n{tail}")

    def _stop_all(self) -> None:
        for proc, _, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log, _ in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
        self.procs.clear()

    def _all_settled(self, runs: list[DrillRun]) -> bool:
        return all(settled(self.client.state(r.run_id, tenant_id=self.scenario.tenant_id))
                   for r in runs)

    def _wait(self, runs: list[DrillRun], armed: subprocess.Popen[bytes] | None = None
              ) -> bool:
        """Wait until ``runs`` settle (True), ``armed`` exits, or the patience is spent."""
        while time.monotonic() < self.deadline:
            if self._all_settled(runs):
                return True
            if armed is not None and armed.poll() is not None:
                return False
            for proc, _, _ in self.procs:
                if proc is not armed and proc.poll() is not None:
                    raise self._exited(proc)
            time.sleep(0.2)
        return False

    def _crash(self, runs: list[DrillRun]) -> int:
        """Drive ``runs`` with workers killed at seeded fault points; return the kills."""
        rng = random.Random(self.opts.seed)
        budget, kills = max(2, 2 * len(runs)), 0
        self.say(f"{len(runs)} runs under crash: workers killed at up to {budget} seeded "
                 "fault points")
        while time.monotonic() < self.deadline and kills < budget:
            proc = self._spawn(crash_after=rng.randint(1, CRASH_WITHIN))
            if self._wait(runs, armed=proc):
                break
            if proc.returncode == -signal.SIGKILL:
                kills += 1
                self._stop_all()
            elif proc.poll() is not None:
                raise self._exited(proc)
        self._stop_all()
        if not self._all_settled(runs):
            self._spawn()
            self._wait(runs)
        self._stop_all()
        return kills


@contextmanager
def _environ(extra: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``extra`` added, restored afterwards."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
