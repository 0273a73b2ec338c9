"""Retention rules: periods read as written, looked up from the most specific rule to the
default (a ``never`` stops the lookup), and ``[retention]`` in ``underway.toml`` checked
with errors naming the key."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from underway.config import ConfigError, load_config
from underway.errors import ConfigurationError
from underway.privacy.retention import (
    Periods,
    Retention,
    Rule,
    Rules,
    format_period,
    parse_period,
)

DAY = 86_400.0


@pytest.mark.parametrize(("text", "seconds"), [
    ("45s", 45.0), ("30m", 1800.0), ("12h", 43_200.0), ("90d", 90 * DAY), ("4w", 28 * DAY),
    ("7y", 7 * 365 * DAY), ("1.5d", 1.5 * DAY), (" 2D ", 2 * DAY), ("never", math.inf),
])
def test_periods_are_read_as_written(text: str, seconds: float) -> None:
    assert parse_period(text) == seconds


@pytest.mark.parametrize("text", ["90", "90 days", "d", "-1d", "0s", "forever", ""])
def test_what_is_no_period_is_refused_saying_how_to_write_one(text: str) -> None:
    with pytest.raises(ConfigurationError, match="period"):
        parse_period(text)


def test_periods_are_written_back_in_their_largest_unit() -> None:
    assert [format_period(parse_period(t)) for t in ("90d", "7y", "4w", "36h", "45s", "never")
            ] == ["90d", "7y", "4w", "36h", "45s", "never"]


RULES = Retention(
    completed=90 * DAY, failed=365 * DAY,
    flows={"kyc": Periods(failed=7 * 365 * DAY), "chat": Periods(completed=7 * DAY)},
    tenants={"acme": Rules(completed=math.inf,
                           flows={"kyc": Periods(completed=30 * DAY)})},
)


@pytest.mark.parametrize(("tenant", "flow", "status", "expected"), [
    ("globex", "orders", "completed", ("retention.completed", 90 * DAY)),
    ("globex", "orders", "failed", ("retention.failed", 365 * DAY)),
    ("globex", "orders", "cancelled", None),
    ("globex", "kyc", "failed", ("retention.flows.kyc.failed", 7 * 365 * DAY)),
    ("globex", "chat", "completed", ("retention.flows.chat.completed", 7 * DAY)),
    ("acme", "orders", "completed", None),  # "never" stops the lookup at the tenant
    ("acme", "chat", "completed", None),  # the tenant's rule comes before the flow's
    ("acme", "kyc", "completed", ("retention.tenants.acme.flows.kyc.completed", 30 * DAY)),
    ("acme", "kyc", "failed", ("retention.flows.kyc.failed", 7 * 365 * DAY)),
    ("acme", "orders", "dead", None),
])
def test_the_most_specific_rule_says_the_period(
    tenant: str, flow: str, status: str, expected: tuple[str, float] | None
) -> None:
    rule = RULES.rule(tenant, flow, status)
    assert (None if rule is None else (rule.source, rule.period)) == expected


def test_no_rule_means_no_purge() -> None:
    assert Retention().empty
    assert Retention().rule("t", "f", "completed") is None
    assert not RULES.empty
    assert not Retention(tenants={"a": Rules(flows={"f": Periods(failed=DAY)})}).empty
    assert RULES.named_flows("acme") == {"kyc", "chat"}


def test_a_period_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="positive"):
        Periods(completed=0.0)
    with pytest.raises(ConfigurationError, match="every"):
        Retention(every=0.0)


def test_the_config_file_describes_the_rules(tmp_path: Path) -> None:
    path = tmp_path / "underway.toml"
    path.write_text(
        '[retention]\ncompleted = "90d"\nfailed = "1y"\nevery = "30m"\n'
        '[retention.flows.kyc]\nfailed = "7y"\n'
        '[retention.tenants.acme]\ncompleted = "never"\n'
        '[retention.tenants.acme.flows.kyc]\ncompleted = "30d"\n', encoding="utf-8")
    made = load_config(path).make_retention()
    assert made == Retention(
        completed=90 * DAY, failed=365 * DAY, every=1800.0,
        flows={"kyc": Periods(failed=7 * 365 * DAY)},
        tenants={"acme": Rules(completed=math.inf, flows={"kyc": Periods(completed=30 * DAY)})},
    )
    assert load_config(_write(tmp_path, "")).make_retention() is None


def test_the_config_file_says_when_purged_runs_are_forgotten(tmp_path: Path) -> None:
    made = load_config(_write(
        tmp_path, '[retention]\ncompleted = "90d"\nforget_after = "400d"\n'
        '[retention.flows.kyc]\nforget_after = "never"\n'
        '[retention.tenants.acme]\nforget_after = "2y"\n'
        '[retention.tenants.acme.flows.bill]\nforget_after = "100d"\n')).make_retention()
    assert made is not None and made.forgets
    assert made.forget_rule("x", "letter") == Rule(400 * DAY, "retention.forget_after")
    assert made.forget_rule("x", "kyc") is None
    assert made.forget_rule("acme", "kyc") == Rule(730 * DAY,
                                                   "retention.tenants.acme.forget_after")
    assert made.forget_rule("acme", "bill") == Rule(
        100 * DAY, "retention.tenants.acme.flows.bill.forget_after")
    with pytest.raises(ConfigurationError, match="positive"):
        Periods(forget_after=-1.0)


@pytest.mark.parametrize(("text", "key", "problem"), [
    ('[retention]\ncompleted = 90\n', "retention.completed", "a string"),
    ('[retention]\nfailed = "90 days"\n', "retention.failed", "not a period"),
    ('[retention]\ncompleted = "0d"\n', "retention.completed", "longer than nothing"),
    ('[retention]\ncompleted = "1d"\ndead = "1d"\n', "retention.dead", "unknown key"),
    ('[retention.tenants.acme.flows.kyc]\nkept = "1d"\n',
     "retention.tenants.acme.flows.kyc.kept", "unknown key"),
])
def test_a_bad_rule_is_refused_naming_its_key(
    tmp_path: Path, text: str, key: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_write(tmp_path, text))
    assert caught.value.key == key and problem in caught.value.problem


def test_a_worker_cannot_be_told_to_sweep_never(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, '[retention]\ncompleted = "1d"\nevery = "never"\n'))
    with pytest.raises(ConfigError, match=r"retention\.every"):
        config.make_retention()


def _write(folder: Path, text: str) -> Path:
    path = folder / "underway.toml"
    path.write_text(text, encoding="utf-8")
    return path
