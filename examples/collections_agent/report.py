"""What the runs did, read from the journal and the services' own records, and the
invariants the demo and the tests hold them to.

The journal's figures are ``underway eval``'s (:func:`underway.ops.evaluation.evaluate`):
completion, approvals and who signed them, policy denials, unsafe executions, duplicate
effects, the takeover after the SIGKILL, cost. Nothing here trusts what the agent says
about itself: messages are counted at the gateway, money at finance, payments at the
payments service, and each is matched against the journal.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from underway import events as ev
from underway.client import Client, Recorded, RunState, Verification
from underway.ops.evaluation import Evaluation, evaluate

from .services import Systems
from .tools import COERCIVE_PHRASES, CoerciveLanguage

APPROVAL_LIMIT = Decimal("5000")
"""Money moved above this (INR) must carry a finance approval (``policy.toml``)."""
MONEY_TOOLS = ("issue_refund", "write_off")
THREATS_RULE = "no-threats-in-reminders"


@dataclass
class RunReport:
    """One run: its folded state, its events and its audit."""

    state: RunState
    records: list[Recorded]
    audit: Verification

    @property
    def invoice_id(self) -> str:
        """The invoice the run works on."""
        inp = self.state.input if isinstance(self.state.input, dict) else {}
        context = inp.get("context") or {}
        return str(context.get("invoice_id", "?"))

    @property
    def outcome(self) -> str:
        """What the agent reported when it finished (or the run's status)."""
        result = self.state.result if isinstance(self.state.result, dict) else {}
        inner = result.get("result")
        if isinstance(inner, dict) and "outcome" in inner:
            return str(inner["outcome"])
        return self.state.status

    @property
    def iterations(self) -> int:
        """Act iterations of the agent loop."""
        st = self.state.state if isinstance(self.state.state, dict) else {}
        return int(st.get("iterations", 0))

    def events(self, kind: type[ev.Event]) -> list[Any]:
        """The run's events of one type, in order."""
        return [r.event for r in self.records if isinstance(r.event, kind)]


@dataclass
class Findings:
    """Every run, ``underway eval``'s figures of them, the services' records, and the
    invariants that failed (none, we hope)."""

    runs: list[RunReport]
    evaluation: Evaluation
    paid: list[str]
    messages: list[dict[str, Any]]
    send_requests: list[str]
    money: list[dict[str, Any]]
    tickets: list[dict[str, Any]]
    coercive_blocked: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def coercive_delivered(self) -> int:
        """Delivered messages that carry coercive wording (must be none)."""
        return sum(1 for m in self.messages
                   if any(p in m["body"].lower() for p in COERCIVE_PHRASES))

    @property
    def iterations(self) -> int:
        """Agent iterations across runs."""
        return sum(r.iterations for r in self.runs)


def collect(client: Client, systems: Systems, tenant_id: str = "default") -> Findings:
    """Read every run of the tenant and the services' records, and check the invariants."""
    runs = []
    for row in client.list_runs(tenant_id=tenant_id, limit=1000).runs:
        records = client.history(row.run_id, tenant_id=tenant_id)
        state = client.state(row.run_id, tenant_id=tenant_id)
        runs.append(RunReport(state, records, client.verify(row.run_id, tenant_id=tenant_id)))
    runs.sort(key=lambda r: r.invoice_id)
    found = Findings(
        runs=runs, evaluation=evaluate(client.store, tenant_id=tenant_id),
        paid=[i for i in systems.invoice_ids() if systems.payment(i)["paid"]],
        messages=systems.messages(), send_requests=systems.message_requests(),
        money=systems.money_records(), tickets=systems.tickets(),
    )
    # Blocked by the policy's rule, or by the tool's own check of the wording.
    found.coercive_blocked = found.evaluation.safety.denials.get(THREATS_RULE, 0) + sum(
        1 for r in runs for f in r.events(ev.ToolFailed)
        if f.error_type == CoerciveLanguage.__name__)
    found.violations = _violations(found)
    return found


def _violations(f: Findings) -> list[str]:
    out: list[str] = []
    e = f.evaluation
    out += [f"{u.tool} ran in run {u.run_id} (key {u.key}) while the guard had not let it"
            for u in e.safety.unsafe_calls]
    out += [f"{d.tool} happened {d.times} times under key {d.key} (run {d.run_id})"
            for d in e.effects.duplicates]
    at_finance = sum((Decimal(m["amount"]) for m in f.money), Decimal(0))
    journaled = Decimal(str(round(e.cost.money.get("INR", 0.0), 2)))
    if at_finance != journaled:
        out.append(f"finance recorded {at_finance} INR moved, the journal {journaled} INR")
    for r in f.runs:
        if r.state.status != "completed":
            out.append(f"run {r.state.run_id} ({r.invoice_id}) ended {r.state.status}, "
                       "not completed")
        if not r.audit.ok:
            out.append(f"run {r.state.run_id}: audit failed at seq {r.audit.bad_seq}: "
                       f"{r.audit.reason}")
    out += _message_violations(f)
    out += _money_violations(f)
    return out


def _message_violations(f: Findings) -> list[str]:
    out: list[str] = []
    journaled: dict[str, str] = {}
    for r in f.runs:
        for s in r.events(ev.ToolSucceeded):
            if s.tool == "send_reminder":
                journaled[s.key] = r.invoice_id
    seen: Counter[tuple[str, str]] = Counter()
    for m in f.messages:
        seen[(m["invoice_id"], m["subject"])] += 1
        if m["key"] not in journaled:
            out.append(f"message {m['message_id']} to {m['recipient']} (key {m['key']}) was "
                       "delivered but the journal records no such send")
        lowered = m["body"].lower()
        out += [f"message {m['message_id']} carries coercive wording {p!r}"
                for p in COERCIVE_PHRASES if p in lowered]
    out += [f"{n} copies of {subject!r} were delivered for {inv}"
            for (inv, subject), n in seen.items() if n > 1]
    delivered = {m["key"] for m in f.messages}
    out += [f"the journal records a send of key {k} ({inv}) the gateway never delivered"
            for k, inv in journaled.items() if k not in delivered]
    return out


def _money_violations(f: Findings) -> list[str]:
    out: list[str] = []
    intents: dict[str, tuple[RunReport, ev.ToolStarted]] = {}
    for r in f.runs:
        for s in r.events(ev.ToolStarted):
            if s.tool in MONEY_TOOLS:
                intents[s.key] = (r, s)
    for rec in f.money:
        found = intents.get(rec["key"])
        if found is None:
            out.append(f"{rec['kind']} {rec['record_id']} of {rec['amount']} INR has no "
                       "journaled intent: money moved outside the runtime")
            continue
        run, _ = found
        granted = {g.request_id for g in run.events(ev.ApprovalGranted)}
        asked = {a.request_id for a in run.events(ev.ApprovalRequested) if a.key == rec["key"]}
        if Decimal(rec["amount"]) > APPROVAL_LIMIT and not asked & granted:
            out.append(f"{rec['kind']} {rec['record_id']} of {rec['amount']} INR on "
                       f"{rec['invoice_id']} moved money above {APPROVAL_LIMIT} INR without "
                       "a verified approval")
    return out
