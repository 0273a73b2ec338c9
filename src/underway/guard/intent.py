"""A tool call's facts, computed once: :class:`CallIntent`.

The engine builds one intent each time a call reaches the door (a first attempt, a retry,
a re-run after a crash, a resolution or a resume) and passes that value to everything that
judges, counts or runs the call: the guard (allow-list, schema, money, budgets, policy),
the ledger (``ToolStarted``, the usage journaled with the outcome) and the tool itself.
Nothing reads the arguments a second time, so the policy, the budget and the tool cannot
disagree about what the call is. An intent holds facts only; decisions (policy, budgets,
approvals) are made from it at the moment of each attempt and never cached in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ValidationError

from ..effects import Tool, args_hash
from ..effects._summary import one_line
from ..events import JSON
from ..money import Money, Unreadable
from .budgets import Usage

__all__ = ["CallIntent"]


@dataclass(frozen=True, slots=True)
class CallIntent:
    """One call of ``tool`` with ``args``, as every check and the ledger see it.

    ``key`` and ``index`` place the call in the run (the idempotency key, journaled);
    ``args_hash`` binds approvals and the journal to the exact arguments; ``validated`` is
    the argument model the tool receives (None for an untyped tool, or when the arguments
    do not validate: then ``schema_error`` says why); ``money`` is what the call moves
    (:func:`~underway.money.read_money`, read once); ``labels`` are the data labels a
    policy sees (the tool's ``input_labels`` and the caller's); ``counts`` is what the
    call journals with its outcome and :attr:`usage` what it adds to budgets (built only
    when a budget asks; None when the money cannot be read: the guard refuses such a call
    first).
    """

    tool: Tool
    args: JSON
    key: str
    index: int
    args_hash: str
    labels: frozenset[str]
    evidence: JSON
    risks: tuple[str, ...]
    validated: BaseModel | None
    schema_error: ValidationError | None
    money: Money | Unreadable | None
    counts: dict[str, float] | None
    summary: str | None = None

    @classmethod
    def of(
        cls, tool: Tool, args: JSON, *, key: str, index: int, h: str | None = None,
        labels: frozenset[str] = frozenset(), evidence: JSON = None,
        risks: tuple[str, ...] = (), summary: str | None = None,
    ) -> CallIntent:
        """Compute the facts of a call of ``tool`` with ``args``.

        Args:
            tool: The tool.
            args: The call's arguments.
            key: The call's idempotency key.
            index: The call's index within its step.
            h: Its args hash, when the caller already has it.
            labels: The caller's data labels for the inputs.
            evidence: What the caller shows an approver.
            risks: The risks the caller names, shown to an approver.
            summary: The caller's one-line summary for an approver.
        """
        validated: BaseModel | None = None
        schema_error: ValidationError | None = None
        if tool.args_model is not None:
            try:
                validated = tool.args_model.model_validate(args)
            except ValidationError as exc:
                schema_error = exc
        # A tool that declares no amount moves no money (read_money's first answer).
        money = None if tool.amount is None or tool.currency is None \
            else tool.money(args, validated=validated)
        counts: dict[str, float] | None = None
        if not isinstance(money, Unreadable):
            found: dict[str, float] = {}
            if tool.message:
                found["messages"] = 1
            if money is not None:
                found[f"money.{money.currency}"] = money.counted()
            counts = found or None
        return cls(
            tool=tool, args=args, key=key, index=index,
            args_hash=h if h is not None else args_hash(tool.name, args),
            labels=frozenset(tool.input_labels) | labels, evidence=evidence,
            risks=tuple(risks), validated=validated, schema_error=schema_error,
            money=money, counts=counts, summary=one_line(summary) if summary else None,
        )

    @property
    def usage(self) -> Usage | None:
        """What the call adds to a budget's usage: one tool call, a message when the tool
        sends one, the money it moves (None when the money cannot be read)."""
        money = self.money
        if isinstance(money, Unreadable):
            return None
        return Usage(
            tool_calls=1, messages=1 if self.tool.message else 0,
            money={money.currency: money.counted()} if money is not None else {},
        )

    def for_approver(self) -> dict[str, JSON]:
        """What an approval request shows of the call besides its arguments: its one-line
        ``summary`` (the caller's, else the tool's template) and the ``money`` the guard
        read (``amount`` as a decimal string, ``currency``, ``direction``, ``account``)."""
        summary = self.summary or self.tool.summary_of(self.args, self.money)
        m = self.money
        if not isinstance(m, Money):
            return {"summary": summary, "money": None}
        shown: dict[str, JSON] = {"amount": str(m.amount), "currency": m.currency,
                                  "direction": m.direction}
        account = self.tool.account_of(self.args)
        if account is not None:
            shown["account"] = account
        return {"summary": summary, "money": shown}

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.tool.name

    @property
    def refusal(self) -> str | None:
        """Why the call must be refused before any rule or budget looks at its money (the
        money cannot be read), else None."""
        return str(self.money) if isinstance(self.money, Unreadable) else None

    @property
    def policy_args(self) -> Mapping[str, JSON]:
        """The arguments as a policy matches on them (a non-object under ``value``)."""
        return self.args if isinstance(self.args, Mapping) else {"value": self.args}
