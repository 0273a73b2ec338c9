"""Journals written straight into a store, event by event, for the evaluation and drift
tests: an agent's runs whose behaviour (tool errors, timeouts, schema failures, policy
denials and holds, tool choices, tokens and cost) is set exactly, so a test can shift one
of them and nothing else; and runs that break what the runtime never breaks (an effect
run twice, a denied call run anyway) to show the evaluation would see it.

Outcomes are spread by a Weyl sequence rather than drawn at random: a rate of 5 % gives one
call in twenty in any stretch of calls, so two periods with the same behaviour count the
same rates and a shift is all that differs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from underway import events as ev
from underway.events import genesis_hash
from underway.journal import Journal
from underway.store import AppendBatch, NewRun, RunUpdate, Store

GOLDEN = (math.sqrt(5) - 1) / 2
STEPS = (GOLDEN, math.sqrt(2) - 1, math.sqrt(3) - 1, math.sqrt(7) - 2)
"""The steps of the Weyl sequences that spread outcomes evenly, one per dimension (tool
choice, policy decision, outcome): rationally independent, so the dimensions are too."""


@dataclass(frozen=True)
class Behaviour:
    """How the seeded agent behaves: per call, the share of policy denials and holds, of
    schema failures, timeouts and errors; the tools the model chooses, by weight; the
    tokens and cost of each model call."""

    deny: float = 0.04
    hold: float = 0.06
    schema: float = 0.02
    timeout: float = 0.02
    error: float = 0.06
    choices: tuple[tuple[str, float], ...] = (("lookup", 0.5), ("send", 0.3),
                                              ("refund", 0.2))
    tokens: int = 1_000
    cost: float = 0.002
    calls: int = 6

    def shifted(self, **changes: object) -> Behaviour:
        """This behaviour with ``changes``."""
        return replace(self, **changes)  # type: ignore[arg-type]


SHIFTS: dict[str, dict[str, object]] = {
    "tool_error_rate": {"error": 0.25},
    "tool_timeout_rate": {"timeout": 0.12},
    "schema_failure_rate": {"schema": 0.12},
    "policy_denial_rate": {"deny": 0.2},
    "approval_rate": {"hold": 0.25},
    "tool_choice": {"choices": (("lookup", 0.1), ("send", 0.3), ("refund", 0.6))},
    "tokens_per_task": {"tokens": 1_800},
    "cost_per_task": {"cost": 0.004},
}
"""A shift of each drift metric, and nothing else."""


@dataclass
class Seeder:
    """Writes runs of one tenant into ``store``; ``n`` counts the calls made so far (the
    position in the sequences that spread outcomes)."""

    store: Store
    tenant_id: str = "default"
    flow: str = "agent"
    n: int = 0
    runs: list[str] = field(default_factory=list)

    def agent_run(self, start: float, b: Behaviour, *, spacing: float = 10.0) -> str:
        """An agent run starting at ``start``: ``b.calls`` turns, each a model call, a
        choice of tool and that call through the guard, then completed."""
        run_id = f"{self.flow}-{len(self.runs):05d}"
        t = start
        events: list[tuple[float, ev.RunEvent]] = [(t, ev.RunStarted(
            flow=self.flow, input={"ticket": run_id}, state={}, first_step="act"))]
        names = [name for name, _ in b.choices]
        weights = [w for _, w in b.choices]
        # The run's tokens vary a little around the behaviour's, evenly.
        tokens = int(b.tokens * (0.9 + 0.2 * ((len(self.runs) * GOLDEN) % 1)))
        for turn in range(b.calls):
            t += spacing
            self.n += 1
            key = f"{run_id}:{turn}:act:1"
            events += [
                (t, ev.StepStarted(step="act")),
                (t, ev.ModelResponded(
                    key=f"{run_id}:{turn}:act:0", index=0, model="seed-model",
                    request={"turn": turn}, response={"tool": "?"}, tokens_in=tokens,
                    tokens_out=tokens // 10, cost_usd=b.cost, latency_ms=40.0)),
            ]
            tool = _pick(names, weights, self._u(1))
            events.append((t, ev.ToolSelected(tool=tool, args={"turn": turn})))
            events += self._call(t, key, tool, b)
            events.append((t, ev.StepCompleted(step="act", next="act", patch=[])))
        events.append((t + 1, ev.RunCompleted(result={"turns": b.calls})))
        self.write(run_id, events)
        return run_id

    def _u(self, dimension: int) -> float:
        """The ``n``-th point of the sequence of one dimension, in [0, 1)."""
        return (self.n * STEPS[dimension]) % 1

    def _call(self, t: float, key: str, tool: str, b: Behaviour) -> list[
            tuple[float, ev.RunEvent]]:
        common = {"key": key, "tool": tool, "index": 1}
        u = self._u(2)
        decision = "deny" if u < b.deny else "require_approval" if u < b.deny + b.hold \
            else "allow"
        out: list[tuple[float, ev.RunEvent]] = [(t, ev.PolicyDecided(
            **common, args_hash="h", decision=decision,  # type: ignore[arg-type]
            rule_id=None if decision == "allow" else f"rule-{decision}",
            policy_version="v1"))]
        if decision == "deny":
            return [*out, (t, ev.ToolRefused(**common, args_hash="h", cause="policy_denied",
                                             reason="denied"))]
        if decision == "require_approval":
            request = f"{key}#1"
            out += [
                (t, ev.ApprovalRequested(request_id=request, **common, args={}, args_hash="h",
                                         expires_at=t + 3600, rule_id="rule-hold")),
                (t + 5, ev.ApprovalGranted(request_id=request, approver_id="fin",
                                           decision={"decision": "approve"})),
            ]
        v = self._u(3)
        if v < b.schema:
            return [*out, (t, ev.SchemaValidationFailed(**common, where="args", errors=[]))]
        out.append((t, ev.ToolStarted(**common, args={}, args_hash="h")))
        if v < b.schema + b.timeout:
            out.append((t, ev.ToolTimedOut(**common, args_hash="h", timeout_s=30)))
        elif v < b.schema + b.timeout + b.error:
            out.append((t, ev.ToolFailed(**common, args_hash="h", error_type="Unavailable",
                                         message="try later", latency_ms=12.0)))
        else:
            out.append((t, ev.ToolSucceeded(**common, args_hash="h", result={"ok": True},
                                            latency_ms=25.0)))
        return out

    def write(self, run_id: str, events: Sequence[tuple[float, ev.RunEvent]], *,
              status: str = "completed") -> None:
        """Store ``events`` (the first a ``RunStarted``) as run ``run_id``: created with
        its first event, the rest appended under a lease, its row left with ``status``."""
        journal = Journal(self.store)
        first_at = events[0][0]
        blobs: dict[str, bytes] = {}
        first = journal.encode(self.tenant_id, run_id, [(1, first_at, events[0][1])],
                               genesis_hash(self.tenant_id, run_id), blobs)
        self.store.create_run(NewRun(
            tenant_id=self.tenant_id, run_id=run_id, flow=self.flow, idempotency_key=None,
            first_event=first[0], blobs=blobs, step="act", now=first_at,
            next_wake_at=first_at))
        self.runs.append(run_id)
        if len(events) == 1:
            return
        (lease,) = self.store.claim(owner="seeder", now=first_at, ttl=60.0,
                                    tenant_id=self.tenant_id, run_id=run_id)
        blobs = {}
        rest = journal.encode(self.tenant_id, run_id,
                              [(seq, at, e) for seq, (at, e) in enumerate(events[1:], 2)],
                              first[0].hash, blobs)
        last_at = events[-1][0]
        self.store.append(AppendBatch(
            tenant_id=self.tenant_id, run_id=run_id, expected_seq=1, fence=lease.token,
            events=rest, now=last_at, update=RunUpdate(status, None, None), blobs=blobs,
            release=True))


def _pick(names: list[str], weights: list[float], u: float) -> str:
    total = sum(weights)
    acc = 0.0
    for name, w in zip(names, weights, strict=True):
        acc += w / total
        if u < acc:
            return name
    return names[-1]


def seed_periods(seeder: Seeder, *, until: float, baseline: Behaviour, window: Behaviour,
                 baseline_runs: int = 80, window_runs: int = 40, days: int = 30) -> None:
    """Runs over the ``days`` before the last day before ``until`` behaving as
    ``baseline``, and runs over that last day behaving as ``window``."""
    window_start = until - 86_400
    start = window_start - days * 86_400
    for i in range(baseline_runs):
        seeder.agent_run(start + (i + 0.5) * (days * 86_400 / baseline_runs), baseline)
    for i in range(window_runs):
        seeder.agent_run(window_start + (i + 0.5) * (80_000 / window_runs), window)
