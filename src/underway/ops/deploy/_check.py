"""``deploy check``: every unfinished run of a database against new code, before the code
is deployed — what a worker running it would stop on, found now."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ...effects import Tool
from ...engine import Registry
from ...errors import ConfigurationError
from ...flow import Flow
from ...journal import Journal
from ...journal.state import RunState
from ...store._offload import run_io
from ...store.base import RunRecord, Store
from ._rerun import rerun_step

UNFINISHED = ("ready", "waiting", "escalated", "dead")
"""The statuses of the runs a deploy check visits: every run that has not ended."""

BATCH = 500
"""Runs whose states are loaded together (checkpoints and tails in one query)."""


@dataclass(frozen=True, slots=True)
class Breakage:
    """An unfinished run the new code would break, and why: ``kind`` is ``flow`` (the
    flow is gone), ``step`` (its current step is gone, no alias leads anywhere), ``input``
    or ``state`` (no longer fits the model, after the model's upcasters), or — found by
    running its current step again against its journal — ``nondeterminism`` (a different
    call sequence), ``arguments`` (a call about to run again no longer fits its tool's
    argument model), ``result`` (a journaled result no longer fits the tool's result
    model), ``error`` or ``timeout`` (the step fails when run again)."""

    tenant_id: str
    run_id: str
    flow: str
    step: str | None
    status: str
    kind: str
    problem: str


STOPPED = ("dead", "escalated")
"""The statuses of runs that stopped before the deploy: judged apart (:class:`StoppedRun`)."""


@dataclass(frozen=True, slots=True)
class StoppedRun:
    """A run that had stopped already (dead or escalated), and what the new code would do
    with it: ``verdict`` ``resumes`` (a resume or resolution continues it under the new
    code; a dead run's failed calls run again, as on ``runs resume``) or ``stops again``
    (the new code stops it for the reason it stopped: the same exception, the same
    non-determinism). ``why`` says more. A stopped run the new code would break otherwise
    (a flow or step gone, other calls) is a :class:`Breakage`."""

    tenant_id: str
    run_id: str
    flow: str
    step: str | None
    status: str
    verdict: str
    why: str


@dataclass(slots=True)
class DeployReport:
    """What a deploy check found: how many unfinished runs it ``checked``, how many of
    them it ran a step of again (``rerun``: runs parked mid-step), the runs that would
    break, and per ``ctx.version`` change id how many unfinished runs are on its old path
    (``old_paths``: the old branch must stay until that is zero). Runs that had stopped
    already are judged apart: those the new code would not break are in ``stopped``."""

    checked: int = 0
    rerun: int = 0
    broken: list[Breakage] = field(default_factory=list)
    old_paths: Counter[str] = field(default_factory=Counter)
    stopped: list[StoppedRun] = field(default_factory=list)
    """The dead and escalated runs that would not break, each with its verdict."""

    @property
    def ok(self) -> bool:
        """True when no unfinished run would break."""
        return not self.broken


async def check_deploy(
    store: Store, flows: Iterable[Flow[Any, Any]], tools: Iterable[Tool] = (), *,
    tenants: Iterable[str] | None = None, batch: int = BATCH,
    progress: Callable[[int], None] | None = None,
) -> DeployReport:
    """Check every unfinished run of ``store`` against new code.

    A run passes when:

    - its flow and current step exist (an alias counts);
    - its input and state fit the new models, their ``mode="before"`` validators
      (upcasters) applied;
    - a run parked mid-step makes the same calls when its step is run again against its
      journal.

    It only reads. States come from checkpoints.

    Args:
        store: The store.
        flows: The new flows, as a worker would register them.
        tools: The new tools, as a worker would register them.
        tenants: The tenants to check; None means every tenant.
        batch: Runs checked at a time.
        progress: Told the number of runs checked after each batch.
    """
    registry = Registry()
    for f in flows:
        registry.register(f)
    for t in tools:
        registry.tools.setdefault(t.name, t)
    report = DeployReport()
    chosen = sorted(tenants) if tenants is not None else await run_io(store, store.tenants)
    for tenant_id in chosen:
        for status in UNFINISHED:
            after: tuple[float, str] | None = None
            while True:
                rows, states = await run_io(store, _page, store, tenant_id, status, batch,
                                            after)
                for row in rows:
                    state = states.get(row.run_id)
                    if state is None or state.final:
                        continue  # gone, or ended since it was listed
                    report.checked += 1
                    for change, patched in state.versions.items():
                        if not patched:
                            report.old_paths[change] += 1
                    found, raised = await _check(registry, row, state, report)
                    if state.status in STOPPED:
                        judged = _judge_stopped(state, found, raised)
                        if judged is not None:
                            report.stopped.append(judged)
                            continue
                    if found is not None:
                        report.broken.append(found)
                if progress is not None and rows:
                    progress(report.checked)
                if len(rows) < batch:
                    break
                after = (rows[-1].created_at, rows[-1].run_id)
    return report


def _page(
    store: Store, tenant_id: str, status: str, size: int, after: tuple[float, str] | None
) -> tuple[list[RunRecord], dict[str, RunState]]:
    """A page of the tenant's runs with ``status`` and their states, read in one trip
    (states from checkpoints, in batches)."""
    rows = store.list_runs(tenant_id, status=status, limit=size, after=after)
    return rows, Journal(store).load_many(tenant_id, [r.run_id for r in rows])


def _judge_stopped(s: RunState, found: Breakage | None,
                   raised: str | None) -> StoppedRun | None:
    """A stopped run's verdict; None when the new code would break it (a breakage)."""
    def verdict(v: str, why: str) -> StoppedRun:
        return StoppedRun(s.tenant_id, s.run_id, s.flow, s.step, s.status, v, why)

    if found is None:
        return verdict("resumes", "the new code continues it from its journal once it is "
                       + ("resumed (its failed calls run again)" if s.status == "dead"
                          else "resolved"))
    esc = s.escalation
    same = (
        found.kind == "error" and s.status == "dead" and raised is not None
        and (s.error or "").startswith(f"{raised}:")
    ) or (
        found.kind == "nondeterminism" and esc is not None
        and (esc.cause == "nondeterminism" or esc.index is not None)
    )
    return verdict("stops again", f"{s.error or (esc.reason if esc else '')} "
                   f"(as it stopped before: {found.problem})") if same else None


async def _check(
    registry: Registry, row: RunRecord, s: RunState, report: DeployReport
) -> tuple[Breakage | None, str | None]:
    """The run's breakage (None: none) and, when its step raised, the exception's type."""
    def broken(kind: str, problem: str) -> tuple[Breakage, None]:
        return Breakage(s.tenant_id, s.run_id, s.flow, s.step, s.status, kind, problem), None

    flow = registry.flows.get(s.flow)
    if flow is None:
        return broken("flow", f"flow {s.flow!r} is not in the new code; known: "
                              f"{sorted(registry.flows)}")
    if not s.input_checked:
        try:
            flow.parse_input(s.input)
        except ConfigurationError as exc:
            return broken("input", str(exc))
        return None, None
    try:
        flow.input_type.model_validate(s.input)
    except ValueError as exc:
        return broken("input", f"the run's input no longer fits "
                               f"{flow.input_type.__name__}: {str(exc).splitlines()[0]}")
    try:
        flow.parse_state(s.state)
    except ConfigurationError as exc:
        return broken("state", str(exc))
    if s.step is None:
        return None, None
    if not flow.has_step(s.step):
        return broken("step", f"step {s.step!r} is not in the new code (no step or alias of "
                              f"that name; steps: {sorted(flow.steps)}): give it an alias "
                              "(flow.alias) or keep the step until no run is parked there")
    if not (s.calls or s.values):
        return None, None  # at a step boundary: the step starts afresh under the new code
    report.rerun += 1
    found = await rerun_step(flow, s, registry, resumed=s.status == "dead")
    if found.ok:
        return None, None
    return broken(found.kind, found.problem)[0], found.error_type
