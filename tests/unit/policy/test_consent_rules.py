"""Consent in policies: ``require_consent`` holds while the run's subject does not consent
to the purpose (never did, withdrew, or the run names no subject) and the decision says
which; ``purposes`` matches the run's purpose; both are read from files, covered by the
digest and checked when the policy is built; the engine is told which purposes to read
for a tool, and no more."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import MakeContext
from underway.cli import app
from underway.guard.policy import Policy, PolicyError, Rule, load_policy, policy_from_dict
from underway.store.base import ConsentRecord

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z

POLICY = Policy("c1", [
    Rule("offers", tools=["send_offer"], require_consent="marketing", outcome="deny",
         reason="offers need marketing consent"),
    Rule("marketing-runs-ask", purposes=["marketing"], mutating=True,
         require_consent="marketing", outcome="require_approval", approver_role="dpo"),
    Rule("research", tools=["survey"], require_consent="research", outcome="deny"),
])


def consent(purpose: str, state: str, reference: str | None = None) -> ConsentRecord:
    return ConsentRecord("acme", "cust-1", purpose, state, reference, "crm", T0)


def test_consent_granted_lets_the_call_through(make_ctx: MakeContext) -> None:
    ctx = dataclasses.replace(make_ctx("send_offer"), subject="cust-1",
                              consents={"marketing": consent("marketing", "granted")})
    d = POLICY.evaluate(ctx)
    assert (d.outcome, d.rule_id) == ("allow", None)


@pytest.mark.parametrize(("subject", "consents", "why"), [
    ("cust-1", {}, "subject 'cust-1' has not consented to 'marketing'"),
    ("cust-1", {"marketing": consent("marketing", "withdrawn", reference="CM-2")},
     "subject 'cust-1' withdrew consent to 'marketing' at 2026-01-01T00:00:00Z (recorded by "
     "crm, reference CM-2)"),
    (None, {}, "the run names no data subject, so nobody consented to 'marketing'"),
    ("cust-1", {"research": consent("research", "granted")},
     "subject 'cust-1' has not consented to 'marketing'"),
])
def test_without_consent_the_rule_decides_and_says_why(
    make_ctx: MakeContext, subject: str | None, consents: dict[str, ConsentRecord], why: str
) -> None:
    ctx = dataclasses.replace(make_ctx("send_offer"), subject=subject, consents=consents)
    d = POLICY.evaluate(ctx)
    assert (d.outcome, d.rule_id, d.reason) == ("deny", "offers",
                                                 f"offers need marketing consent: {why}")


def test_purposes_match_the_run_s_purpose(make_ctx: MakeContext) -> None:
    base = dataclasses.replace(make_ctx("send_reminder"), subject="cust-1")
    d = POLICY.evaluate(dataclasses.replace(base, purpose="marketing"))
    assert (d.outcome, d.rule_id, d.approver_role) == ("require_approval",
                                                        "marketing-runs-ask", "dpo")
    assert d.reason == ("rule 'marketing-runs-ask' requires consent to 'marketing': subject "
                        "'cust-1' has not consented to 'marketing'")
    assert POLICY.evaluate(base).outcome == "allow", "an operations run is not a marketing one"
    granted = dataclasses.replace(base, purpose="marketing",
                                  consents={"marketing": consent("marketing", "granted")})
    assert POLICY.evaluate(granted).outcome == "allow"


def test_the_engine_reads_only_the_purposes_a_tool_s_rules_name() -> None:
    assert POLICY.consent_purposes("send_offer") == ("marketing",)
    assert POLICY.consent_purposes("survey") == ("marketing", "research")
    assert POLICY.consent_purposes("lookup_invoice") == ("marketing",)
    assert Policy("p", [Rule("r", outcome="deny", tools=["x"])]).consent_purposes("x") == ()


def test_files_read_consent_rules_and_the_digest_covers_them(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('version = "v1"\n[[rules]]\nid = "offers"\ntools = ["send_offer"]\n'
                    'require_consent = "marketing"\npurposes = ["marketing", "sales"]\n'
                    'outcome = "deny"\n')
    policy = load_policy(path)
    assert policy.rules[0].require_consent == "marketing"
    assert policy.to_dict()["rules"] == [{  # type: ignore[index]
        "id": "offers", "outcome": "deny", "tools": ["send_offer"],
        "purposes": ["marketing", "sales"], "require_consent": "marketing"}]
    other = policy_from_dict({**policy.to_dict(), "rules": [
        {**policy.to_dict()["rules"][0], "require_consent": "sales"}]})  # type: ignore[index]
    assert other.digest != policy.digest


@pytest.mark.parametrize(("rule", "says"), [
    ({"outcome": "allow", "require_consent": "marketing"},
     "field 'outcome': a rule that requires consent decides what happens without it"),
    ({"outcome": "deny", "require_consent": "Marketing"},
     "field 'require_consent': require_consent must be a purpose name"),
    ({"outcome": "deny", "purposes": ["ok", "Not OK"]},
     "field 'purposes': purposes must be a purpose name"),
    ({"outcome": "deny", "purposes": []}, "field 'purposes': an empty list matches nothing"),
])
def test_bad_consent_rules_are_refused_naming_the_field(rule: dict[str, object],
                                                        says: str) -> None:
    with pytest.raises(PolicyError, match=says):
        policy_from_dict({"version": "v", "rules": [{"id": "r", **rule}]})


def test_explain_shows_the_decision_either_way(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('version = "v1"\n[[rules]]\nid = "offers"\ntools = ["send_offer"]\n'
                    'require_consent = "marketing"\noutcome = "deny"\n')
    runner = CliRunner()
    out = runner.invoke(app, ["policy", "explain", str(path), "--tool", "send_offer",
                              "--subject", "cust-1"]).output
    assert out.splitlines()[0] == "deny (rule 'offers', policy v1)"
    assert "subject 'cust-1' has not consented to 'marketing'" in out
    out = runner.invoke(app, ["policy", "explain", str(path), "--tool", "send_offer",
                              "--subject", "cust-1", "--consented", "marketing"]).output
    assert out.splitlines()[0] == "allow (no rule, policy v1)"
