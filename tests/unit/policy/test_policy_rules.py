"""How rules match and how their outcomes combine: counters, labels, arguments, amounts,
predicates, and the defaults for calls no rule covers."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from underway.guard.policy import (
    AmountCondition,
    ArgCondition,
    CounterCondition,
    Policy,
    PolicyContext,
    Rule,
    load_policy,
    policy_from_dict,
)

MakeContext = Callable[..., PolicyContext]
INVOICES = Path(__file__).parents[2] / "fixtures" / "invoices.toml"


@pytest.fixture(scope="module")
def invoices() -> Policy:
    return load_policy(INVOICES)


# -- counters, labels and arguments in the invoice policy --------------------------------


@pytest.mark.parametrize(
    ("sent_today", "outcome"),
    [(None, "allow"), (0, "allow"), (2, "allow"), (3, "deny"), (7, "deny")],
)
def test_at_most_three_messages_a_day(
    invoices: Policy, make_ctx: MakeContext, sent_today: int | None, outcome: str
) -> None:
    counters = {} if sent_today is None else {"tenant.messages.today": sent_today}
    d = invoices.evaluate(make_ctx("send_reminder", role="support", counters=counters))
    assert d.outcome == outcome
    if outcome == "deny":
        assert d.rule_id == "reminders-daily-cap"
        assert d.reason == "at most 3 messages per tenant per day"


def test_untrusted_content_into_a_mutating_tool_needs_approval(
    invoices: Policy, make_ctx: MakeContext
) -> None:
    d = invoices.evaluate(make_ctx("send_reminder", role="agent", labels={"untrusted"}))
    assert (d.outcome, d.rule_id, d.approver_role) == (
        "require_approval", "untrusted-input", "support"
    )


def test_untrusted_content_into_a_read_only_tool_is_allowed(
    invoices: Policy, make_ctx: MakeContext
) -> None:
    d = invoices.evaluate(make_ctx("lookup_invoice", labels={"untrusted"}))
    assert (d.outcome, d.rule_id) == ("allow", "lookups")


def test_among_equal_outcomes_the_first_rule_is_reported(
    invoices: Policy, make_ctx: MakeContext
) -> None:
    d = invoices.evaluate(make_ctx(
        "issue_refund", role="support", amount=(10001, "INR"), labels={"untrusted"}
    ))
    assert (d.outcome, d.rule_id) == ("require_approval", "refunds-over-10000-inr")


def test_a_deny_outranks_an_approval(invoices: Policy, make_ctx: MakeContext) -> None:
    d = invoices.evaluate(make_ctx("delete_customer_data", role="support",
                                   labels={"untrusted"}))
    assert (d.outcome, d.rule_id) == ("deny", "personal-data")


@pytest.mark.parametrize(
    ("note", "outcome"),
    [
        ({"text": "customer reports FRAUD on card"}, "require_approval"),
        ({"text": "fraudulent? no: a duplicate charge"}, "allow"),
        ({"text": "duplicate charge"}, "allow"),
        (None, "allow"),
    ],
)
def test_argument_rule_on_a_nested_path(
    invoices: Policy, make_ctx: MakeContext, note: dict[str, str] | None, outcome: str
) -> None:
    args: dict[str, Any] = {"amount": 500} if note is None else {"amount": 500, "note": note}
    d = invoices.evaluate(make_ctx("issue_refund", role="support", amount=(500, "INR"),
                                   args=args))
    assert d.outcome == outcome


# -- combination and defaults ------------------------------------------------------------


def test_most_restrictive_outcome_wins_whatever_the_order(make_ctx: MakeContext) -> None:
    rules = [
        Rule("ok", outcome="allow", tools=["send_reminder"]),
        Rule("ask", outcome="require_approval", tools=["send_*"]),
        Rule("ask-too", outcome="require_approval"),
        Rule("no", outcome="deny", environments=["prod"]),
    ]
    ctx = make_ctx("send_reminder", environment="staging")
    for ordered in (rules, rules[::-1]):
        policy = Policy("v1", ordered)
        prod = policy.evaluate(make_ctx("send_reminder", environment="prod"))
        assert (prod.outcome, prod.rule_id) == ("deny", "no")
        assert policy.evaluate(ctx).outcome == "require_approval"
    assert Policy("v1", rules).evaluate(ctx).rule_id == "ask"
    assert Policy("v1", rules[::-1]).evaluate(ctx).rule_id == "ask-too"


def test_no_matching_rule_gives_the_default(make_ctx: MakeContext) -> None:
    rules = [Rule("prod-only", outcome="allow", environments=["prod"])]
    ctx = make_ctx("send_reminder", environment="dev")
    allow = Policy("v1", rules).evaluate(ctx)
    deny = Policy("v1", rules, default="deny").evaluate(ctx)
    assert (allow.outcome, allow.rule_id) == ("allow", None)
    assert (deny.outcome, deny.rule_id) == ("deny", None)
    assert "no rule matched" in deny.reason


def test_deny_unlisted_mutating_denies_mutating_tools_no_rule_covers(
    make_ctx: MakeContext,
) -> None:
    policy = Policy("v1", [Rule("reminders", outcome="allow", tools=["send_reminder"])],
                    deny_unlisted_mutating=True)
    unlisted = policy.evaluate(make_ctx("issue_refund"))
    assert (unlisted.outcome, unlisted.rule_id) == ("deny", None)
    assert "unlisted mutating tools are denied" in unlisted.reason
    assert policy.evaluate(make_ctx("send_reminder")).outcome == "allow"
    assert policy.evaluate(make_ctx("lookup_invoice")).outcome == "allow"

    per_flow = policy.with_options(deny_unlisted_mutating=False)
    assert per_flow.evaluate(make_ctx("issue_refund")).outcome == "allow"
    assert per_flow.digest != policy.digest
    assert per_flow.with_options(deny_unlisted_mutating=True).digest == policy.digest


def test_a_file_may_deny_unlisted_mutating_tools(make_ctx: MakeContext) -> None:
    policy = policy_from_dict({"version": "1", "deny_unlisted_mutating": True})
    assert policy.evaluate(make_ctx("issue_refund")).outcome == "deny"
    assert policy.evaluate(make_ctx("lookup_invoice")).outcome == "allow"


# -- predicates --------------------------------------------------------------------------


def test_a_python_predicate_decides_with_the_other_conditions(make_ctx: MakeContext) -> None:
    seen: list[str] = []

    def vip(ctx: PolicyContext) -> bool:
        seen.append(ctx.tool)
        return ctx.args.get("customer") == "vip-1"

    policy = Policy("v1", [Rule("vip-refunds", outcome="require_approval",
                                tools=["issue_refund"], when=vip)])
    vip_call = make_ctx("issue_refund", args={"customer": "vip-1"})
    assert policy.evaluate(vip_call).outcome == "require_approval"
    assert policy.evaluate(make_ctx("issue_refund", args={"customer": "c-2"})).outcome == "allow"
    assert policy.evaluate(make_ctx("send_reminder", args={"customer": "vip-1"})).outcome == (
        "allow"
    )
    assert seen == ["issue_refund", "issue_refund"]


def test_a_predicate_that_raises_denies_naming_the_rule(make_ctx: MakeContext) -> None:
    def broken(ctx: PolicyContext) -> bool:
        raise LookupError("CRM unavailable")

    policy = Policy("v1", [
        Rule("allow-all", outcome="allow"),
        Rule("crm-check", outcome="allow", when=broken),
    ])
    d = policy.evaluate(make_ctx("send_reminder"))
    assert (d.outcome, d.rule_id) == ("deny", "crm-check")
    assert "'crm-check'" in d.reason
    assert "LookupError: CRM unavailable" in d.reason


def test_a_predicate_that_returns_no_bool_denies(make_ctx: MakeContext) -> None:
    policy = Policy("v1", [Rule("forgot-return", outcome="deny", when=lambda ctx: None)])
    d = policy.evaluate(make_ctx("send_reminder"))
    assert (d.outcome, d.rule_id) == ("deny", "forgot-return")
    assert "not a bool" in d.reason


def test_a_file_references_a_predicate_by_module_and_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_ctx: MakeContext
) -> None:
    (tmp_path / "acme_rules.py").write_text(textwrap.dedent("""
        def weekend_freeze(ctx):
            return ctx.args.get("day") in ("sat", "sun")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    policy = policy_from_dict({"version": "1", "rules": [
        {"id": "freeze", "outcome": "deny", "mutating": True,
         "when": "acme_rules:weekend_freeze"},
    ]})
    assert policy.evaluate(make_ctx("send_reminder", args={"day": "sun"})).outcome == "deny"
    assert policy.evaluate(make_ctx("send_reminder", args={"day": "mon"})).outcome == "allow"
    assert policy.to_dict()["rules"] == [
        {"id": "freeze", "outcome": "deny", "mutating": True,
         "when": "acme_rules:weekend_freeze"}
    ]


# -- individual conditions ---------------------------------------------------------------


ARGS: dict[str, Any] = {
    "amount": 10000,
    "price": "12.50",
    "currency": "INR",
    "flag": True,
    "tags": ["late", "vip"],
    "meta": {"channel": "sms"},
    "customer": {"address": {"city": "Pune"}},
    "items": [{"sku": "A-1"}, {"sku": "B-2"}],
    "when": "2024-06-01",
}

ARG_CASES: list[tuple[str, str, Any, bool]] = [
    ("amount", "==", 10000, True),
    ("amount", "==", 10000.0, True),
    ("amount", "==", "10000", False),
    ("amount", "!=", 10000, False),
    ("amount", ">", 9999, True),
    ("amount", ">", 10000, False),
    ("amount", ">=", 10000, True),
    ("amount", "<", 10000, False),
    ("amount", "<=", "10000", True),
    ("price", ">", 12, True),
    ("price", "<", 12.5, False),
    ("when", ">=", "2024-01-01", True),
    ("when", "<", "2024-06-01", False),
    ("currency", "in", ["INR", "USD"], True),
    ("currency", "not_in", ["INR", "USD"], False),
    ("amount", "in", [1, 10000], True),
    ("flag", "==", True, True),
    ("flag", "==", 1, False),
    ("flag", "in", [1], False),
    ("tags", "contains", "vip", True),
    ("tags", "contains", "new", False),
    ("meta", "contains", "channel", True),
    ("currency", "contains", "N", True),
    ("currency", "matches", "^I", True),
    ("currency", "matches", "^U", False),
    ("customer.address.city", "==", "Pune", True),
    ("items.1.sku", "==", "B-2", True),
    ("items.5.sku", "exists", None, False),
    ("customer.address.zip", "missing", None, True),
    ("customer.address.city", "missing", None, False),
    ("meta.channel", "exists", None, True),
    # An absent argument satisfies no operator but ``missing``.
    ("refund_to", "!=", "x", False),
    ("refund_to", "not_in", ["x"], False),
]


@pytest.mark.parametrize(("path", "op", "value", "expected"), ARG_CASES)
def test_argument_conditions(
    make_ctx: MakeContext, path: str, op: Any, value: Any, expected: bool
) -> None:
    rule = Rule("r", outcome="deny", args=[ArgCondition(path, op, value)])
    assert rule.matches(make_ctx("send_reminder", args=ARGS)) is expected


@pytest.mark.parametrize(
    ("condition", "detail"),
    [
        (ArgCondition("currency", ">", 100), "argument 'currency' is 'INR', not a number"),
        (ArgCondition("amount", "matches", "^1"), "not a string to match"),
        (ArgCondition("amount", "contains", 1), "cannot contain"),
        (ArgCondition("amount", "<", "2024-01-01"), "not a string to compare"),
    ],
)
def test_an_argument_of_the_wrong_type_denies(
    make_ctx: MakeContext, condition: ArgCondition, detail: str
) -> None:
    policy = Policy("v1", [Rule("typed", outcome="allow", args=[condition])])
    d = policy.evaluate(make_ctx("send_reminder", args=ARGS))
    assert (d.outcome, d.rule_id) == ("deny", "typed")
    assert detail in d.reason


def test_amounts_compare_only_within_their_currency(make_ctx: MakeContext) -> None:
    rule = Rule("big", outcome="deny", amount=AmountCondition(">", "10000", "inr"))
    assert rule.matches(make_ctx("issue_refund", amount=(10001, "INR")))
    assert rule.matches(make_ctx("issue_refund", amount=("10000.01", "inr")))
    assert not rule.matches(make_ctx("issue_refund", amount=(10000, "INR")))
    assert not rule.matches(make_ctx("issue_refund", amount=(10_000_000, "USD")))
    assert not rule.matches(make_ctx("issue_refund"))


def test_counter_conditions_treat_a_missing_counter_as_zero(make_ctx: MakeContext) -> None:
    first = Rule("first-call", outcome="allow",
                 counters=[CounterCondition("run.calls.issue_refund", "==", 0)])
    assert first.matches(make_ctx("issue_refund"))
    assert not first.matches(make_ctx("issue_refund", counters={"run.calls.issue_refund": 1}))


@pytest.mark.parametrize(
    ("rule", "matching", "other"),
    [
        (Rule("t", outcome="deny", tools=["lookup_*", "send_reminder"]),
         {"tool": "lookup_customer"}, {"tool": "issue_refund"}),
        (Rule("t", outcome="deny", tenants=["acme"]),
         {"tenant_id": "acme"}, {"tenant_id": "globex"}),
        (Rule("t", outcome="deny", principals=["user-1"]),
         {"principal": "user-1"}, {"principal": None}),
        (Rule("t", outcome="deny", roles_any=["support", "admin"]),
         {"roles": ["admin", "agent"]}, {"roles": ["agent"]}),
        (Rule("t", outcome="deny", roles_none=["admin"]),
         {"roles": ["agent"]}, {"roles": ["agent", "admin"]}),
        (Rule("t", outcome="deny", environments=["prod"]),
         {"environment": "prod"}, {"environment": "dev"}),
        (Rule("t", outcome="deny", flows=["invoice_followup"]),
         {"flow": "invoice_followup"}, {"flow": "onboarding"}),
        (Rule("t", outcome="deny", mutating=False),
         {"tool": "lookup_invoice"}, {"tool": "send_reminder"}),
        (Rule("t", outcome="deny", irreversible=True),
         {"tool": "issue_refund"}, {"tool": "send_reminder"}),
        (Rule("t", outcome="deny", labels_any=["personal", "secret"]),
         {"labels": ["secret"]}, {"labels": ["untrusted"]}),
        (Rule("t", outcome="deny", permissions=["payments.write"]),
         {"permissions": ["payments.write", "crm.read"]}, {"permissions": ["crm.read"]}),
    ],
)
def test_identity_and_tool_conditions(
    make_ctx: MakeContext, rule: Rule, matching: dict[str, Any], other: dict[str, Any]
) -> None:
    assert rule.matches(make_ctx(**{"tool": "send_reminder", **matching}))
    assert not rule.matches(make_ctx(**{"tool": "send_reminder", **other}))
