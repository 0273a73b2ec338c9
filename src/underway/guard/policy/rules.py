"""A policy rule: the conditions under which it applies, and what it decides."""

from __future__ import annotations

import fnmatch
import importlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ...errors import ConfigurationError
from ...subjects import check_purpose
from ._conditions import (
    AmountCondition,
    ArgCondition,
    CounterCondition,
    Unevaluable,
    consent_missing,
)
from .context import DEFAULT_APPROVAL_EXPIRY, Outcome, PolicyContext
from .errors import PolicyError

__all__ = ["OUTCOMES", "Predicate", "Rule"]

Predicate = Callable[[PolicyContext], bool]
"""A custom condition: called with the call's context, returns True when the rule applies."""

OUTCOMES: tuple[Outcome, ...] = ("allow", "require_approval", "deny")
"""Outcomes from least to most restrictive."""

_GLOB_CHARS = frozenset("*?[")


def _names(value: Iterable[str] | None, field: str) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise PolicyError(f"expected a list of names, not {value!r}", field=field)
    names = list(value)
    if not names:
        raise PolicyError("an empty list matches nothing; leave the field out to match any",
                          field=field)
    for name in names:
        if not isinstance(name, str) or not name:
            raise PolicyError(f"names must be non-empty strings, not {name!r}", field=field)
    return frozenset(names)


def _flag(value: object, field: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise PolicyError(f"expected true or false, not {value!r}", field=field)
    return value


def _text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise PolicyError(f"expected a string, not {value!r}", field=field)
    return value


def _conditions(
    items: Sequence[Any] | None, kind: type[Any], field: str
) -> tuple[Any, ...]:
    if items is None:
        return ()
    if isinstance(items, str | Mapping) or not isinstance(items, Sequence):
        raise PolicyError(f"expected a list of conditions, not {items!r}", field=field)
    out = []
    for i, item in enumerate(items):
        try:
            out.append(item if isinstance(item, kind) else kind.from_dict(item))
        except PolicyError as exc:
            raise exc.located(field_prefix=f"{field}[{i}]") from None
    return tuple(out)


def _purpose(value: object, field: str) -> str:
    try:
        return check_purpose(value, field=field)
    except ConfigurationError as exc:
        raise PolicyError(str(exc), field=field) from None


def _import_predicate(ref: str) -> Predicate:
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise PolicyError(
            f"a predicate reference is 'module:function', not {ref!r}", field="when"
        )
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception as exc:
        raise PolicyError(
            f"cannot import predicate {ref!r}: {type(exc).__name__}: {exc}", field="when"
        ) from None
    if not callable(target):
        raise PolicyError(f"predicate {ref!r} is not callable", field="when")
    fn: Predicate = target
    return fn


def _on_counters(condition: CounterCondition) -> Callable[[PolicyContext], bool]:
    return lambda c: condition.holds(c.counters)


def _describe_predicate(fn: Predicate) -> str:
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{name}"


class Rule:
    """One rule of a :class:`~underway.guard.policy.Policy`.

    The rule applies to a call when every condition it gives holds. A condition left out
    holds for any call.

    Args:
        id: Names the rule.
        outcome: ``allow``, ``deny`` or ``require_approval``.
        description: What the rule is for.
        reason: The text journaled with the decision; defaults to ``description``.
        approver_role: Who may approve; for ``require_approval`` only.
        expires_in: Seconds an approval request stays open (default 24 h); for
            ``require_approval`` only.
        tools: Tool names or glob patterns (``lookup_*``).
        tenants: Exact tenant names.
        principals: Exact principal names.
        roles_any: The caller has at least one of these roles.
        roles_none: The caller has none of these roles.
        environments: Exact environment names.
        flows: Exact flow names.
        mutating: The tool's flag equals this.
        irreversible: The tool's flag equals this.
        labels_any: The call's inputs carry at least one of these labels (``personal``,
            ``untrusted``).
        permissions: The tool requires at least one of these.
        args: :class:`ArgCondition` tests of the arguments.
        amount: An :class:`AmountCondition`.
        counters: :class:`CounterCondition` tests of usage.
        when: A predicate ``fn(ctx) -> bool``, or a ``"module:function"`` reference. The
            reference is imported when the rule is built. It runs last, only when every other
            condition holds. If it raises or returns a non-bool the policy denies the call.
        purposes: The run's purpose is one of these.
        require_consent: A purpose. The condition holds when the run's data subject does
            *not* consent to it at the time of the call. It never did, withdrew, or the run
            names no subject. So the rule's outcome (``deny`` or ``require_approval``) is what
            happens without consent. The journaled reason says which case it was.
    """

    __slots__ = (
        "_checks", "_globs", "_names", "amount", "approver_role", "args", "counters", "description",
        "environments", "expires_in", "flows", "id", "irreversible", "labels_any", "mutating",
        "outcome", "permissions", "principals", "purposes", "reason", "require_consent",
        "roles_any", "roles_none", "tenants", "tools", "when", "when_ref",
    )

    def __init__(
        self,
        id: str,
        *,
        outcome: Outcome,
        description: str = "",
        reason: str = "",
        approver_role: str | None = None,
        expires_in: float | None = None,
        tools: Iterable[str] | None = None,
        tenants: Iterable[str] | None = None,
        principals: Iterable[str] | None = None,
        roles_any: Iterable[str] | None = None,
        roles_none: Iterable[str] | None = None,
        environments: Iterable[str] | None = None,
        flows: Iterable[str] | None = None,
        mutating: bool | None = None,
        irreversible: bool | None = None,
        labels_any: Iterable[str] | None = None,
        permissions: Iterable[str] | None = None,
        args: Sequence[ArgCondition | Mapping[str, Any]] | None = None,
        amount: AmountCondition | Mapping[str, Any] | None = None,
        counters: Sequence[CounterCondition | Mapping[str, Any]] | None = None,
        when: Predicate | str | None = None,
        purposes: Iterable[str] | None = None,
        require_consent: str | None = None,
    ) -> None:
        if not isinstance(id, str) or not id.strip():
            raise PolicyError(f"a rule needs a non-empty string id, not {id!r}", field="id")
        try:
            self._build(
                id, outcome, description, reason, approver_role, expires_in, tools, tenants,
                principals, roles_any, roles_none, environments, flows, mutating,
                irreversible, labels_any, permissions, args, amount, counters, when,
                purposes, require_consent,
            )
        except PolicyError as exc:
            raise exc.located(rule_id=id) from None

    def _build(
        self, id: str, outcome: Outcome, description: str, reason: str,
        approver_role: str | None, expires_in: float | None, tools: Iterable[str] | None,
        tenants: Iterable[str] | None, principals: Iterable[str] | None,
        roles_any: Iterable[str] | None, roles_none: Iterable[str] | None,
        environments: Iterable[str] | None, flows: Iterable[str] | None,
        mutating: bool | None, irreversible: bool | None, labels_any: Iterable[str] | None,
        permissions: Iterable[str] | None,
        args: Sequence[ArgCondition | Mapping[str, Any]] | None,
        amount: AmountCondition | Mapping[str, Any] | None,
        counters: Sequence[CounterCondition | Mapping[str, Any]] | None,
        when: Predicate | str | None, purposes: Iterable[str] | None,
        require_consent: str | None,
    ) -> None:
        self.id = id
        if outcome not in OUTCOMES:
            raise PolicyError(
                f"unknown outcome {outcome!r}; use allow, deny or require_approval",
                field="outcome",
            )
        self.outcome: Outcome = outcome
        self.description = _text(description, "description")
        self.reason = _text(reason, "reason")
        if outcome != "require_approval":
            for name, given in (("approver_role", approver_role), ("expires_in", expires_in)):
                if given is not None:
                    raise PolicyError(
                        f"applies only to outcome 'require_approval', not {outcome!r}",
                        field=name,
                    )
        if approver_role is not None:
            _text(approver_role, "approver_role")
        self.approver_role = approver_role
        if expires_in is not None and (
            isinstance(expires_in, bool) or not isinstance(expires_in, int | float)
            or not expires_in > 0
        ):
            raise PolicyError(
                f"expected a positive number of seconds, not {expires_in!r}", field="expires_in"
            )
        self.expires_in: float | None = (
            float(expires_in) if expires_in is not None
            else DEFAULT_APPROVAL_EXPIRY if outcome == "require_approval" else None
        )
        self.tools = _names(tools, "tools")
        patterns = [t for t in self.tools or () if _GLOB_CHARS & set(t)]
        self._names = (self.tools or frozenset()) - set(patterns)
        self._globs = tuple(re.compile(fnmatch.translate(p)) for p in patterns)
        self.tenants = _names(tenants, "tenants")
        self.principals = _names(principals, "principals")
        self.roles_any = _names(roles_any, "roles_any")
        self.roles_none = _names(roles_none, "roles_none")
        self.environments = _names(environments, "environments")
        self.flows = _names(flows, "flows")
        self.mutating = _flag(mutating, "mutating")
        self.irreversible = _flag(irreversible, "irreversible")
        self.labels_any = _names(labels_any, "labels_any")
        self.permissions = _names(permissions, "permissions")
        self.args: tuple[ArgCondition, ...] = _conditions(args, ArgCondition, "args")
        if amount is not None and not isinstance(amount, AmountCondition):
            try:
                amount = AmountCondition.from_dict(amount)
            except PolicyError as exc:
                raise exc.located(field_prefix="amount") from None
        self.amount: AmountCondition | None = amount
        self.counters: tuple[CounterCondition, ...] = _conditions(
            counters, CounterCondition, "counters"
        )
        self.purposes = _names(purposes, "purposes")
        for name in self.purposes or ():
            _purpose(name, "purposes")
        self.require_consent = (None if require_consent is None
                                else _purpose(require_consent, "require_consent"))
        if self.require_consent is not None and outcome == "allow":
            raise PolicyError(
                "a rule that requires consent decides what happens without it: use outcome "
                "deny or require_approval", field="outcome",
            )
        if isinstance(when, str):
            self.when_ref: str | None = when
            self.when: Predicate | None = _import_predicate(when)
        elif when is None or callable(when):
            self.when_ref = None if when is None else _describe_predicate(when)
            self.when = when
        else:
            raise PolicyError(
                f"expected a callable or a 'module:function' string, not {when!r}", field="when"
            )
        self._checks = self._compile()

    def _compile(self) -> tuple[Callable[[PolicyContext], bool], ...]:
        """The rule's conditions other than tools and the predicate, cheapest first: only
        those the rule gives, so evaluation costs what the rule asks for."""
        checks: list[Callable[[PolicyContext], bool]] = []
        add = checks.append
        if (environments := self.environments) is not None:
            add(lambda c: c.environment in environments)
        if (mutating := self.mutating) is not None:
            add(lambda c: c.mutating is mutating)
        if (irreversible := self.irreversible) is not None:
            add(lambda c: c.irreversible is irreversible)
        if (tenants := self.tenants) is not None:
            add(lambda c: c.tenant_id in tenants)
        if (roles_any := self.roles_any) is not None:
            add(lambda c: not roles_any.isdisjoint(c.roles))
        if (roles_none := self.roles_none) is not None:
            add(lambda c: roles_none.isdisjoint(c.roles))
        if (labels_any := self.labels_any) is not None:
            add(lambda c: not labels_any.isdisjoint(c.labels))
        if (permissions := self.permissions) is not None:
            add(lambda c: not permissions.isdisjoint(c.permissions))
        if (principals := self.principals) is not None:
            add(lambda c: c.principal in principals)
        if (flows := self.flows) is not None:
            add(lambda c: c.flow in flows)
        if (purposes := self.purposes) is not None:
            add(lambda c: c.purpose in purposes)
        if (amount := self.amount) is not None:
            add(lambda c: amount.holds(c.amount))
        checks.extend(_on_counters(counter) for counter in self.counters)
        checks.extend(arg.holds for arg in self.args)
        if (consent := self.require_consent) is not None:
            add(lambda c: consent_missing(c, consent) is not None)
        return tuple(checks)

    def __repr__(self) -> str:
        return f"Rule({self.id!r}, outcome={self.outcome!r})"

    def applies_to_tool(self, tool: str) -> bool:
        """Whether the rule's ``tools`` condition admits ``tool`` (True when it has none)."""
        if self.tools is None or tool in self._names:
            return True
        return any(g.match(tool) for g in self._globs)

    def matches(self, ctx: PolicyContext) -> bool:
        """Whether every condition of the rule holds for ``ctx``.

        Raises :class:`Unevaluable` when an argument cannot be compared or the predicate
        raises or returns a non-bool.
        """
        if not self.applies_to_tool(ctx.tool):
            return False
        return self.matches_besides_tool(ctx)

    def matches_besides_tool(self, ctx: PolicyContext) -> bool:
        """:meth:`matches`, for a caller that already knows the tool is admitted."""
        for check in self._checks:
            if not check(ctx):
                return False
        return self.when is None or self.ask_predicate(ctx)

    @property
    def checks(self) -> tuple[Callable[[PolicyContext], bool], ...]:
        """The rule's compiled conditions besides tools and the predicate."""
        return self._checks

    def ask_predicate(self, ctx: PolicyContext) -> bool:
        """The predicate's verdict (True without one); :class:`Unevaluable` if it raises
        or returns a non-bool."""
        if self.when is None:
            return True
        try:
            verdict = self.when(ctx)
        except Exception as exc:
            raise Unevaluable(
                f"predicate {self.when_ref} raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(verdict, bool):
            raise Unevaluable(f"predicate {self.when_ref} returned {verdict!r}, not a bool")
        return verdict

    def to_dict(self) -> dict[str, Any]:
        """The rule in the file schema, with sets sorted (what the policy digest covers)."""
        out: dict[str, Any] = {"id": self.id, "outcome": self.outcome}
        for name in ("description", "reason", "approver_role"):
            value = getattr(self, name)
            if value:
                out[name] = value
        if self.outcome == "require_approval":
            out["expires_in"] = self.expires_in
        for name in (
            "tools", "tenants", "principals", "roles_any", "roles_none", "environments",
            "flows", "labels_any", "permissions", "purposes",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = sorted(value)
        for name in ("mutating", "irreversible"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.args:
            out["args"] = [a.to_dict() for a in self.args]
        if self.amount is not None:
            out["amount"] = self.amount.to_dict()
        if self.counters:
            out["counters"] = [c.to_dict() for c in self.counters]
        if self.require_consent is not None:
            out["require_consent"] = self.require_consent
        if self.when_ref is not None:
            out["when"] = self.when_ref
        return out
