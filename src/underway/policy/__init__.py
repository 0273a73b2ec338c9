"""Guarded autonomy: the policy that decides, before every tool call, whether it may run.

Build a :class:`Policy` from :class:`Rule` objects, or read one from a TOML or YAML file
with :func:`load_policy`. The engine describes each call as a :class:`PolicyContext` and
journals the :class:`Decision` that :meth:`Policy.evaluate` returns: ``allow``, ``deny``
or ``require_approval``, with the rule that decided and the policy's version.

See ``docs/policy.md`` for the rule schema and how outcomes combine. An agent with no
policy runs under :data:`DEFAULT_POLICY`, which holds calls labelled ``untrusted``
(:data:`UNTRUSTED_INPUT`) for approval.
"""

from __future__ import annotations

from .conditions import AmountCondition, ArgCondition, CounterCondition
from .context import Amount, Decision, Outcome, PolicyContext
from .defaults import DEFAULT_POLICY, UNTRUSTED_INPUT
from .errors import PolicyError
from .loading import load_policy, policy_from_dict
from .policies import Policy
from .rules import Predicate, Rule

__all__ = [
    "DEFAULT_POLICY",
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
    "load_policy",
    "policy_from_dict",
]
