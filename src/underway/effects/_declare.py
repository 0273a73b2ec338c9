"""The :func:`tool` decorator: a :class:`~underway.effects.Tool` of a function, typed by
its annotations."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypedDict, cast, overload

from typing_extensions import Unpack

from ..egress import host_patterns
from ..errors import ConfigurationError
from ..hooks import DEFAULT_HOOK_TIMEOUT
from ..money import Direction
from ..retry import CircuitBreaker, RetryPolicy
from ._ledger import CallInfo, ReconcileFn, ToolFn
from ._tool import A, NoArgs, R, SyncResult, Tool, is_model


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
    account: str | None
    summary: str | None
    message: bool
    description: str | None
    trusted_output: bool
    untrusted_ok: bool
    untrusted_args: Iterable[str]
    trusted_fields: Iterable[str]
    outbound: bool
    trace_args: bool | tuple[str, ...]
    trace_result: bool | tuple[str, ...]
    sensitive: tuple[str, ...]
    hosts: Iterable[str] | None


def tool_options(owner: str, options: Mapping[str, Any]) -> ToolOptions:
    """``options`` checked as the keywords of :func:`tool`, for tools declared elsewhere
    (an agent framework's, an MCP server's).

    Args:
        owner: What the options are for, for the error (``tool 'refund'``).
        options: The options.

    Raises:
        ConfigurationError: An option :func:`tool` does not take, or ``name`` (the tool
            keeps its own).
    """
    unknown = sorted(set(options) - set(ToolOptions.__annotations__) | ({"name"} & set(options)))
    if unknown:
        raise ConfigurationError(
            f"{owner}: unknown options {unknown}; use the options of underway.tool: "
            f"{sorted(set(ToolOptions.__annotations__) - {'name'})}")
    return cast(ToolOptions, dict(options))


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
    account: str | None = None,
    summary: str | None = None,
    message: bool = False,
    description: str | None = None,
    trusted_output: bool = False,
    untrusted_ok: bool = False,
    untrusted_args: Iterable[str] = (),
    trusted_fields: Iterable[str] = (),
    outbound: bool = False,
    trace_args: bool | tuple[str, ...] = False,
    trace_result: bool | tuple[str, ...] = False,
    sensitive: tuple[str, ...] = (),
    hosts: Iterable[str] | None = None,
) -> Tool[Any, Any] | ToolDecorator:
    """Declare a tool. Use bare (``@tool``) or with options (``@tool(read_only=True)``).

    See :class:`Tool` for what each option means to policies, budgets and traces.

    The function takes the arguments, and optionally a :class:`CallInfo`. The arguments are
    a pydantic model when its first parameter is annotated with one, else the JSON value. Or
    it takes nothing at all: its calls then pass no arguments (:class:`NoArgs`).

    Args:
        fn: The function, when used bare.
        name: The tool's name; defaults to the function's.
        mutating: It changes the world; it is journaled write-ahead.
        idempotent: It may safely run again with the same key.
        timeout: Seconds before a call that runs too long is cancelled.
        reconcile: ``reconcile(key)``, or ``reconcile(key, info)`` to send ``info.fence``
            along. It is asked whether the effect with that idempotency key took place, after
            a crash or a timeout hid a call's outcome. It must answer a :class:`Reconciled`
            within ``hook_timeout`` seconds. Raising, answering anything else or running
            longer escalates the call to a person.
        hook_timeout: Seconds ``reconcile`` and ``compensate`` may take.
        retry: Retries failures on durable timers.
        circuit: Fails fast after repeated failures.
        read_only: True is ``mutating=False``.
        irreversible: It cannot be undone and is never run twice on its own.
        compensate: Undoes a completed call (see :meth:`Tool.compensation`).
        permissions: What policies see it require.
        input_labels: Data labels of its inputs (e.g. ``personal``).
        output_labels: Data labels of its outputs.
        secrets: The secrets fetched for each call into :attr:`CallInfo.secrets`.
        amount: Dotted path of the argument holding the money a call moves.
        currency: A code (``"INR"``), or ``arg:`` and the dotted path of the argument
            holding it.
        money_direction: ``out`` (it pays), ``in`` (it collects) or ``both``.
        account: Dotted path of the argument naming the account the money moves out of
            (or into), shown to an approver.
        summary: A one-line template an approver reads, such as ``"Pay {amount:money}
            to {supplier}"``: dotted paths of arguments only.
        message: A call sends a message to a person.
        description: What a model sees; defaults to the function's docstring.
        trusted_output: Its results (and errors) do not taint an agent's context.
        untrusted_ok: Safe to call with arguments derived from untrusted content.
        untrusted_args: The arguments (top-level fields) that may carry untrusted content,
            such as an e-mail's ``body``; every other argument must come from trusted
            sources (:mod:`underway.guard.provenance`).
        trusted_fields: Dotted paths of result fields no outsider writes, in an otherwise
            untrusted result (``emails.id``; list items are crossed).
        outbound: A read-only tool whose arguments leave the system; labelled like a
            mutating one.
        trace_args: Record the call's arguments on its span: True (every field), or these
            fields.
        trace_result: Record the call's result on its span: True (every field), or these
            fields.
        sensitive: Argument and result fields (at any depth) never traced, and hidden from
            viewers not allowed to see them.
        hosts: The hosts it may reach (``api.example.com``, ``*.bank.in``); None means any.

    Returns:
        The tool, or, given options only, a decorator that makes one.

    Raises:
        ConfigurationError: The options contradict each other or the function's signature.
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
            args_model=first if is_model(first) else None if params else NoArgs,
            result_model=ret if is_model(ret) else None,
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
            account=account,
            summary=summary,
            message=message,
            trusted_output=trusted_output,
            untrusted_ok=untrusted_ok,
            # A lone string reaches Tool as it is, which refuses it by name.
            untrusted_args=cast(tuple[str, ...], untrusted_args)
            if isinstance(untrusted_args, str) else tuple(untrusted_args),
            trusted_fields=cast(tuple[str, ...], trusted_fields)
            if isinstance(trusted_fields, str) else tuple(trusted_fields),
            outbound=outbound,
            trace_args=trace_args,
            trace_result=trace_result,
            sensitive=tuple(sensitive),
            hosts=None if hosts is None else host_patterns(
                hosts, owner=f"tool {name or f.__name__!r}"),
        )

    return build(fn) if fn is not None else cast(ToolDecorator, build)

