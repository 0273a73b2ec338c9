"""The :class:`Tool`: a named effect, its options checked when it is declared, and its
call."""

from __future__ import annotations

import asyncio
import inspect
import typing
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Secret,
    SecretBytes,
    SecretStr,
    ValidationError,
    model_validator,
)
from typing_extensions import TypeVar

from ..egress import host_patterns
from ..errors import ConfigurationError, ResultInvalid
from ..events import JSON, canonical_json
from ..hooks import DEFAULT_HOOK_TIMEOUT, call_hook
from ..money import Direction, Money, Unreadable, read_money, valid_currency
from ..redaction import Hidden
from ..retry import CircuitBreaker, RetryPolicy
from ._bounded import bounded
from ._ledger import COMPENSATE_SUFFIX, CallInfo, ReconcileFn, ToolFn
from ._summary import argument_at, check_template, render_summary


def _undone(out: object) -> str | None:
    """What is wrong with a compensate hook's answer ``out`` (None: nothing)."""
    if out is None:
        return "answered nothing (None); an undo says what it did"
    if isinstance(out, BaseModel):
        return None
    try:
        canonical_json(out)
    except (TypeError, ValueError) as exc:
        return f"answered a {type(out).__name__}, which is not JSON ({exc})"
    return None


A = TypeVar("A", default=Any)
"""A tool's argument type (its argument model, or the JSON it takes)."""
R = TypeVar("R", default=Any)
"""A tool's result type: its result model, or the JSON it returns."""
SyncResult = TypeVar(
    "SyncResult", bound=BaseModel | dict[str, Any] | list[Any] | str | int | float | bool | None
)


class NoArgs(BaseModel):
    """The arguments of a tool whose function takes none: nothing (``None`` or ``{}``);
    any field is a schema error, so a call cannot pass arguments the tool would drop."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _nothing(cls, value: Any) -> Any:
        return {} if value is None else value


@dataclass(frozen=True)
class Tool(Generic[A, R]):
    """A named effect a step performs through ``ctx.call``.

    ``Tool[A, R]`` takes arguments of type ``A`` and returns ``R``: a tool declared with a
    result model (``async def f(args: Refund) -> Receipt``) gives ``ctx.call`` a
    ``Receipt``, validated from the journaled JSON on every run and replay; an untyped
    tool gives its JSON.

    ``mutating`` tools change the world and are journaled write-ahead (``read_only`` ones
    are not); ``idempotent`` tools may safely run again with the same key;
    ``irreversible`` ones cannot be undone and are never run twice on their own;
    ``reconcile`` asks the outside system what happened to a key; ``compensate`` undoes a
    completed call (see :meth:`compensation`); ``hook_timeout`` (seconds) bounds both
    hooks (one that fails in any way escalates to a person); ``timeout`` (seconds)
    cancels a call that runs too long; ``retry`` retries failures on durable timers;
    ``circuit`` fails fast after repeated failures. ``permissions``, ``input_labels`` /
    ``output_labels`` (data sensitivity, e.g. ``personal``), ``amount`` / ``currency``
    (where the money a call moves sits in its arguments), ``money_direction`` (which way
    it moves, see :mod:`underway.money`) and ``message`` (the call sends a message to a
    person) are what policies and budgets see. ``secrets`` names the secrets fetched for
    each call into :attr:`CallInfo.secrets`. ``sandbox`` is the isolation profile of a
    shell or code tool, hashed into its ``ToolStarted`` event. ``hosts`` is the tool's
    egress allow-list (:mod:`underway.egress`): when given, :mod:`underway.http` refuses
    requests to any other host and the refusal is journaled; None (default) restricts
    nothing.

    Traces (:class:`underway.telemetry.Tracing`) record no argument or result value unless
    the tool opts in: ``trace_args`` / ``trace_result`` are True (every field) or the
    dotted paths of the fields to record (``("invoice", "customer.id")``). A field named
    in ``sensitive``, at any depth, or typed ``SecretStr``, ``SecretBytes`` or ``Secret``
    in the argument or result model, is never recorded, whatever the opt-in says; naming
    one in ``trace_args`` or ``trace_result`` is a :class:`ConfigurationError`.

    Taint and provenance (:mod:`underway.guard.taint`, :mod:`underway.guard.provenance`):
    an agent treats every tool's output as untrusted unless the tool declares
    ``trusted_output`` (its author vouches for every byte it returns, e.g. fields of one's
    own database that no outsider can write). Once untrusted content is in an agent's
    context, each argument of a call of a mutating tool, a message tool or an ``outbound``
    read-only tool (whose arguments leave the system) is traced to its sources. An
    argument not derivable from trusted sources holds the call, unless the tool lists it in
    ``untrusted_args`` (content such as an e-mail's body) or declares ``untrusted_ok`` (safe
    whatever its arguments say).
    """

    name: str
    fn: ToolFn
    mutating: bool = True
    idempotent: bool = False
    timeout: float = 30.0
    reconcile: ReconcileFn | None = None
    hook_timeout: float = DEFAULT_HOOK_TIMEOUT
    """Seconds its ``reconcile`` and ``compensate`` hooks may take: one that runs longer,
    raises or answers wrongly escalates the call to a person (:mod:`underway.hooks`)."""
    hook: str | None = field(default=None, repr=False)
    """The hook this tool runs instead of an effect of its own (``compensate``, for the
    tool :meth:`compensation` makes): called through :func:`~underway.hooks.call_hook`."""
    args_model: type[BaseModel] | None = field(default=None, repr=False)
    result_model: type[BaseModel] | None = field(default=None, repr=False)
    wants_call_info: bool = field(default=False, repr=False)
    takes_args: bool = field(default=True, repr=False)
    retry: RetryPolicy | None = None
    circuit: CircuitBreaker | None = None
    description: str = ""
    irreversible: bool = False
    compensate: ToolFn | None = field(default=None, repr=False)
    permissions: tuple[str, ...] = ()
    input_labels: tuple[str, ...] = ()
    output_labels: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    amount: str | None = None
    """Dotted path of the argument holding the money this call moves."""
    currency: str | None = None
    """The currency of ``amount``: a code (``"INR"``) or, prefixed ``arg:``, the dotted
    path of the argument holding it (``"arg:currency"``)."""
    money_direction: Direction = "both"
    """``out``: the tool pays; ``in``: it collects; a negative amount is then refused.
    ``both`` (default): the sign says which way, and either way counts."""
    account: str | None = None
    """Dotted path of the argument naming the account the money moves out of (or into):
    an approver reads "moves ₹2,32,000.00 out of <account>"."""
    summary: str | None = None
    """A one-line summary template an approver reads (``"Pay {amount:money} to
    {supplier}"``): dotted paths of arguments only (:mod:`underway.effects._summary`)."""
    message: bool = False
    sandbox: Any = field(default=None, repr=False)
    trusted_output: bool = False
    """Its results (and errors) are trusted: they do not taint an agent's context."""
    untrusted_ok: bool = False
    """Safe to call with arguments derived from untrusted content: never labelled."""
    untrusted_args: tuple[str, ...] = ()
    """The arguments that may carry untrusted content (``body``); the others may not
    (:mod:`underway.guard.provenance`)."""
    trusted_fields: tuple[str, ...] = ()
    """Dotted paths of result fields no outsider writes, in a result that is otherwise
    untrusted (``emails.id``: list items are crossed): ids and names the system assigns."""
    outbound: bool = False
    """A read-only tool whose arguments leave the system; labelled like a mutating one."""
    trace_args: bool | tuple[str, ...] = False
    """Record the call's arguments on its span: True (every field), or these fields."""
    trace_result: bool | tuple[str, ...] = False
    """Record the call's result on its span: True (every field), or these fields."""
    sensitive: tuple[str, ...] = ()
    """Names of argument and result fields (at any depth) that are never traced and that
    viewers see only when allowed to (:attr:`hidden`)."""
    hosts: tuple[str, ...] | None = None
    """The hosts the tool may reach (``api.example.com``, ``*.bank.in``); None: any."""

    def __post_init__(self) -> None:
        if not self.hook_timeout > 0:
            raise ConfigurationError(
                f"tool {self.name!r}: hook_timeout must be a positive number of seconds, "
                f"not {self.hook_timeout!r}")
        if self.hosts is not None:
            object.__setattr__(self, "hosts", host_patterns(self.hosts,
                                                            owner=f"tool {self.name!r}"))
        # The label is underway.guard.taint.UNTRUSTED, spelt out: the guard sits above tools.
        if self.trusted_output and "untrusted" in self.output_labels:
            raise ConfigurationError(
                f"tool {self.name!r} declares trusted_output and the output label "
                "'untrusted'; keep one"
            )
        self._check_untrusted_args()
        if self.irreversible and self.idempotent:
            raise ConfigurationError(
                f"tool {self.name!r} cannot be both irreversible and idempotent"
            )
        if self.irreversible and not self.mutating:
            raise ConfigurationError(f"tool {self.name!r} is irreversible, so it is mutating")
        if self.amount is not None and self.currency is None:
            raise ConfigurationError(
                f"tool {self.name!r} declares amount={self.amount!r} without a currency; "
                "pass currency='INR' or currency='arg:<path>'"
            )
        if self.currency is not None and not self.currency.startswith("arg:"):
            code = valid_currency(self.currency)
            if code is None:
                raise ConfigurationError(
                    f"tool {self.name!r}: currency {self.currency!r} is not a three-letter "
                    "code such as 'INR', nor 'arg:<path>'"
                )
            object.__setattr__(self, "currency", code)
        if self.args_model is not None:
            fields = self.args_model.model_fields
            names = set(fields) | {f.alias for f in fields.values() if f.alias}
            for path in (self.amount, (self.currency or "")[4:] or None, self.account):
                if path is not None and path.split(".")[0] not in names:
                    raise ConfigurationError(
                        f"tool {self.name!r} reads money from argument {path!r}, which its "
                        f"argument model {self.args_model.__name__} does not have"
                    )
        if self.summary is not None:
            check_template(self.summary, tool=self.name)
        if self.money_direction not in ("out", "in", "both"):
            raise ConfigurationError(
                f"tool {self.name!r}: money_direction must be 'out', 'in' or 'both', not "
                f"{self.money_direction!r}"
            )
        for option in ("trace_args", "trace_result"):
            chosen = getattr(self, option)
            if isinstance(chosen, bool):
                continue
            if isinstance(chosen, str):
                raise ConfigurationError(
                    f"tool {self.name!r}: {option} is True or a tuple of field paths, not "
                    f"the string {chosen!r}")
            object.__setattr__(self, option, tuple(chosen))
            for path in chosen:
                hidden = [p for p in path.split(".") if p in self.never_traced]
                if not path or hidden:
                    raise ConfigurationError(
                        f"tool {self.name!r}: {option} names {path!r}, "
                        + (f"which holds the sensitive field {hidden[0]!r}: sensitive fields "
                           "are never traced" if hidden else "an empty path"))

    def _check_untrusted_args(self) -> None:
        names = self.untrusted_args
        if isinstance(names, str):
            raise ConfigurationError(
                f"tool {self.name!r}: untrusted_args must be a list of argument names, not "
                f"the string {names!r}")
        paths = self.trusted_fields
        if isinstance(paths, str) or any(not isinstance(p, str) or not p.strip(". ")
                                         for p in paths):
            raise ConfigurationError(
                f"tool {self.name!r}: trusted_fields must be a list of dotted result paths "
                f"(such as 'emails.id'), not {paths!r}")
        if paths and self.trusted_output:
            raise ConfigurationError(
                f"tool {self.name!r} declares trusted_output (every field is trusted) and "
                f"trusted_fields {list(paths)}; keep one")
        if names and self.untrusted_ok:
            raise ConfigurationError(
                f"tool {self.name!r} declares untrusted_ok (every argument may carry "
                f"untrusted content) and untrusted_args {list(names)}; keep one")
        fields = getattr(self.args_model, "model_fields", None)
        unknown = sorted(set(names) - set(fields)) if fields is not None else []
        if unknown:
            raise ConfigurationError(
                f"tool {self.name!r}: untrusted_args names {unknown}, which are not among "
                f"its arguments {sorted(fields or ())}")

    @cached_property
    def hidden(self) -> Hidden:
        """The fields of its arguments and results that viewers do not see
        (:mod:`underway.redaction`): :attr:`sensitive` ones, shown only to a viewer who
        may reveal them, and secrets — the fields of the argument and result models typed
        ``SecretStr``, ``SecretBytes`` or ``Secret`` — shown to nobody."""
        secret = _secret_fields(self.args_model) | _secret_fields(self.result_model)
        return Hidden(frozenset(self.sensitive) - secret, secret)

    @cached_property
    def declared_hidden(self) -> dict[str, Any]:
        """The fields its events declare its hidden fields with (:meth:`Hidden.declared`
        of :attr:`hidden`), made once: every call's events carry them."""
        return self.hidden.declared()

    @cached_property
    def is_async(self) -> bool:
        """True when :attr:`fn` is a coroutine function (awaited on the event loop; any
        other function runs on a thread)."""
        return inspect.iscoroutinefunction(self.fn)

    @cached_property
    def never_traced(self) -> frozenset[str]:
        """The field names no trace records: :attr:`sensitive`, and the fields of the
        argument and result models typed ``SecretStr`` or ``SecretBytes``."""
        return self.hidden.sensitive | self.hidden.secret

    @property
    def traced(self) -> bool:
        """True when traces may record some of this tool's arguments or results."""
        return bool(self.trace_args or self.trace_result)

    @property
    def read_only(self) -> bool:
        """True for a tool that changes nothing (no write-ahead intent)."""
        return not self.mutating

    def spec(self) -> dict[str, JSON]:
        """The tool as a model sees it: name, description and JSON Schema of its arguments."""
        params: dict[str, JSON] = (
            self.args_model.model_json_schema() if self.args_model is not None
            else {"type": "object"}
        )
        return {"name": self.name, "description": self.description, "parameters": params}

    def result_schema(self) -> dict[str, JSON] | None:
        """JSON Schema of the tool's result, when it declares a result model."""
        return self.result_model.model_json_schema() if self.result_model is not None else None

    def money(
        self, args: JSON, *, validated: BaseModel | None = None
    ) -> Money | Unreadable | None:
        """The money a call with ``args`` moves (:func:`underway.money.read_money`);
        ``validated``: the arguments already validated by :attr:`args_model`."""
        return read_money(self, args, validated=validated)

    def summary_of(self, args: JSON, money: Money | Unreadable | None) -> str | None:
        """The one-line summary of a call with ``args`` from :attr:`summary` (None when
        the tool declares no template); ``money``: what the guard read for the call."""
        if self.summary is None:
            return None
        return render_summary(self.summary, args, money if isinstance(money, Money) else None)

    def account_of(self, args: JSON) -> str | None:
        """The account a call with ``args`` moves money out of or into, as text (None when
        the tool names no :attr:`account` or the argument holds none)."""
        if self.account is None:
            return None
        found = argument_at(args, self.account)
        return None if found is None or isinstance(found, dict | list) else str(found)

    def parse_result(self, result: JSON, *, key: str) -> R:
        """The journaled ``result`` of call ``key`` as this tool declares it: its result
        model, validated (the journal keeps JSON), or the JSON itself for an untyped tool.
        Raises :class:`~underway.errors.ResultInvalid` naming the tool, the key and the
        fields when the journaled result no longer fits the model (the code changed)."""
        if self.result_model is None:
            return cast(R, result)
        try:
            return cast(R, self.result_model.model_validate(result))
        except ValidationError as exc:
            fields = sorted({".".join(map(str, e["loc"])) or "(root)" for e in exc.errors()})
            raise ResultInvalid(self.name, key, self.result_model.__name__, fields,
                                str(exc)) from exc

    def compensation(self) -> Tool[Any, Any]:
        """The tool that undoes this one: ``await ctx.call(t.compensation(), {"args": ...,
        "result": ...})`` runs the ``compensate`` hook through the effect ledger (mutating,
        idempotent, with its own key)."""
        if self.compensate is None:
            raise ConfigurationError(f"tool {self.name!r} has no compensate hook")
        return Tool(
            name=f"{self.name}{COMPENSATE_SUFFIX}", fn=self.compensate, mutating=True,
            idempotent=True, timeout=self.hook_timeout, hook_timeout=self.hook_timeout,
            hook="compensate", retry=self.retry,
            wants_call_info=len(inspect.signature(self.compensate).parameters) >= 2,
            description=f"undo a completed {self.name} call",
        )

    def compensator(self, fn: ToolFn) -> ToolFn:
        """Attach ``fn(payload)`` (payload ``{"args": ..., "result": ...}``) as the hook that
        undoes a completed call; usable as a decorator."""
        object.__setattr__(self, "compensate", fn)
        return fn

    def reconciler(self, fn: ReconcileFn) -> ReconcileFn:
        """Attach ``fn`` as this tool's reconcile hook; usable as a decorator::

            @send_sms.reconciler
            async def was_sent(key: str) -> Reconciled: ...

        The tool object itself gains the hook, so every step holding it reconciles.
        """
        object.__setattr__(self, "reconcile", fn)
        return fn

    async def invoke(
        self, args: JSON, info: CallInfo | None, *, validated: BaseModel | None = None
    ) -> JSON:
        """Run the tool once with validated arguments.

        Args:
            args: The call's arguments.
            info: The call's :class:`CallInfo` (needed only when :attr:`wants_call_info`).
            validated: ``args`` already validated by :attr:`args_model`; else they are
                validated here.

        Returns:
            Its JSON result.
        """
        value: Any = args
        if validated is not None:
            value = validated
        elif self.args_model is not None:
            value = self.args_model.model_validate(args)
        call_args: tuple[Any, ...] = (
            (value, info) if self.wants_call_info else (value,) if self.takes_args else ()
        )
        if self.hook is not None:
            owner = f"tool {self.name.removesuffix(COMPENSATE_SUFFIX)!r}"
            out = await call_hook(self.hook, owner, self.fn, *call_args,
                                  timeout=self.hook_timeout, answer=_undone)
            return out.model_dump(mode="json") if isinstance(out, BaseModel) else out
        # Bounded in the caller's task (no extra task per call, unlike wait_for), and
        # without a timer when the call returns without waiting (see ._bounded).
        if self.is_async:
            out = await bounded(self.fn(*call_args), self.timeout)
        else:
            async with asyncio.timeout(self.timeout):
                out = await asyncio.to_thread(self.fn, *call_args)
        if isinstance(out, BaseModel):
            return out.model_dump(mode="json")
        return out


def is_model(t: object) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _secret_fields(model: type[BaseModel] | None, seen: frozenset[type] = frozenset()
                   ) -> frozenset[str]:
    """Names of the fields of ``model`` (and of the models inside it) typed as secrets."""
    if model is None or model in seen:
        return frozenset()
    names: set[str] = set()
    for name, info in model.model_fields.items():
        todo, kinds = [info.annotation], []
        while todo:
            t = todo.pop()
            kinds.append(typing.get_origin(t) or t)
            todo.extend(typing.get_args(t))
        for t in kinds:
            if not isinstance(t, type):
                continue
            if issubclass(t, SecretStr | SecretBytes | Secret):
                names.update(n for n in (name, info.alias) if n)
            elif issubclass(t, BaseModel):
                names |= _secret_fields(t, seen | {model})
    return frozenset(names)

