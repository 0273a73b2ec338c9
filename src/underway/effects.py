"""Tools, model calls and the write-ahead effect ledger's vocabulary.

A :class:`Tool` wraps an async (or sync) function. A *mutating* tool gets an intent
(``ToolStarted``) committed before it runs and its outcome after; on recovery an intent
without an outcome is an *unknown outcome*, handled by :func:`resolution_for`: an
idempotent tool is retried with the same idempotency key, a tool with a ``reconcile`` hook
is asked what happened, any other tool escalates to a person. Read-only tools skip the
intent. The idempotency key is ``{run_id}:{ordinal}:{step}:{index}``: the same on every
attempt, and new each time a loop visits the step again.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, Literal, Protocol, TypedDict, cast, overload

from pydantic import (
    BaseModel,
    ConfigDict,
    Secret,
    SecretBytes,
    SecretStr,
    ValidationError,
    model_validator,
)
from typing_extensions import TypeVar, Unpack

from .egress import Egress, host_patterns
from .errors import ConfigurationError, ResultInvalid
from .events import JSON, canonical_json
from .hooks import DEFAULT_HOOK_TIMEOUT, call_hook
from .money import Direction, Money, Unreadable, read_money, valid_currency
from .redaction import Hidden
from .retry import CircuitBreaker, RetryPolicy

COMPENSATE_SUFFIX = ".compensate"
"""Added to a tool's name to name the tool that undoes it (:meth:`Tool.compensation`)."""


def idempotency_key(run_id: str, step: str, index: int, *, ordinal: int) -> str:
    """The deterministic key of call ``index`` in ``step`` of ``run_id``.

    ``ordinal`` is how many steps the run completed before this one, so a step that a
    ``goto`` loop visits again gets fresh keys while a re-run after a crash gets the same.
    """
    return f"{run_id}:{ordinal}:{step}:{index}"


def args_hash(tool: str, args: JSON) -> str:
    """SHA-256 of the tool name and its canonical arguments."""
    return hashlib.sha256(tool.encode() + b"\x00" + canonical_json(args)).hexdigest()


@dataclass(frozen=True, slots=True)
class CallInfo:
    """Handed to a tool that accepts a second parameter: who is calling, with which key."""

    key: str
    tenant_id: str
    run_id: str
    step: str
    index: int
    fence: int = 0
    """The run's fence (:func:`fence_of`: the caller's lease token, then the run's journal
    position). It only grows per run; an outside system that remembers the highest
    fence it saw per run and refuses lower ones stops a worker that lost its lease
    (paused, partitioned) from acting after its successor, and a request whose call timed
    out from arriving after the reconcile query that found it had not."""
    principal: str | None = None
    """Who the run acts for."""
    roles: tuple[str, ...] = ()
    """The principal's roles."""
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The secrets the tool declared, fetched from the engine's secret provider for this
    call only; never journaled, logged or traced (``repr`` hides them)."""
    egress: Egress | None = field(default=None, repr=False, compare=False)
    """The hosts this call may reach, when its tool declares them (:mod:`underway.egress`):
    :func:`underway.http.request` refuses any other, and the engine journals the refusal."""


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What a ``reconcile(key)`` hook found out about an effect of unknown outcome.

    ``happened``: the effect took place, ``result`` is its result. ``not_happened``: it
    never took place and is safe to run. ``unknown``: nobody can tell; escalate.
    """

    outcome: Literal["happened", "not_happened", "unknown"]
    result: JSON = None

    @classmethod
    def happened(cls, result: JSON = None) -> Reconciled:
        """The effect took place with this result."""
        return cls("happened", result)

    @classmethod
    def not_happened(cls) -> Reconciled:
        """The effect never took place."""
        return cls("not_happened")

    @classmethod
    def unknown(cls) -> Reconciled:
        """The outside system cannot tell."""
        return cls("unknown")


ToolFn = Callable[..., Awaitable[Any]] | Callable[..., Any]
ReconcileFn = Callable[[str], Awaitable[Reconciled]] | Callable[[str, "CallInfo"],
                                                              Awaitable[Reconciled]]
"""A reconcile hook: ``reconcile(key)``, or ``reconcile(key, info)`` to receive the
:class:`CallInfo` of the query, whose ``fence`` a fence-checking outside system should be
sent (see :func:`fence_of`)."""

FENCE_STRIDE = 1 << 32
"""How far apart the fences of two lease tokens are (see :func:`fence_of`)."""


def fence_of(lease_token: int, seq: int) -> int:
    """The fence of a run's calls: it grows with the lease token (a new holder of the
    run) and, within one lease, with the run's journal (``seq``: its last event,
    committed or about to be). A reconcile query is sent with the fence of ``seq + 1``,
    above the attempt in doubt and at most the fence of every call after it, so an
    outside system that remembers the highest fence per run refuses that attempt if it
    arrives after the query — also when the same worker made it under the same lease (a
    call that timed out while its request was still on its way)."""
    return lease_token * FENCE_STRIDE + min(seq, FENCE_STRIDE - 1)


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

    Taint (see ``docs/agent.md``): an agent treats every tool's output as untrusted unless
    the tool declares ``trusted_output`` (its author vouches for every byte it returns,
    e.g. fields of one's own database that no outsider can write). Once untrusted content
    is in an agent's context, its calls of mutating tools, message tools and ``outbound``
    read-only tools (whose arguments leave the system: a web search, a third-party API)
    carry the ``untrusted`` label, unless the tool declares ``untrusted_ok`` (safe whatever
    its arguments say).
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
    message: bool = False
    sandbox: Any = field(default=None, repr=False)
    trusted_output: bool = False
    """Its results (and errors) are trusted: they do not taint an agent's context."""
    untrusted_ok: bool = False
    """Safe to call with arguments derived from untrusted content: never labelled."""
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
        if self.trusted_output and "untrusted" in self.output_labels:
            raise ConfigurationError(
                f"tool {self.name!r} declares trusted_output and the output label "
                "'untrusted'; keep one"
            )
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
            for path in (self.amount, (self.currency or "")[4:] or None):
                if path is not None and path.split(".")[0] not in names:
                    raise ConfigurationError(
                        f"tool {self.name!r} reads money from argument {path!r}, which its "
                        f"argument model {self.args_model.__name__} does not have"
                    )
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
        self, args: JSON, info: CallInfo, *, validated: BaseModel | None = None
    ) -> JSON:
        """Run the tool once with validated arguments; return its JSON result.
        ``validated``: ``args`` already validated by :attr:`args_model` (else validated
        here)."""
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
        # asyncio.timeout rather than wait_for: no extra task per call (a measurable share
        # of a no-op step, see bench/), same TimeoutError and cancellation of the call.
        async with asyncio.timeout(self.timeout):
            if self.is_async:
                out = await self.fn(*call_args)
            else:
                out = await asyncio.to_thread(self.fn, *call_args)
        if isinstance(out, BaseModel):
            return out.model_dump(mode="json")
        return out


class ToolOptions(TypedDict, total=False):
    """The options of :func:`tool` (see :class:`Tool` for each)."""

    name: str | None
    mutating: bool
    idempotent: bool
    timeout: float
    reconcile: ReconcileFn | None
    hook_timeout: float
    retry: RetryPolicy | None
    circuit: CircuitBreaker | None
    read_only: bool | None
    irreversible: bool
    compensate: ToolFn | None
    permissions: tuple[str, ...]
    input_labels: tuple[str, ...]
    output_labels: tuple[str, ...]
    secrets: tuple[str, ...]
    amount: str | None
    currency: str | None
    money_direction: Direction
    message: bool
    description: str | None
    trusted_output: bool
    untrusted_ok: bool
    outbound: bool
    trace_args: bool | tuple[str, ...]
    trace_result: bool | tuple[str, ...]
    sensitive: tuple[str, ...]
    hosts: Iterable[str] | None


class ToolDecorator(Protocol):
    """What ``@tool(...)`` with options returns: it makes a :class:`Tool` of a function,
    typed by the function's argument and result annotations."""

    @overload
    def __call__(self, fn: Callable[[], Awaitable[R]], /) -> Tool[None, R]: ...
    @overload
    def __call__(self, fn: Callable[[A], Awaitable[R]], /) -> Tool[A, R]: ...
    @overload
    def __call__(self, fn: Callable[[A, CallInfo], Awaitable[R]], /) -> Tool[A, R]: ...
    @overload
    def __call__(self, fn: Callable[..., SyncResult], /) -> Tool[Any, SyncResult]: ...


@overload
def tool(fn: Callable[[], Awaitable[R]], /, **options: Unpack[ToolOptions]) -> Tool[None, R]: ...
@overload
def tool(fn: Callable[[A], Awaitable[R]], /, **options: Unpack[ToolOptions]) -> Tool[A, R]: ...
@overload
def tool(
    fn: Callable[[A, CallInfo], Awaitable[R]], /, **options: Unpack[ToolOptions]
) -> Tool[A, R]: ...
@overload
def tool(
    fn: Callable[..., SyncResult], /, **options: Unpack[ToolOptions]
) -> Tool[Any, SyncResult]: ...
@overload
def tool(fn: None = None, /, **options: Unpack[ToolOptions]) -> ToolDecorator: ...


def tool(
    fn: ToolFn | None = None,
    /,
    *,
    name: str | None = None,
    mutating: bool = True,
    idempotent: bool = False,
    timeout: float = 30.0,
    reconcile: ReconcileFn | None = None,
    hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
    retry: RetryPolicy | None = None,
    circuit: CircuitBreaker | None = None,
    read_only: bool | None = None,
    irreversible: bool = False,
    compensate: ToolFn | None = None,
    permissions: tuple[str, ...] = (),
    input_labels: tuple[str, ...] = (),
    output_labels: tuple[str, ...] = (),
    secrets: tuple[str, ...] = (),
    amount: str | None = None,
    currency: str | None = None,
    money_direction: Direction = "both",
    message: bool = False,
    description: str | None = None,
    trusted_output: bool = False,
    untrusted_ok: bool = False,
    outbound: bool = False,
    trace_args: bool | tuple[str, ...] = False,
    trace_result: bool | tuple[str, ...] = False,
    sensitive: tuple[str, ...] = (),
    hosts: Iterable[str] | None = None,
) -> Tool[Any, Any] | ToolDecorator:
    """Declare a tool. Use bare (``@tool``) or with options (``@tool(read_only=True)``).

    ``read_only=True`` is ``mutating=False``. The description a model sees is
    ``description`` or the function's docstring. See :class:`Tool` for every option.

    ``reconcile(key)`` (or ``reconcile(key, info)``, to send ``info.fence`` along) is
    asked, after a crash or a timeout hid a call's outcome, whether the effect with that
    idempotency key took place. It must answer a :class:`Reconciled` within
    ``hook_timeout`` seconds; raising, answering anything else or running longer
    escalates the call to a person.

    The function takes the arguments (a pydantic model when its first parameter is
    annotated with one, else the JSON value) and, optionally, a :class:`CallInfo`; or
    nothing at all: its calls then pass no arguments (:class:`NoArgs`).
    """

    def build(f: ToolFn) -> Tool[Any, Any]:
        sig = inspect.signature(f)
        params = list(sig.parameters.values())
        try:
            hints = inspect.get_annotations(f, eval_str=True)
        except NameError as exc:
            raise ConfigurationError(
                f"tool {name or f.__name__!r}: cannot resolve its type annotations ({exc}); "
                "define argument and result models at module level"
            ) from exc
        first = hints.get(params[0].name) if params else None
        ret = hints.get("return")
        if read_only is not None and read_only == mutating and mutating is not True:
            raise ConfigurationError(
                f"tool {name or f.__name__!r}: read_only={read_only} contradicts "
                f"mutating={mutating}"
            )
        return Tool(
            name=name or f.__name__,
            fn=f,
            mutating=mutating if read_only is None else not read_only,
            idempotent=idempotent,
            timeout=timeout,
            reconcile=reconcile,
            hook_timeout=hook_timeout,
            retry=retry,
            circuit=circuit,
            args_model=first if _is_model(first) else None if params else NoArgs,
            result_model=ret if _is_model(ret) else None,
            wants_call_info=len(params) >= 2,
            takes_args=bool(params),
            description=description or inspect.getdoc(f) or "",
            irreversible=irreversible,
            compensate=compensate,
            permissions=tuple(permissions),
            input_labels=tuple(input_labels),
            output_labels=tuple(output_labels),
            secrets=tuple(secrets),
            amount=amount,
            currency=currency,
            money_direction=money_direction,
            message=message,
            trusted_output=trusted_output,
            untrusted_ok=untrusted_ok,
            outbound=outbound,
            trace_args=trace_args,
            trace_result=trace_result,
            sensitive=tuple(sensitive),
            hosts=None if hosts is None else host_patterns(
                hosts, owner=f"tool {name or f.__name__!r}"),
        )

    return build(fn) if fn is not None else cast(ToolDecorator, build)


def _is_model(t: object) -> bool:
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


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What a model adapter returns: the response and its usage."""

    response: JSON
    model: str
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelQuote:
    """The most a model request can spend, told before it is sent.

    The guard reserves it against budgets and settles to the reply's usage. ``tokens`` and
    ``cost_usd`` are upper bounds (None: no bound); ``reason`` says why one is missing.
    A model offers one through an optional ``quote(request)`` method. Without one, a call
    is refused wherever a token or cost budget applies.
    """

    tokens: int | None
    cost_usd: float | None
    reason: str | None = None


class Model(Protocol):
    """A language model adapter: ``complete(request)`` returns a :class:`ModelReply`.

    It may also have ``quote(request) -> ModelQuote``: the most the request can spend.
    """

    name: str

    async def complete(self, request: JSON) -> ModelReply:
        """Send ``request`` to the model."""
        ...


__all__ = [
    "FENCE_STRIDE",
    "CallInfo",
    "Model",
    "ModelQuote",
    "ModelReply",
    "NoArgs",
    "ReconcileFn",
    "Reconciled",
    "Tool",
    "ToolFn",
    "fence_of",
    "tool",
]
