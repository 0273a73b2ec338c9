"""The rules that hold calls whose arguments untrusted content may have chosen, and the
policy an agent runs under when nobody configured one.

An agent traces each argument of a mutating or outbound call it proposes once untrusted
content has entered its model's context (:mod:`underway.guard.provenance`). A call gets
``untrusted-arg`` when an argument that may not carry untrusted content does, and
``unrequested`` when no trusted source asked for a call of its tool; every such call also
keeps the context's ``untrusted`` label (:mod:`underway.guard.taint`). A label only
matters if a rule reads it. :data:`DEFAULT_POLICY` (everything allowed except what its
rules hold) applies to an agent whose flow and engine have no policy. A policy you write
replaces the default entirely: add the rules to it (``[*rules, *PROVENANCE_RULES]``, or
the same rules in TOML) to keep the protection. :data:`UNTRUSTED_INPUT` holds every call
from a tainted context, whatever its arguments: the stricter choice.
"""

from __future__ import annotations

from ..provenance import UNREQUESTED, UNTRUSTED_ARG
from ..taint import UNTRUSTED
from .policies import Policy
from .rules import Rule

__all__ = ["DEFAULT_POLICY", "PROVENANCE_RULES", "UNREQUESTED_CALL", "UNTRUSTED_ARGUMENT",
           "UNTRUSTED_INPUT"]

UNTRUSTED_ARGUMENT = Rule(
    "untrusted-argument",
    outcome="require_approval",
    labels_any=[UNTRUSTED_ARG],
    reason="an argument that may not carry untrusted content is not derivable from trusted "
           "sources; a person checks the call before it runs",
)
"""Hold for approval any call labelled ``untrusted-arg`` (any approver role)."""

UNREQUESTED_CALL = Rule(
    "unrequested-call",
    outcome="require_approval",
    labels_any=[UNREQUESTED],
    reason="no trusted source asked for this call, and the model that proposed it has read "
           "content nobody vouches for; a person checks it before it runs",
)
"""Hold for approval any call labelled ``unrequested`` (any approver role)."""

PROVENANCE_RULES = (UNTRUSTED_ARGUMENT, UNREQUESTED_CALL)
"""The default policy's rules, to add to a policy of your own."""

UNTRUSTED_INPUT = Rule(
    "untrusted-input",
    outcome="require_approval",
    labels_any=[UNTRUSTED],
    reason="the model that proposed this call has read content nobody vouches for (tool "
           "output, an outside event); a person checks the call before it runs",
)
"""Hold for approval any call labelled ``untrusted``: every mutating or outbound call
proposed from a tainted context, whatever its arguments (the stricter rule)."""

DEFAULT_POLICY = Policy("underway-default-2", list(PROVENANCE_RULES), default="allow")
"""The policy of an agent whose flow and engine have none: allow, except that a call
labelled ``untrusted-arg`` or ``unrequested`` waits for a person's signed approval."""
