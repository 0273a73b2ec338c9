"""What a drill found, read from the journals (the ledger), the log of effects executed
and the log of faults injected: never from what the workers printed."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from ... import events as ev
from ...client import Client
from ...http import SAFE_METHODS
from ...journal.attempts import Attempts
from ...journal.state import APPROVAL_SIGNAL, RunState
from ._inject import Logbook
from ._plan import FAULTS, Fault

BROKEN = {"truncated": "a truncated answer", "missing_field": "an answer missing a field",
          "error_body": "an error body under a success status"}
NOT_EXERCISED = {
    "credentials": "no call of a tool that declares secrets",
    "partial": "no call answered with JSON through underway.http",
    "slow": "no tool call",
}
"""Why a fault met nothing to act on, when it injected nothing."""

Verdict = Literal["completed", "failed", "escalated", "waiting", "unfinished"]


@dataclass(frozen=True)
class DrillRun:
    """One run the drill started, with the fault it got; ``run_ids``: what each start (or
    intake delivery) answered — more than one distinct id is a duplicate."""

    index: int
    fault: Fault
    run_id: str
    run_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    """A duplicate effect or run, or a failure nobody was told of."""

    kind: Literal["duplicate", "silent"]
    fault: str
    run_id: str
    detail: str


@dataclass
class FaultReport:
    """What one fault did to its runs, and what the flow did about it."""

    fault: Fault
    runs: int = 0
    injected: int = 0
    """Faults injected: calls given a fault, kills, or extra deliveries."""
    verdicts: Counter[str] = field(default_factory=Counter)
    """The runs' ends: completed, failed, escalated (waiting for a person), waiting,
    unfinished."""
    reactions: Counter[str] = field(default_factory=Counter)
    """What the flow did about each injected fault (per call, or per run)."""
    duplicates: int = 0
    silent: int = 0


@dataclass
class DrillReport:
    """The whole drill: per fault, the totals, and every finding. ``ok`` when there is no
    duplicate and no silent failure."""

    seed: int
    database: str
    faults: list[FaultReport]
    findings: list[Finding]
    kills: int = 0
    scratch: str | None = None
    """The scratch database and directory, when kept (``--keep``)."""

    def total(self, verdict: Verdict) -> int:
        """How many runs ended as ``verdict``."""
        return sum(f.verdicts[verdict] for f in self.faults)

    @property
    def started(self) -> int:
        """Runs started."""
        return sum(f.runs for f in self.faults)

    @property
    def duplicates(self) -> int:
        """Effects executed more than once per the ledger, and duplicate runs."""
        return sum(1 for f in self.findings if f.kind == "duplicate")

    @property
    def silent(self) -> int:
        """Failures nobody was told of."""
        return sum(1 for f in self.findings if f.kind == "silent")

    @property
    def ok(self) -> bool:
        """No duplicate, no silent failure."""
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        """The report as JSON (``underway drill --json``)."""
        return {
            "ok": self.ok, "seed": self.seed, "database": self.database,
            "runs": {"started": self.started, **{v: self.total(v) for v in (
                "completed", "failed", "escalated", "waiting", "unfinished")}},
            "duplicates": self.duplicates, "silent_failures": self.silent,
            "escalations": self.total("escalated"), "failures": self.total("failed"),
            "kills": self.kills,
            "faults": [{
                "fault": f.fault, "runs": f.runs, "injected": f.injected,
                "verdicts": dict(f.verdicts), "reactions": dict(f.reactions),
                "duplicates": f.duplicates, "silent_failures": f.silent,
            } for f in self.faults],
            "findings": [{"kind": x.kind, "fault": x.fault, "run_id": x.run_id,
                          "detail": x.detail} for x in self.findings],
            **({"scratch": self.scratch} if self.scratch else {}),
        }


def verdict(s: RunState) -> Verdict:
    """How a run stands at the end of a drill."""
    if s.status == "completed":
        return "completed"
    if s.status in ("failed", "cancelled", "dead"):
        return "failed"
    if s.status == "escalated" or (s.status == "waiting" and (
            s.pending_approval is not None or s.waiting_signal == APPROVAL_SIGNAL)):
        return "escalated"
    return "waiting" if s.status == "waiting" else "unfinished"


def settled(s: RunState) -> bool:
    """True when the run needs no worker now: ended, or waiting for a person."""
    return verdict(s) in ("completed", "failed", "escalated")


class _Journal:
    """One run's events, with the ones of each call by key."""

    def __init__(self, events: list[ev.Event]) -> None:
        self.events = events
        self.by_key: dict[str, list[ev.Event]] = defaultdict(list)
        for e in events:
            key = getattr(e, "key", None)
            if isinstance(key, str):
                self.by_key[key].append(e)

    def has(self, key: str, *kinds: type[ev.Event]) -> bool:
        return any(isinstance(e, kinds) for e in self.by_key.get(key, ()))

    def succeeded(self, key: str, *, reconciled: bool | None = None) -> bool:
        return any(isinstance(e, ev.ToolSucceeded) and (reconciled is None
                                                       or e.reconciled == reconciled)
                   for e in self.by_key.get(key, ()))

    def result(self, key: str) -> Any:
        """The result call ``key`` succeeded with (None: none)."""
        return next((e.result for e in self.by_key.get(key, ())
                     if isinstance(e, ev.ToolSucceeded)), None)

    def reactions(self) -> Counter[str]:
        """What the flow did, counted from its events."""
        out: Counter[str] = Counter()
        attempts = Attempts()
        for e in self.events:
            again = attempts.see(type(e).__name__)
            match e:
                case ev.StepStarted() if again:
                    out["step taken over and run again from the journal"] += 1
                case ev.RetryScheduled():
                    out["retried with the same key"] += 1
                case ev.ToolSucceeded(reconciled=True):
                    out["reconciled: it had happened"] += 1
                case ev.ToolReconciled():
                    out["reconciled: it had not happened, ran again"] += 1
                case ev.Escalated():
                    out[f"escalated ({e.cause})"] += 1
                case ev.ApprovalRequested():
                    out["asked for approval"] += 1
                case ev.RunDeadLettered():
                    out["dead-lettered"] += 1
        return out


def _from_whole(result: Any, whole: Any) -> bool:
    """Whether ``result`` holds only what the whole answer said: every field it has, the
    whole answer has with the same value."""
    if not isinstance(result, dict) or not isinstance(whole, dict) or not result:
        return False
    return all(k in whole and whole[k] == v for k, v in result.items())


def _call_verdict(fault: Fault, key: str, j: _Journal, notes: list[dict[str, Any]]
                  ) -> tuple[str, str | None]:
    """What the flow did with the fault injected into call ``key``: ``(verdict, silent
    failure or None)``."""
    if j.succeeded(key, reconciled=True):
        return "reconciled", None
    if j.has(key, ev.Escalated):
        cause = next(e.cause for e in j.by_key[key] if isinstance(e, ev.Escalated))
        return f"escalated ({cause})", None
    retried = j.has(key, ev.RetryScheduled)
    ok = j.succeeded(key)
    failed = j.has(key, ev.ToolFailed, ev.SchemaValidationFailed, ev.ToolRefused)
    if fault == "credentials":
        if not any(n["action"] == "rejected" for n in notes):
            return "not exercised (the expired credential never went through " \
                   "underway.http)", None
        if retried and ok:
            return "refreshed and retried", None
        if ok:
            return "SILENT", "succeeded although the service refused its credentials"
        return ("failed without a refresh" if failed else "unsettled"), None
    if retried:
        return ("retried with the same key" if ok else "retrying"), None
    if fault == "partial":
        corrupted = next(n for n in notes if n["action"] == "corrupted")
        kind, method = corrupted["kind"], corrupted["method"]
        if ok and kind == "missing_field":
            return "accepted (a field was missing)", None
        if ok and _from_whole(j.result(key), corrupted.get("whole")):
            # The attempt that met the broken answer never committed (its worker lost the
            # run, as under load); a later attempt took the whole one.
            return "retried with the same key", None
        if ok:
            return "SILENT", f"took {BROKEN[kind]} for a success"
        if failed and method not in SAFE_METHODS:
            return "SILENT", (f"the service acted on {method} but the ledger records the "
                              f"call as failed ({BROKEN[kind]}): the effect is lost to the "
                              "run; read answers with Response.expect, which makes it an "
                              "unknown outcome settled by the key")
        return ("failed loudly" if failed else "outcome unknown"), None
    # slow
    if j.has(key, ev.ToolTimedOut):
        return "timed out (journaled), the step got the error", None
    return ("succeeded" if ok else "unsettled"), None


def build_report(
    client: Client, runs: list[DrillRun], *, seed: int, database: str, kills: int,
    executions: Logbook, injections: Logbook, tenant_id: str = "default",
) -> DrillReport:
    """Read every run's journal and the drill's logs into a :class:`DrillReport`."""
    used = {r.fault for r in runs}
    by_fault: dict[str, FaultReport] = {f: FaultReport(f) for f in FAULTS if f in used}
    findings: list[Finding] = []
    notes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for note in injections.read():
        notes[note["key"]].append(note)
    fault_of = {r.run_id: r.fault for r in runs}
    for r in runs:
        report = by_fault[r.fault]
        report.runs += 1
        state = client.state(r.run_id, tenant_id=tenant_id)
        v = verdict(state)
        report.verdicts[v] += 1
        j = _Journal([rec.event for rec in client.history(r.run_id, tenant_id=tenant_id)])
        if v == "unfinished":
            findings.append(Finding("silent", r.fault, r.run_id, (
                f"the run is {state.status} and made no progress before the drill ended; "
                "nobody was told")))
        if r.fault == "duplicates":
            report.injected += max(0, len(r.run_ids) - 1)
            made = len(set(r.run_ids))
            report.reactions[f"{len(r.run_ids)} starts made {made} run"
                             + ("s" if made != 1 else "")] += 1
            if made > 1:
                findings.append(Finding("duplicate", r.fault, r.run_id, (
                    f"{len(r.run_ids)} starts with one idempotency key made {made} runs: "
                    f"{', '.join(sorted(set(r.run_ids)))}")))
        elif r.fault == "crash":
            report.reactions.update(j.reactions())
        else:
            for key, n in notes.items():
                if n[0]["run"] != r.run_id or not any(
                        x["fault"] == r.fault and x["action"] in ("expired", "corrupted",
                                                                  "delayed") for x in n):
                    continue
                report.injected += 1
                said, silent = _call_verdict(r.fault, key, j, n)
                if silent is not None:
                    findings.append(Finding("silent", r.fault, r.run_id,
                                            f"call {key}: {silent}"))
                    said = "silent failure"
                report.reactions[said] += 1
        findings.extend(_ledger_duplicates(r, j))
    findings.extend(_executed_twice(executions, fault_of))
    if "crash" in by_fault:
        by_fault["crash"].injected = kills
    for name, why in NOT_EXERCISED.items():
        if name in by_fault and not by_fault[name].injected:
            by_fault[name].reactions[f"not exercised: {why}"] = by_fault[name].runs
    for f in findings:
        if f.fault in by_fault:
            target = by_fault[f.fault]
            if f.kind == "duplicate":
                target.duplicates += 1
            else:
                target.silent += 1
    return DrillReport(seed, database, list(by_fault.values()), findings, kills)


def _ledger_duplicates(r: DrillRun, j: _Journal) -> list[Finding]:
    """Calls the ledger says succeeded twice by running (not by reconciling)."""
    out = []
    for key, events in j.by_key.items():
        ran = [e for e in events if isinstance(e, ev.ToolSucceeded) and not e.reconciled]
        if len(ran) > 1:
            out.append(Finding("duplicate", r.fault, r.run_id, (
                f"the ledger records {len(ran)} executions of {ran[0].tool} with key {key}")))
    return out


def _executed_twice(executions: Logbook, fault_of: dict[str, Fault]) -> list[Finding]:
    """Effects of tools that are not idempotent executed more than once with one key (an
    idempotent tool may be: its service deduplicates by the key)."""
    runs: Counter[tuple[str, str, str]] = Counter()
    for x in executions.read():
        if not x["idempotent"]:
            runs[(x["run"], x["key"], x["tool"])] += 1
    return [Finding("duplicate", fault_of.get(run, "a child run"), run,
                    f"{tool} (not idempotent) was executed {n} times with key {key}")
            for (run, key, tool), n in sorted(runs.items()) if n > 1]
