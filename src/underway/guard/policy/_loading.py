"""Reading policies from TOML or YAML files, or from the dict such a file holds."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..._extras import import_extra
from .errors import PolicyError
from .policies import Policy
from .rules import Rule

_POLICY_FIELDS = ("version", "description", "default", "deny_unlisted_mutating", "rules")
RULE_FIELDS: tuple[str, ...] = (
    "id", "description", "outcome", "reason", "approver_role", "expires_in", "tools",
    "tenants", "principals", "roles_any", "roles_none", "environments", "flows", "mutating",
    "irreversible", "labels_any", "permissions", "args", "amount", "counters", "when",
    "purposes", "require_consent",
)
"""Every field a rule may have in a policy file."""


def policy_from_dict(data: Mapping[str, Any]) -> Policy:
    """Build a policy from the file schema (see ``docs/policy.md``).

    Raises :class:`PolicyError` naming the rule and the field for anything it cannot use:
    an unknown field, operator or outcome, a bad regular expression, a missing version.
    A ``when = "module:function"`` predicate is imported, which runs that module's code.
    """
    if not isinstance(data, Mapping):
        raise PolicyError(f"a policy is a table/mapping of fields, not {type(data).__name__}")
    for key in data:
        if key not in _POLICY_FIELDS:
            raise PolicyError(
                f"unknown field {key!r}; a policy has {', '.join(_POLICY_FIELDS)}", field=str(key)
            )
    if "version" not in data:
        raise PolicyError("a policy file must say its version, e.g. version = \"2024-06-01\"",
                          field="version")
    raw_rules = data.get("rules", [])
    if not isinstance(raw_rules, list):
        raise PolicyError(f"expected a list of rules, not {raw_rules!r}", field="rules")
    if not isinstance(data.get("description", ""), str):
        raise PolicyError("expected a string", field="description")
    rules = [_rule(i, entry) for i, entry in enumerate(raw_rules)]
    return Policy(
        data["version"], rules, default=data.get("default", "allow"),
        deny_unlisted_mutating=data.get("deny_unlisted_mutating", False),
    )


def _rule(index: int, entry: object) -> Rule:
    if not isinstance(entry, Mapping):
        raise PolicyError(f"a rule is a table/mapping of fields, not {entry!r}",
                          field=f"rules[{index}]")
    rule_id = entry.get("id")
    named = rule_id if isinstance(rule_id, str) and rule_id.strip() else None
    if named is None:
        raise PolicyError(f"rule #{index + 1} needs a non-empty string id, not {rule_id!r}",
                          field=f"rules[{index}].id")
    for key in entry:
        if key not in RULE_FIELDS:
            raise PolicyError(f"unknown field {key!r}; a rule has {', '.join(RULE_FIELDS)}",
                              rule_id=named, field=str(key))
    if "outcome" not in entry:
        raise PolicyError("a rule needs an outcome: allow, deny or require_approval",
                          rule_id=named, field="outcome")
    fields = {k: v for k, v in entry.items() if k != "id"}
    return Rule(named, **fields)


def load_policy(path: str | Path) -> Policy:
    """Read a policy from a ``.toml`` file, or a ``.yaml``/``.yml`` file (needs PyYAML:
    ``pip install 'underway[yaml]'``, else :class:`~underway.errors.MissingExtra`). Errors
    name the file, the rule and the field."""
    p = Path(path)
    source = str(p)
    suffix = p.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise PolicyError(
            f"unknown policy file type {p.suffix or '(none)'!r}; use .toml, .yaml or .yml",
            source=source,
        )
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise PolicyError(f"cannot read the file: {exc.strerror or exc}", source=source) from None
    data = _parse_toml(raw, source) if suffix == ".toml" else _parse_yaml(raw, source)
    try:
        return policy_from_dict(data)
    except PolicyError as exc:
        raise exc.located(source=source) from None


def _parse_toml(raw: bytes, source: str) -> Any:
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(f"not valid TOML: {exc}", source=source) from None


def _parse_yaml(raw: bytes, source: str) -> Any:
    yaml: Any = import_extra("yaml", what=f"the YAML policy {source} (a TOML one needs none)")
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise PolicyError(f"not valid YAML: {exc}", source=source) from None
    if data is None:
        raise PolicyError("the file is empty", source=source)
    return data
