"""The one door every call passes: guard, budgets, intent, policy, approvals.

=================  ===========================================================
module             holds
=================  ===========================================================
``_guard``         :class:`Guard`: allow-list, schema, money, budgets, policy;
                   :class:`GuardOptions`, what an engine sets on it
``intent``         :class:`CallIntent`: a call's facts, computed once
``budgets``        budgets, usage and what a run has spent
``taint``          what untrusted content taints, labels and passes on
``provenance``     which arguments trusted sources account for, per value
``policy``         rules and decisions (a package)
``approvals``      signed decisions and approvers' keys (a package)
=================  ===========================================================

Names load on first use, so ``import underway`` stays quick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._guard import DEFAULT_ENVIRONMENT, Counters, Guard, GuardOptions, decide_with_money
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "DEFAULT_ENVIRONMENT": "._guard", "Counters": "._guard", "Guard": "._guard",
        "GuardOptions": "._guard", "decide_with_money": "._guard",
    }, globals())

__all__ = ["DEFAULT_ENVIRONMENT", "Counters", "Guard", "GuardOptions", "decide_with_money"]
