"""A versioned set of rules and how their outcomes combine into one decision."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Literal

from ._conditions import Unevaluable, consent_missing
from .context import FINISH, Decision, PolicyContext
from .errors import PolicyError
from .rules import OUTCOMES, Rule

__all__ = ["Policy"]

_RANK = {outcome: rank for rank, outcome in enumerate(OUTCOMES)}
_DENY = _RANK["deny"]
_CACHE_LIMIT = 4096
"""Tool names whose candidate rules are remembered; past this the memo starts afresh."""

_Candidate = tuple[Rule, tuple[Callable[[PolicyContext], bool], ...], bool, int]
"""A rule that may apply to a tool: the rule, its checks, whether it has a predicate, and
the rank of its outcome."""


class Policy:
    """Rules that decide, before each tool call, whether it may run.

    :meth:`evaluate` checks every rule. The most restrictive outcome among the rules that
    match wins (``deny`` > ``require_approval`` > ``allow``). Among rules with that outcome,
    the first in order is reported. A rule that cannot be evaluated denies the call: its
    predicate raised, or an argument had the wrong type. The policy fails closed.

    ``digest`` is a SHA-256 of its content (rules, default and options). It is equal for the
    same rules written in TOML or YAML. Evaluation is pure and does no I/O.

    Args:
        version: Names the policy in every decision.
        rules: The rules, in order.
        default: The outcome when no rule matches.
        deny_unlisted_mutating: Deny a mutating tool when no rule matches.
    """

    __slots__ = (
        "_by_tool", "_consents", "_decisions", "_finish", "_finish_known", "_no_match",
        "_reads", "_unlisted", "default", "deny_unlisted_mutating", "digest", "rules",
        "version",
    )

    def __init__(
        self,
        version: str,
        rules: Sequence[Rule] = (),
        *,
        default: Literal["allow", "deny"] = "allow",
        deny_unlisted_mutating: bool = False,
    ) -> None:
        if not isinstance(version, str) or not version.strip():
            raise PolicyError(
                f"a policy needs a non-empty version string (in YAML, quote a number: "
                f"version: \"3\"), not {version!r}", field="version",
            )
        if default not in ("allow", "deny"):
            raise PolicyError(f"default must be 'allow' or 'deny', not {default!r}",
                              field="default")
        if not isinstance(deny_unlisted_mutating, bool):
            raise PolicyError(f"expected true or false, not {deny_unlisted_mutating!r}",
                              field="deny_unlisted_mutating")
        rules = tuple(rules)
        seen: set[str] = set()
        for i, rule in enumerate(rules):
            if not isinstance(rule, Rule):
                raise PolicyError(f"expected a Rule, not {rule!r}", field=f"rules[{i}]")
            if rule.id in seen:
                raise PolicyError("another rule has the same id; ids must be unique",
                                  rule_id=rule.id, field="id")
            seen.add(rule.id)
        self.version = version
        self.rules: tuple[Rule, ...] = rules
        self.default: Literal["allow", "deny"] = default
        self.deny_unlisted_mutating = deny_unlisted_mutating
        self.digest = hashlib.sha256(json.dumps(
            self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()).hexdigest()
        self._by_tool: dict[str, tuple[_Candidate, ...]] = {}
        self._reads: dict[tuple[str, str], bool] = {}
        self._consents: dict[str, tuple[str, ...]] = {}
        self._decisions = {
            r.id: Decision(
                r.outcome, r.id, version, r.reason or r.description or f"rule {r.id!r} matched",
                r.approver_role, r.expires_in,
            )
            for r in self.rules
        }
        self._no_match = Decision(default, None, version, f"no rule matched; default {default}")
        self._unlisted = Decision(
            "deny", None, version,
            "no rule matched this mutating tool, and unlisted mutating tools are denied",
        )
        self._finish: Policy | None = None
        self._finish_known = False

    def __repr__(self) -> str:
        return f"Policy({self.version!r}, {len(self.rules)} rules, digest={self.digest[:12]})"

    def with_options(self, *, deny_unlisted_mutating: bool) -> Policy:
        """This policy with ``deny_unlisted_mutating`` switched (e.g. for one flow)."""
        return Policy(self.version, self.rules, default=self.default,
                      deny_unlisted_mutating=deny_unlisted_mutating)

    def to_dict(self) -> dict[str, object]:
        """The policy in the file schema (what :func:`policy_from_dict` reads back, as long
        as predicates are ``module:function`` references)."""
        return {
            "version": self.version,
            "default": self.default,
            "deny_unlisted_mutating": self.deny_unlisted_mutating,
            "rules": [r.to_dict() for r in self.rules],
        }

    @property
    def at_finish(self) -> Policy | None:
        """The policy that decides on a run's finish: the rules whose ``tools`` name
        :data:`FINISH` (by name, not by a pattern: a rule on ``*`` says nothing about
        results), in order, under this version, with ``allow`` when none matches. None
        when no rule names it: the finish is then no decision at all."""
        if not self._finish_known:
            rules = [r for r in self.rules if r.tools is not None and FINISH in r.tools]
            self._finish = Policy(self.version, rules) if rules else None
            self._finish_known = True
        return self._finish

    def reads_counters(self, tool: str, prefix: str) -> bool:
        """Whether deciding on a call of ``tool`` may read a counter whose name starts with
        ``prefix`` (``"tenant."``): a rule that may apply to the tool tests such a counter,
        or asks a predicate, which may read any. The engine reads a tenant's usage, from
        the store, only for a decision that may need it."""
        key = (tool, prefix)
        found = self._reads.get(key)
        if found is None:
            if len(self._reads) >= _CACHE_LIMIT:
                self._reads = {}
            found = any(
                asks or any(c.counter.startswith(prefix) for c in rule.counters)
                for rule, _, asks, _ in self._candidates(tool)
            )
            self._reads[key] = found
        return found

    def consent_purposes(self, tool: str) -> tuple[str, ...]:
        """The purposes, sorted, whose consent a rule that may apply to ``tool`` requires
        (``require_consent``): what the engine reads from the consent store, for the
        run's subject, right before it decides on a call of ``tool`` — and only then."""
        found = self._consents.get(tool)
        if found is None:
            if len(self._consents) >= _CACHE_LIMIT:
                self._consents = {}
            found = tuple(sorted({
                rule.require_consent for rule, _, _, _ in self._candidates(tool)
                if rule.require_consent is not None
            }))
            self._consents[tool] = found
        return found

    def _candidates(self, tool: str) -> tuple[_Candidate, ...]:
        found = self._by_tool.get(tool)
        if found is None:
            if len(self._by_tool) >= _CACHE_LIMIT:
                self._by_tool = {}
            found = tuple(
                (r, r.checks, r.when is not None, _RANK[r.outcome])
                for r in self.rules if r.applies_to_tool(tool)
            )
            self._by_tool[tool] = found
        return found

    def evaluate(self, ctx: PolicyContext) -> Decision:
        """Decide whether the call described by ``ctx`` may run."""
        best: Rule | None = None
        best_rank = -1
        for rule, checks, asks, rank in self._candidates(ctx.tool):
            try:
                for check in checks:
                    if not check(ctx):
                        break
                else:
                    if asks and not rule.ask_predicate(ctx):
                        continue
                    if rank > best_rank:
                        best, best_rank = rule, rank
                        if rank == _DENY:
                            break
            except Unevaluable as exc:
                # Nothing outranks a deny, so this is the decision whatever follows.
                return Decision(
                    "deny", rule.id, self.version,
                    f"rule {rule.id!r} could not be evaluated, so the call is denied: {exc}",
                )
        if best is not None:
            decided = self._decisions[best.id]
            if best.require_consent is None:
                return decided
            # Which of the cases it was (no subject, never consented, withdrawn) is the
            # reason a person reading the journal needs.
            why = consent_missing(ctx, best.require_consent)
            base = best.reason or best.description or (
                f"rule {best.id!r} requires consent to {best.require_consent!r}")
            return Decision(decided.outcome, best.id, self.version, f"{base}: {why}",
                            decided.approver_role, decided.expires_in)
        if ctx.mutating and self.deny_unlisted_mutating:
            return self._unlisted
        return self._no_match
