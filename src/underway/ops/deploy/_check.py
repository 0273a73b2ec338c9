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


@dataclass(slots=True)
class DeployReport:
    """What a deploy check found: how many unfinished runs it ``checked``, how many of
    them it ran a step of again (``rerun``: runs parked mid-step), the runs that would
    break, and per ``ctx.version`` change id how many unfinished runs are on its old path
    (``old_paths``: the old branch must stay until that is zero)."""

    checked: int = 0
    rerun: int = 0
    broken: list[Breakage] = field(default_factory=list)
    old_paths: Counter[str] = field(default_factory=Counter)

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
                    found = await _check(registry, row, state, report)
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


async def _check(
    registry: Registry, row: RunRecord, s: RunState, report: DeployReport
) -> Breakage | None:
    def broken(kind: str, problem: str) -> Breakage:
        return Breakage(s.tenant_id, s.run_id, s.flow, s.step, s.status, kind, problem)

    flow = registry.flows.get(s.flow)
    if flow is None:
        return broken("flow", f"flow {s.flow!r} is not in the new code; known: "
                              f"{sorted(registry.flows)}")
    if not s.input_checked:
        try:
            flow.parse_input(s.input)
        except ConfigurationError as exc:
            return broken("input", str(exc))
        return None
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
        return None
    if not flow.has_step(s.step):
        return broken("step", f"step {s.step!r} is not in the new code (no step or alias of "
                              f"that name; steps: {sorted(flow.steps)}): give it an alias "
                              "(flow.alias) or keep the step until no run is parked there")
    if not (s.calls or s.values):
        return None  # at a step boundary: the step starts afresh under the new code
    report.rerun += 1
    found = await rerun_step(flow, s, registry)
    return None if found.ok else broken(found.kind, found.problem)
