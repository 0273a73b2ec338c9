"""Guarded autonomy: the policy that decides, before every tool call, whether it may run.

Build a :class:`Policy` from :class:`Rule` objects, or read one from a TOML or YAML file
with :func:`load_policy`. The engine describes each call as a :class:`PolicyContext` and
journals the :class:`Decision` that :meth:`Policy.evaluate` returns: ``allow``, ``deny``
or ``require_approval``, with the rule that decided and the policy's version.

See ``docs/policy.md`` for the rule schema and how outcomes combine. An agent with no
policy runs under :data:`DEFAULT_POLICY`, which holds for approval the calls whose arguments
untrusted content may have chosen (:data:`PROVENANCE_RULES`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports
from .context import (
    APPROVAL_LABEL,
    FINISH,
    Amount,
    Decision,
    Outcome,
    PolicyContext,
    approval_label,
    declared_approval,
    declares_approval,
)
from .errors import PolicyError

# What describes a call and a decision loads with the package (the guard needs it for every
# call); rules, conditions, policies and their parsers load the first time they are named
# (PEP 562), so a process that never evaluates a policy never loads them.
if TYPE_CHECKING:
    from ._conditions import AmountCondition, ArgCondition, CounterCondition
    from ._loading import load_policy, policy_from_dict
    from .defaults import (
        DEFAULT_POLICY,
        PROVENANCE_RULES,
        UNREQUESTED_CALL,
        UNTRUSTED_ARGUMENT,
        UNTRUSTED_INPUT,
    )
    from .policies import Policy
    from .rules import Predicate, Rule
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "AmountCondition": "._conditions", "ArgCondition": "._conditions",
        "CounterCondition": "._conditions", "DEFAULT_POLICY": ".defaults",
        "UNTRUSTED_INPUT": ".defaults", "PROVENANCE_RULES": ".defaults",
        "UNREQUESTED_CALL": ".defaults", "UNTRUSTED_ARGUMENT": ".defaults",
        "load_policy": "._loading",
        "policy_from_dict": "._loading", "Policy": ".policies", "Predicate": ".rules",
        "Rule": ".rules",
    }, globals())

__all__ = [
    "APPROVAL_LABEL",
    "DEFAULT_POLICY",
    "FINISH",
    "PROVENANCE_RULES",
    "UNREQUESTED_CALL",
    "UNTRUSTED_ARGUMENT",
    "UNTRUSTED_INPUT",
    "Amount",
    "AmountCondition",
    "ArgCondition",
    "CounterCondition",
    "Decision",
    "Outcome",
    "Policy",
    "PolicyContext",
    "PolicyError",
    "Predicate",
    "Rule",
    "approval_label",
    "declared_approval",
    "declares_approval",
    "load_policy",
    "policy_from_dict",
]
