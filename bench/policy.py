"""``Policy.evaluate`` for a 50-rule policy: microseconds per call, median of many batches.

The engine evaluates the policy before every tool call, so its cost is paid on every call.
Two figures: a realistic policy where most rules name the tools they govern (the policy
considers only the rules that can apply to the tool), and a worst case where no rule names
a tool, so all 50 are checked for every call and none matches early.
"""

from __future__ import annotations

import time
from decimal import Decimal

from common import Figure, median
from underway.guard.policy import (
    Amount,
    AmountCondition,
    ArgCondition,
    CounterCondition,
    Policy,
    PolicyContext,
    Rule,
)

TARGET_US = 20.0
"""A realistic 50-rule policy: small beside the journal commit a mutating call makes."""
WORST_TARGET_US = 100.0
"""Every rule checked on every call: still a small share of a call's millisecond commit."""
ROLES = ("agent", "support", "finance_manager", "admin")
ENVIRONMENTS = ("dev", "staging", "prod")


def realistic_policy() -> Policy:
    """50 rules in the shape of a real deployment: per-tool rules, globs, a few global."""
    rules: list[Rule] = []
    for i in range(30):
        rules.append(Rule(
            f"tool-{i}", outcome="allow" if i % 3 else "require_approval",
            tools=[f"tool_{i}"], roles_any=[ROLES[i % 4]], environments=["prod"],
            **({"approver_role": "admin"} if i % 3 == 0 else {}),
        ))
    for i in range(8):
        rules.append(Rule(
            f"family-{i}", outcome="allow", tools=[f"family_{i}_*"],
            args=[ArgCondition("customer.tier", "in", ["gold", "silver"])],
        ))
    rules += [
        Rule("refunds-staff", outcome="allow", tools=["issue_refund"],
             roles_any=["support", "finance_manager", "admin"]),
        Rule("refunds-big", outcome="require_approval", tools=["issue_refund"],
             approver_role="finance_manager",
             amount=AmountCondition(">", Decimal(10000), "INR")),
        Rule("refunds-cap", outcome="deny", tools=["issue_refund"], environments=["prod"],
             amount=AmountCondition(">=", Decimal(250000), "INR")),
        Rule("refunds-fraud", outcome="require_approval", tools=["issue_refund"],
             approver_role="finance_manager",
             args=[ArgCondition("note.text", "matches", r"(?i)\bfraud\b")]),
        Rule("refunds-daily", outcome="deny", tools=["issue_refund"],
             counters=[CounterCondition("tenant.calls.issue_refund.today", ">=", 200)]),
        Rule("untrusted", outcome="require_approval", mutating=True,
             labels_any=["untrusted"], approver_role="support"),
        Rule("personal", outcome="deny", labels_any=["personal"], roles_none=["admin"]),
        Rule("messages-daily", outcome="deny", tools=["send_*"],
             counters=[CounterCondition("tenant.messages.today", ">=", 1000)]),
        Rule("run-calls", outcome="deny",
             counters=[CounterCondition("run.tool_calls", ">", 500)]),
        Rule("night-freeze", outcome="deny", environments=["prod"], irreversible=True,
             args=[ArgCondition("schedule", "==", "night")]),
        Rule("tenant-trial", outcome="deny", tenants=["trial-1", "trial-2"], mutating=True),
        Rule("readonly", outcome="allow", mutating=False),
    ]
    assert len(rules) == 50
    return Policy("bench-1", rules)


def worst_case_policy() -> Policy:
    """50 rules that apply to every tool and fail only on their last conditions."""
    rules = [
        Rule(f"generic-{i}", outcome="deny", environments=list(ENVIRONMENTS),
             roles_none=["nobody"], amount=AmountCondition(">", Decimal(10**9 + i), "INR"))
        for i in range(25)
    ] + [
        Rule(f"generic-args-{i}", outcome="require_approval", mutating=True,
             args=[ArgCondition("amount", ">", 10**9 + i)], approver_role="admin")
        for i in range(25)
    ]
    return Policy("bench-worst", rules)


def contexts() -> list[PolicyContext]:
    """A mix of calls: refunds of several sizes, reminders, lookups, per-tool calls."""
    out = []
    for i in range(24):
        tool = ("issue_refund", "send_reminder", "lookup_invoice", f"tool_{i}",
                f"family_{i % 8}_sync")[i % 5]
        out.append(PolicyContext(
            tenant_id="acme", principal=f"user-{i}", roles=frozenset([ROLES[i % 4]]),
            environment=ENVIRONMENTS[i % 3], flow="invoice_followup", tool=tool,
            mutating=tool != "lookup_invoice", irreversible=tool == "issue_refund",
            permissions=frozenset(), args={
                "amount": 500 * (i + 1), "customer": {"tier": "gold"},
                "note": {"text": "duplicate charge"},
            },
            labels=frozenset(["untrusted"] if i % 7 == 0 else []),
            amount=Amount(Decimal(500 * (i + 1) * 40), "INR") if tool == "issue_refund" else None,
            counters={"run.tool_calls": float(i), "tenant.messages.today": 3.0},
        ))
    return out


def per_call_us(policy: Policy, ctxs: list[PolicyContext], *, batches: int,
                per_batch: int) -> float:
    """Median over ``batches`` of the mean microseconds per evaluation."""
    evaluate = policy.evaluate
    for ctx in ctxs:
        evaluate(ctx)
    rounds = max(1, per_batch // len(ctxs))
    samples = []
    for _ in range(batches):
        began = time.perf_counter()
        for _ in range(rounds):
            for ctx in ctxs:
                evaluate(ctx)
        samples.append((time.perf_counter() - began) / (rounds * len(ctxs)) * 1e6)
    return median(samples)


def bench(*, batches: int = 41, per_batch: int = 2400) -> list[Figure]:
    """Microseconds per ``Policy.evaluate`` call for a 50-rule policy."""
    ctxs = contexts()
    typical = per_call_us(realistic_policy(), ctxs, batches=batches, per_batch=per_batch)
    worst = per_call_us(worst_case_policy(), ctxs, batches=batches, per_batch=per_batch)
    return [
        Figure("policy_evaluate_50_rules", typical, "us", target=f"value < {TARGET_US} us",
               ok=typical < TARGET_US, note="mixed calls; rules naming other tools skipped"),
        Figure("policy_evaluate_50_rules_worst", worst, "us",
               target=f"value < {WORST_TARGET_US} us", ok=worst < WORST_TARGET_US,
               note="all 50 rules checked on every call, none matches"),
    ]


if __name__ == "__main__":
    for figure in bench():
        print(f"{figure.name}: {figure.value:.2f} {figure.unit} ({figure.note})")
