"""Reading policy files: malformed ones are refused with an error naming the file, the rule
and the field; the digest identifies a policy's content."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from underway.errors import ConfigurationError, MissingExtra, UnderwayError
from underway.guard.policy import PolicyError, Rule, load_policy, policy_from_dict

HEAD = 'version = "v1"\n\n[[rules]]\nid = "refunds"\n'

MALFORMED_TOML: list[tuple[str, str, str | None, str, str]] = [
    # (case, file text, rule id, field, words in the message)
    ("bad op", HEAD + 'outcome = "deny"\nargs = [{ arg = "amount", op = "=>", value = 1 }]\n',
     "refunds", "args[0].op", "unknown operator '=>'"),
    ("unknown field", HEAD + 'outcome = "deny"\ntool = ["issue_refund"]\n',
     "refunds", "tool", "unknown field 'tool'"),
    ("missing version", '[[rules]]\nid = "refunds"\noutcome = "deny"\n',
     None, "version", "must say its version"),
    ("bad regex", HEAD + 'outcome = "deny"\nargs = [{ arg = "note", op = "matches", '
     'value = "(unclosed" }]\n', "refunds", "args[0].value", "bad regular expression"),
    ("unknown outcome", HEAD + 'outcome = "permit"\n',
     "refunds", "outcome", "unknown outcome 'permit'"),
    ("missing outcome", HEAD + 'tools = ["issue_refund"]\n',
     "refunds", "outcome", "needs an outcome"),
    ("amount without currency", HEAD + 'outcome = "deny"\namount = { op = ">", value = 5 }\n',
     "refunds", "amount.currency", "need 'currency'"),
    ("amount not a number", HEAD + 'outcome = "deny"\n'
     'amount = { op = ">", value = "lots", currency = "INR" }\n',
     "refunds", "amount.value", "numeric string"),
    ("unknown field in a condition", HEAD + 'outcome = "deny"\n'
     'counters = [{ counter = "run.messages", op = ">", value = 1, per = "day" }]\n',
     "refunds", "counters[0].per", "unknown field 'per'"),
    ("counter op", HEAD + 'outcome = "deny"\n'
     'counters = [{ counter = "run.messages", op = "contains", value = 1 }]\n',
     "refunds", "counters[0].op", "unknown operator 'contains'"),
    ("names not a list", HEAD + 'outcome = "deny"\ntools = "issue_refund"\n',
     "refunds", "tools", "expected a list of names"),
    ("empty list", HEAD + 'outcome = "deny"\nroles_any = []\n',
     "refunds", "roles_any", "matches nothing"),
    ("flag not a bool", HEAD + 'outcome = "deny"\nmutating = "yes"\n',
     "refunds", "mutating", "expected true or false"),
    ("approver on a deny", HEAD + 'outcome = "deny"\napprover_role = "finance"\n',
     "refunds", "approver_role", "only to outcome 'require_approval'"),
    ("expiry not positive", HEAD + 'outcome = "require_approval"\nexpires_in = 0\n',
     "refunds", "expires_in", "positive number"),
    ("in needs a list",
     HEAD + 'outcome = "deny"\nargs = [{ arg = "c", op = "in", value = "INR" }]\n',
     "refunds", "args[0].value", "needs a list"),
    ("unimportable predicate", HEAD + 'outcome = "deny"\nwhen = "no_such_module_x:check"\n',
     "refunds", "when", "cannot import predicate"),
    ("predicate reference", HEAD + 'outcome = "deny"\nwhen = "no colon"\n',
     "refunds", "when", "'module:function'"),
    ("duplicate id", HEAD + 'outcome = "deny"\n\n[[rules]]\nid = "refunds"\noutcome = "allow"\n',
     "refunds", "id", "same id"),
    ("missing id", 'version = "v1"\n\n[[rules]]\noutcome = "deny"\n',
     None, "rules[0].id", "rule #1 needs a non-empty string id"),
    ("unknown default", 'version = "v1"\ndefault = "ask"\n', None, "default", "'allow' or 'deny'"),
    ("unknown top-level field", 'version = "v1"\nrule = []\n', None, "rule", "unknown field"),
]


@pytest.mark.parametrize(
    ("text", "rule_id", "field", "words"),
    [case[1:] for case in MALFORMED_TOML],
    ids=[case[0] for case in MALFORMED_TOML],
)
def test_malformed_toml_names_the_rule_and_field(
    tmp_path: Path, text: str, rule_id: str | None, field: str, words: str
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    err = info.value
    assert (err.rule_id, err.field, err.source) == (rule_id, field, str(path))
    message = str(err)
    assert str(path) in message
    assert f"field {field!r}" in message
    assert rule_id is None or f"rule {rule_id!r}" in message
    assert words in message


MALFORMED_YAML: list[tuple[str, str, str | None, str, str]] = [
    ("bad op", "version: v1\nrules:\n  - id: r1\n    outcome: deny\n"
     "    args: [{arg: amount, op: '~=', value: 1}]\n", "r1", "args[0].op", "unknown operator"),
    ("unknown outcome", "version: v1\nrules:\n  - id: r1\n    outcome: maybe\n",
     "r1", "outcome", "unknown outcome 'maybe'"),
    ("missing version", "rules: []\n", None, "version", "must say its version"),
    ("numeric version", "version: 2024.1\n", None, "version", 'quote a number'),
    ("bad regex", "version: v1\nrules:\n  - id: r1\n    outcome: deny\n"
     "    args: [{arg: a, op: matches, value: '[a-'}]\n", "r1", "args[0].value",
     "bad regular expression"),
    ("unknown field", "version: v1\nrules:\n  - id: r1\n    outcome: deny\n    role: [x]\n",
     "r1", "role", "unknown field 'role'"),
]


@pytest.mark.parametrize(
    ("text", "rule_id", "field", "words"),
    [case[1:] for case in MALFORMED_YAML],
    ids=[case[0] for case in MALFORMED_YAML],
)
def test_malformed_yaml_names_the_rule_and_field(
    tmp_path: Path, text: str, rule_id: str | None, field: str, words: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert (info.value.rule_id, info.value.field) == (rule_id, field)
    assert words in str(info.value)


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("policy.toml", 'version = "v1"\n[[rules]\n', "not valid TOML"),
        ("policy.yaml", "version: [v1\n", "not valid YAML"),
        ("policy.yml", "", "the file is empty"),
        ("policy.yaml", "- just\n- a list\n", "a policy is a table/mapping"),
        ("policy.json", "{}", "unknown policy file type '.json'"),
    ],
)
def test_unreadable_files_are_refused(
    tmp_path: Path, name: str, text: str, words: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert words in str(info.value)
    assert str(path) in str(info.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read the file") as info:
        load_policy(tmp_path / "absent.toml")
    assert "absent.toml" in str(info.value)


def test_yaml_without_pyyaml_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("version: v1\n")
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(MissingExtra, match=r"pip install 'underway\[yaml\]'") as raised:
        load_policy(path)
    assert str(path) in str(raised.value)


def test_policy_errors_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        policy_from_dict({"version": "v1", "rules": [{"id": "x", "outcome": "nope"}]})
    assert issubclass(PolicyError, UnderwayError)


def test_rules_built_in_python_are_checked_the_same_way() -> None:
    with pytest.raises(PolicyError) as info:
        Rule("big", outcome="deny", args=[{"arg": "amount", "op": ">>", "value": 1}])
    assert (info.value.rule_id, info.value.field) == ("big", "args[0].op")
    with pytest.raises(PolicyError, match=r"field 'amount\.currency'"):
        Rule("big", outcome="deny", amount={"op": ">", "value": 1, "currency": ""})


def test_the_digest_follows_the_content() -> None:
    base = {"version": "v1", "rules": [
        {"id": "big", "outcome": "deny", "tools": ["b", "a"],
         "amount": {"op": ">", "value": "10000", "currency": "inr"}},
    ]}
    same = {"version": "v1", "default": "allow", "rules": [
        {"id": "big", "outcome": "deny", "tools": ["a", "b"],
         "amount": {"op": ">", "value": 10000, "currency": "INR"}},
    ]}
    changed = {"version": "v1", "rules": [
        {"id": "big", "outcome": "deny", "tools": ["a", "b"],
         "amount": {"op": ">", "value": "10001", "currency": "INR"}},
    ]}
    digest = policy_from_dict(base).digest
    assert len(digest) == 64
    assert policy_from_dict(same).digest == digest
    assert policy_from_dict(changed).digest != digest
    assert policy_from_dict({**base, "version": "v2"}).digest != digest
    assert policy_from_dict({**base, "default": "deny"}).digest != digest


def test_a_policy_round_trips_through_its_dict() -> None:
    policy = load_policy(Path(__file__).parents[2] / "fixtures" / "invoices.toml")
    again = policy_from_dict(policy.to_dict())
    assert again.to_dict() == policy.to_dict()
    assert again.digest == policy.digest


def test_the_public_names_are_pinned() -> None:
    import underway.guard.policy

    assert sorted(underway.guard.policy.__all__) == [
        "APPROVAL_LABEL", "Amount", "AmountCondition", "ArgCondition", "CounterCondition",
        "DEFAULT_POLICY", "Decision", "FINISH", "Outcome", "PROVENANCE_RULES", "Policy",
        "PolicyContext", "PolicyError", "Predicate", "Rule", "UNREQUESTED_CALL",
        "UNTRUSTED_ARGUMENT", "UNTRUSTED_INPUT", "approval_label", "declared_approval",
        "declares_approval", "load_policy", "policy_from_dict",
    ]
