"""``underway policy check`` and ``underway policy explain``, and the examples in
docs/policy.md."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from underway import Flow, RunContext
from underway.cli import app
from underway.guard.policy import PolicyContext, load_policy

FIXTURES = Path(__file__).parents[2] / "fixtures"
DOC = Path(__file__).parents[3] / "docs" / "policy.md"


class Empty(BaseModel):
    pass


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_check_reports_version_rules_and_digest() -> None:
    code, out = cli("policy", "check", str(FIXTURES / "invoices.yaml"))
    assert code == 0
    digest = load_policy(FIXTURES / "invoices.toml").digest
    assert "version 'invoices-2024.1', 14 rules, default deny" in out
    assert digest in out


def test_check_refuses_a_malformed_file_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('version = "v1"\n[[rules]]\nid = "r1"\noutcome = "permit"\n')
    code, out = cli("policy", "check", str(bad))
    assert code == 2
    assert out.strip().splitlines() == [
        f"underway: error: policy {bad}, rule 'r1', field 'outcome': unknown outcome "
        "'permit'; use allow, deny or require_approval"
    ]


def test_explain_prints_the_decision_and_its_rule() -> None:
    code, out = cli(
        "policy", "explain", str(FIXTURES / "invoices.toml"), "--tool", "issue_refund",
        "--role", "support", "--env", "prod", "--irreversible", "--amount", "10001 INR",
        "--args", '{"amount": 10001, "note": {"text": "late"}}',
    )
    assert code == 0, out
    assert out.splitlines() == [
        "require_approval (rule 'refunds-over-10000-inr', policy invoices-2024.1)",
        "reason: refunds over 10,000 INR need a finance manager",
        "approver: finance_manager, expires in 86400 s",
    ]


def test_explain_as_json_with_labels_and_counters() -> None:
    code, out = cli(
        "policy", "explain", str(FIXTURES / "invoices.toml"), "--tool", "send_reminder",
        "--role", "agent", "--counter", "tenant.messages.today=3", "--json",
    )
    assert code == 0, out
    decided = json.loads(out)
    assert (decided["outcome"], decided["rule_id"]) == ("deny", "reminders-daily-cap")
    code, out = cli(
        "policy", "explain", str(FIXTURES / "invoices.toml"), "--tool", "delete_customer_data",
        "--role", "support", "--label", "personal", "--json",
    )
    assert json.loads(out)["rule_id"] == "personal-data"


def test_explain_refuses_bad_options() -> None:
    path = str(FIXTURES / "invoices.toml")
    for extra, words in (
        (["--args", "[1, 2]"], "--args must be a JSON object"),
        (["--args", "{oops"], "invalid JSON for --args"),
        (["--counter", "tenant.messages"], "--counter takes NAME=NUMBER"),
        (["--amount", "10000"], "--amount takes 'VALUE CURRENCY'"),
    ):
        code, out = cli("policy", "explain", path, "--tool", "send_reminder", *extra)
        assert code == 2
        assert words in out


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)


def test_the_documented_toml_and_yaml_are_the_same_policy(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(_blocks("toml")[0])
    (tmp_path / "p.yaml").write_text(_blocks("yaml")[0])
    toml, yaml = load_policy(tmp_path / "p.toml"), load_policy(tmp_path / "p.yaml")
    assert toml.digest == yaml.digest
    assert [r.id for r in toml.rules] == [
        "lookups", "refunds-staff", "refunds-over-10000-inr", "reminders-daily-cap",
        "untrusted-input", "refund-reason-text",
    ]


def test_the_documented_python_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policy.toml").write_text(_blocks("toml")[0])
    flow: Flow[Any, Any] = Flow("doc_example", state=Empty)

    @flow.step(start=True)
    async def only(ctx: RunContext[Any, Any]) -> Any:
        return ctx.done()

    found: dict[str, Any] = {}
    for block in _blocks("python"):
        namespace: dict[str, Any] = {"flow": flow}
        exec(compile(block, str(DOC), "exec"), namespace)
        found.update(namespace)
    assert found["engine"].guard.environment == "prod"
    policy = found["policy"]
    vip = PolicyContext(
        tenant_id="acme", principal=None, roles=frozenset(), environment="prod", flow="f",
        tool="issue_refund", mutating=True, irreversible=True, permissions=frozenset(),
        args={"customer": "vip-7"}, labels=frozenset(), amount=None, counters={},
    )
    decided = policy.evaluate(vip)
    assert (decided.outcome, decided.approver_role) == ("require_approval", "account_manager")
    found["engine"].store.close()
