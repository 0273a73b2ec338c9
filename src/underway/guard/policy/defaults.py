"""The rule that holds calls proposed from a tainted context, and the policy an agent runs
under when nobody configured one.

An agent labels ``untrusted`` every mutating or outbound call it proposes once untrusted
content has entered its model's context (:mod:`underway.guard.taint`). A label only
matters if a rule reads it: :data:`UNTRUSTED_INPUT` is that rule, and
:data:`DEFAULT_POLICY` (everything allowed except what it holds) applies to an agent whose
flow and engine have no policy. A policy you write replaces the default entirely: add the
rule to it (``[*rules, UNTRUSTED_INPUT]``, or the same rule in TOML) to keep the
protection.
"""

from __future__ import annotations

from ..taint import UNTRUSTED
from .policies import Policy
from .rules import Rule

__all__ = ["DEFAULT_POLICY", "UNTRUSTED_INPUT"]

UNTRUSTED_INPUT = Rule(
    "untrusted-input",
    outcome="require_approval",
    labels_any=[UNTRUSTED],
    reason="the model that proposed this call has read content nobody vouches for (tool "
           "output, an outside event); a person checks the call before it runs",
)
"""Hold for approval any call labelled ``untrusted`` (any approver role)."""

DEFAULT_POLICY = Policy("underway-default-1", [UNTRUSTED_INPUT], default="allow")
"""The policy of an agent whose flow and engine have none: allow, except that a call
labelled ``untrusted`` waits for a person's signed approval."""
