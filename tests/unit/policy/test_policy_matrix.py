"""The invoice agent's policy, read from TOML and from YAML, decides every combination of
role, tool, amount and environment as the table below says.

The table is written out by hand from the policy's intent; it is not computed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from underway.guard.policy import Policy, PolicyContext, load_policy

MakeContext = Callable[..., PolicyContext]

FIXTURES = Path(__file__).parents[2] / "fixtures"
FILES = ["invoices.toml", "invoices.yaml"]

ROLES = ("agent", "support", "finance_manager", "admin")
ENVIRONMENTS = ("dev", "staging", "prod")

A, D, R = "allow", "deny", "require_approval"

# Tools without an amount: (tool, role) -> outcome in dev, staging, prod.
PLAIN: dict[tuple[str, str], tuple[str, str, str]] = {
    ("lookup_invoice", "agent"): (A, A, A),
    ("lookup_invoice", "support"): (A, A, A),
    ("lookup_invoice", "finance_manager"): (A, A, A),
    ("lookup_invoice", "admin"): (A, A, A),
    ("send_reminder", "agent"): (A, A, A),
    ("send_reminder", "support"): (A, A, A),
    ("send_reminder", "finance_manager"): (D, D, D),   # no rule: the file's default
    ("send_reminder", "admin"): (A, A, A),
    ("delete_customer_data", "agent"): (D, D, D),
    ("delete_customer_data", "support"): (D, D, D),
    ("delete_customer_data", "finance_manager"): (D, D, D),
    ("delete_customer_data", "admin"): (A, R, R),
}

# issue_refund: amounts in the order of AMOUNTS.
AMOUNTS: tuple[tuple[int, str], ...] = (
    (0, "INR"), (9999, "INR"), (10000, "INR"), (10001, "INR"), (250000, "INR"), (500, "USD"),
)
REFUND: dict[tuple[str, str], tuple[str, ...]] = {
    #                            0    9999 10000 10001 250000 500USD
    ("agent", "dev"):           (A,   A,   A,    A,    A,     R),
    ("agent", "staging"):       (D,   D,   D,    D,    D,     D),
    ("agent", "prod"):          (D,   D,   D,    D,    D,     D),
    ("support", "dev"):         (A,   A,   A,    A,    A,     R),
    ("support", "staging"):     (A,   A,   A,    R,    R,     R),
    ("support", "prod"):        (A,   A,   A,    R,    D,     R),
    ("finance_manager", "dev"): (A,   A,   A,    A,    A,     R),
    ("finance_manager", "staging"): (A, A, A,    A,    A,     R),
    ("finance_manager", "prod"):    (A, A, A,    A,    D,     R),
    ("admin", "dev"):           (A,   A,   A,    A,    A,     R),
    ("admin", "staging"):       (A,   A,   A,    R,    R,     R),
    ("admin", "prod"):          (A,   A,   A,    R,    D,     R),
}

# Which rule is reported, for cells where the choice matters.
REPORTED: list[tuple[str, str, str, tuple[int, str] | None, str | None]] = [
    ("send_reminder", "finance_manager", "prod", None, None),
    ("lookup_invoice", "agent", "prod", None, "lookups"),
    ("issue_refund", "agent", "staging", (0, "INR"), "refunds-agents"),
    ("issue_refund", "support", "staging", (10000, "INR"), "refunds-staff"),
    ("issue_refund", "support", "staging", (10001, "INR"), "refunds-over-10000-inr"),
    ("issue_refund", "support", "prod", (250000, "INR"), "refunds-cap"),
    ("issue_refund", "finance_manager", "prod", (500, "USD"), "refunds-foreign"),
    ("issue_refund", "admin", "dev", (500, "USD"), "refunds-foreign"),
    ("delete_customer_data", "support", "dev", None, "personal-data"),
    ("delete_customer_data", "admin", "prod", None, "personal-data-admin"),
    ("delete_customer_data", "admin", "dev", None, "personal-data-dev"),
]


@pytest.fixture(params=FILES)
def policy(request: pytest.FixtureRequest) -> Policy:
    return load_policy(FIXTURES / request.param)


def test_the_table_covers_every_combination() -> None:
    assert set(PLAIN) == {(t, r) for t in ("lookup_invoice", "send_reminder",
                                           "delete_customer_data") for r in ROLES}
    assert set(REFUND) == {(r, e) for r in ROLES for e in ENVIRONMENTS}
    assert all(len(row) == len(AMOUNTS) for row in REFUND.values())


@pytest.mark.parametrize(("tool", "role"), sorted(PLAIN))
def test_tools_without_amounts(
    policy: Policy, make_ctx: MakeContext, tool: str, role: str
) -> None:
    got = tuple(
        policy.evaluate(make_ctx(tool, role=role, environment=env)).outcome
        for env in ENVIRONMENTS
    )
    assert got == PLAIN[(tool, role)]


@pytest.mark.parametrize(("role", "environment"), sorted(REFUND))
def test_refunds_by_amount(
    policy: Policy, make_ctx: MakeContext, role: str, environment: str
) -> None:
    got = tuple(
        policy.evaluate(
            make_ctx("issue_refund", role=role, environment=environment, amount=amount,
                     args={"amount": amount[0], "currency": amount[1]})
        ).outcome
        for amount in AMOUNTS
    )
    assert got == REFUND[(role, environment)]


@pytest.mark.parametrize(("tool", "role", "environment", "amount", "rule_id"), REPORTED)
def test_the_deciding_rule_is_reported(
    policy: Policy, make_ctx: MakeContext, tool: str, role: str, environment: str,
    amount: tuple[int, str] | None, rule_id: str | None,
) -> None:
    d = policy.evaluate(make_ctx(tool, role=role, environment=environment, amount=amount))
    assert d.rule_id == rule_id
    assert d.policy_version == "invoices-2024.1"


def test_approval_decisions_carry_approver_and_expiry(
    policy: Policy, make_ctx: MakeContext
) -> None:
    refund = policy.evaluate(make_ctx("issue_refund", role="support", amount=(10001, "INR")))
    assert (refund.approver_role, refund.expires_in) == ("finance_manager", 24 * 3600.0)
    assert refund.reason == "refunds over 10,000 INR need a finance manager"
    erase = policy.evaluate(make_ctx("delete_customer_data", role="admin"))
    assert (erase.approver_role, erase.expires_in) == ("data_protection_officer", 3600.0)
    cap = policy.evaluate(make_ctx("issue_refund", role="admin", amount=(250000, "INR")))
    assert (cap.approver_role, cap.expires_in) == (None, None)
    assert cap.reason == "no refund of 250,000 INR or more in production"


def test_toml_and_yaml_files_are_the_same_policy() -> None:
    toml, yaml = (load_policy(FIXTURES / name) for name in FILES)
    assert toml.to_dict() == yaml.to_dict()
    assert toml.digest == yaml.digest
