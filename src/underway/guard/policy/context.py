"""What a policy sees of a tool call (:class:`PolicyContext`) and what it answers
(:class:`Decision`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, Protocol

from .errors import PolicyError

__all__ = ["FINISH", "Amount", "Consent", "Decision", "Outcome", "PolicyContext"]

Outcome = Literal["allow", "deny", "require_approval"]
"""What a policy decides for one call."""

DEFAULT_APPROVAL_EXPIRY = 24 * 3600.0
"""Seconds an approval request stays open unless its rule says otherwise."""


def to_decimal(value: object) -> Decimal | None:
    """``value`` as a finite Decimal (floats by their shortest repr), or None if it is not a
    number or a numeric string. Booleans are not numbers here."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Decimal):
        d = value
    elif isinstance(value, int):
        return Decimal(value)
    elif isinstance(value, float | str):
        try:
            d = Decimal(repr(value) if isinstance(value, float) else value.strip())
        except InvalidOperation:
            return None
    else:
        return None
    return d if d.is_finite() else None


FINISH = "run.finish"
"""The name a rule gives in ``tools`` to decide on a run's finish (its result), as on one
more call: the labels are ``untrusted`` and ``source:<source>`` when untrusted content
shaped the result (``docs/policy.md#the-finish``)."""

@dataclass(frozen=True, slots=True)
class Amount:
    """Money a call moves. Amounts compare only within the same currency.

    ``value`` may be given as an int, a numeric string or a float (read by its shortest
    repr) and is kept as a :class:`~decimal.Decimal`; ``currency`` is kept upper-case.
    """

    value: Decimal
    currency: str

    def __post_init__(self) -> None:
        value = to_decimal(self.value)
        if value is None:
            raise PolicyError(f"amount {self.value!r} is not a finite number", field="amount")
        if not isinstance(self.currency, str) or not self.currency.strip():
            raise PolicyError(
                f"amount currency must be a code such as 'INR', not {self.currency!r}",
                field="amount.currency",
            )
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "currency", self.currency.strip().upper())


class Consent(Protocol):
    """Where a subject's consent for one purpose stands, as a policy reads it (the latest
    :class:`~underway.store.records.ConsentRecord` of the subject and purpose)."""

    @property
    def state(self) -> str:
        """``granted`` or ``withdrawn``."""
        ...

    @property
    def reference(self) -> str | None:
        """The consent artefact the change was recorded with."""
        ...

    @property
    def by(self) -> str:
        """Who recorded the change."""
        ...

    @property
    def at(self) -> float:
        """When (epoch seconds)."""
        ...


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """Everything a policy may look at before one tool call.

    ``permissions`` are the permissions the tool requires; ``labels`` are the sensitivity
    labels of its inputs plus taint labels such as ``untrusted``; ``amount`` is the money
    the call moves (read from the tool's declared amount field by
    :func:`underway.money.read_money`: its size, whichever way it moves; a call whose money
    cannot be read is denied before any rule sees it); ``counters`` are usage counts
    such as ``run.tool_calls``, ``tenant.messages.today``, ``run.calls.<tool>`` or
    ``run.money.INR`` (a counter that is absent counts as 0).

    ``subject`` is the data subject the run is about (None: it names none), ``purpose``
    what the run is for; ``consents`` holds where the subject's consent stands, by
    purpose, for the purposes the policy's rules require consent for (read from the
    consent store for this very call; a purpose with no record is absent).
    """

    tenant_id: str
    principal: str | None
    roles: frozenset[str]
    environment: str
    flow: str
    tool: str
    mutating: bool
    irreversible: bool
    permissions: frozenset[str]
    args: Mapping[str, Any]
    labels: frozenset[str]
    amount: Amount | None
    counters: Mapping[str, float]
    subject: str | None = None
    purpose: str = "operations"
    consents: Mapping[str, Consent] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer for one call, and why.

    ``rule_id`` is the rule that decided (None when no rule matched and the default
    applied); ``policy_version`` is the version of the policy that decided. For
    ``require_approval``, ``approver_role`` says who may approve and ``expires_in`` how
    many seconds the request stays open.
    """

    outcome: Outcome
    rule_id: str | None
    policy_version: str
    reason: str
    approver_role: str | None = None
    expires_in: float | None = None

    @property
    def allowed(self) -> bool:
        """True when the call may run without anyone's approval."""
        return self.outcome == "allow"


APPROVAL_LABEL = "approval.required"
"""The label of a call whose tool declares that a person approves each call (pydantic-ai's
``requires_approval``, the Agents SDK's ``needs_approval``). ``approval.required:<role>``
names who may approve. The guard holds such a call for a signed decision whatever the
policy says, unless the policy denies it."""


def approval_label(role: str | None = None) -> str:
    """The label that holds a call for a signed approval, by an approver of ``role``.

    Args:
        role: The approvers' role (None: the policy's, else any approver's).
    """
    return APPROVAL_LABEL if role is None else f"{APPROVAL_LABEL}:{role}"


def declares_approval(labels: frozenset[str] | set[str]) -> bool:
    """Whether ``labels`` declare that the call needs a person's approval.

    Args:
        labels: The call's labels.
    """
    return any(x == APPROVAL_LABEL or x.startswith(APPROVAL_LABEL + ":") for x in labels)


def declared_approval(decision: Decision, labels: frozenset[str] | set[str]) -> Decision:
    """``decision``, held for a signed approval when ``labels`` declare that the call
    needs one (:data:`APPROVAL_LABEL`). A deny stands; an approval the policy already
    asks for keeps its rule, taking the declared role where the rule names none.

    Args:
        decision: The policy's decision (or the allow of no policy).
        labels: The call's labels.
    """
    if not declares_approval(labels) or decision.outcome == "deny":
        return decision
    declared = [x for x in labels if x.startswith(APPROVAL_LABEL + ":")]
    roles = sorted(x.partition(":")[2] for x in declared)
    role = roles[0] if roles else None
    if decision.outcome == "require_approval":
        if decision.approver_role is None and role is not None:
            return dataclasses.replace(decision, approver_role=role)
        return decision
    return Decision("require_approval", "tool-requires-approval", decision.policy_version,
                    "the tool declares that a person approves each call", approver_role=role)
