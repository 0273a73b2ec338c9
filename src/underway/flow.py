"""Flows: named async steps over a typed state, and the context a step runs with.

A step is ``async def step(ctx) -> Next``. It reads and changes ``ctx.state``, acts only
through ``ctx.call`` / ``ctx.model``, and returns where to go next: ``ctx.goto``,
``ctx.sleep``, ``ctx.wait``, ``ctx.done`` or ``ctx.fail``."""

from __future__ import annotations

import random as _random
import uuid as _uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, overload

from pydantic import BaseModel, ValidationError

from ._next import ChildOutcome, Done, Fail, Goto, Next, Sleep, Wait, _seconds, _step_name
from .errors import ConfigurationError
from .events import JSON
from .inputs import invalid_model_input
from .labels import LabelValue
from .lineage import Lineage

if TYPE_CHECKING:
    from .effects import Model, Tool
    from .guard.budgets import Budget
    from .guard.policy import Policy

S = TypeVar("S", bound=BaseModel)
I = TypeVar("I", bound=BaseModel)  # noqa: E741 - conventional name for the input type
ToolArgs = TypeVar("ToolArgs")
ToolResult = TypeVar("ToolResult")
Strings = tuple[str, ...] | list[str]


class StepRuntime(Protocol):
    """What a :class:`RunContext` needs of the step's executor: identity, journaled acts."""

    run_id: str
    tenant_id: str
    step: str
    attempt: int
    idempotency_key: str | None
    signal: dict[str, JSON] | None
    timed_out: bool

    @property
    def lineage(self) -> Lineage:
        """What the run inherited and passes on."""
        ...

    @property
    def child_taint(self) -> list[str]:
        """Where the untrusted content of the child outcomes the run received came from."""
        ...

    def clock(self) -> float:
        """The current time (epoch seconds), before it is journaled."""
        ...

    async def call(
        self, tool: Tool | str, args: JSON, *, labels: frozenset[str], evidence: JSON,
        risks: list[str], typed: bool = False, summary: str | None = None,
    ) -> Any:
        """A tool call through the guard and the effect ledger (:meth:`RunContext.call`).

        Args:
            tool: The tool, or its registered name.
            args: The call's arguments, as JSON.
            labels: What the arguments carry, for policies.
            evidence: Shown to an approver.
            risks: Shown to an approver.
            typed: Return the tool's result model (:meth:`~underway.effects.Tool.parse_result`).
            summary: One line shown to an approver.
        """
        ...

    async def ask(self, question: str, *, context: JSON, role: str | None,
                  expires_in: float | None = None) -> JSON:
        """A question to a person (the run escalates until it is answered).

        Args:
            question: What to ask.
            context: Shown with the question.
            role: The role of the approvers who may answer (None: any).
            expires_in: Seconds an answer may take (None: no limit).
        """
        ...

    async def model(self, model: Model, request: JSON, *, stream: bool = False) -> JSON:
        """A journaled model call (:meth:`RunContext.model`).

        Args:
            model: The adapter.
            request: The request, as JSON.
            stream: Forward the model's deltas to the run's live stream.
        """
        ...

    def note(self, event: Any) -> bool:
        """Journal an agent event once."""
        ...

    def value(self, kind: Any, fresh: JSON) -> JSON:
        """A journaled value: ``fresh`` the first time, the journaled one after."""

    def label(self, labels: dict[str, Any], sensitive: bool) -> None:
        """Journal labels set on the run (:meth:`RunContext.label`)."""

    async def start_child(
        self, flow: Flow[Any, Any] | str, input: JSON, *, key: str | None, detached: bool,
        queue: str | None, lineage: Lineage | None = None, taint: tuple[str, ...] = (),
    ) -> str:
        """Start a child run once (journaled); its run id (:meth:`RunContext.start`).

        Args:
            flow: The child's flow, or its name.
            input: The child's input, as JSON.
            key: Names the child among this step's (None: its position in the step).
            detached: Cancelling the run leaves the child running.
            queue: The child's queue (None: the run's).
            lineage: What the start adds to what the run passes on.
            taint: The taint sources the run's context has now (:attr:`Flow.taint_of`).
        """
        ...

    async def wait_child(self, run_id: str) -> ChildOutcome:
        """How a child run ended, suspending the run until it has."""

    def version(self, change_id: str) -> bool:
        """Whether the run takes the new path of change ``change_id`` (decided once)."""


class RunContext(Generic[S, I]):
    """What a step sees: the run's state and input, and the journaled ways to act.

    Args:
        execution: The executor running the step.
        state: The run's typed state.
        input: The run's typed input.
        taint_of: The flow's :attr:`Flow.taint_of`.
    """

    def __init__(self, execution: StepRuntime, state: S, input: I, *,
                 taint_of: Callable[[S], Iterable[str]] | None = None) -> None:
        self._x = execution
        self.state: S = state
        """The run's typed state; changes are journaled as a patch when the step ends."""
        self.input: I = input
        """The run's typed input."""
        self._taint_of = taint_of

    @property
    def run_id(self) -> str:
        """This run's id."""
        return self._x.run_id

    @property
    def tenant_id(self) -> str:
        """This run's tenant."""
        return self._x.tenant_id

    @property
    def step(self) -> str:
        """The step being executed."""
        return self._x.step

    @property
    def attempt(self) -> int:
        """1 on the step's first execution, higher when it runs again after a crash."""
        return self._x.attempt

    @property
    def idempotency_key(self) -> str | None:
        """The key this run was started with (``intake:<event key>`` for intake's runs)."""
        return self._x.idempotency_key

    @property
    def lineage(self) -> Lineage:
        """What this run inherited and passes on (:class:`~underway.lineage.Lineage`)."""
        return self._x.lineage

    @property
    def child_taint(self) -> list[str]:
        """Where the untrusted content of the child outcomes this run received came from."""
        return self._x.child_taint

    @property
    def signal(self) -> JSON:
        """The payload of the signal that ended the preceding ``wait``, else None."""
        sig = self._x.signal
        return sig["payload"] if sig else None

    @property
    def timed_out(self) -> bool:
        """True when the preceding ``wait`` ended by timeout instead of a signal."""
        return self._x.timed_out

    @overload
    async def call(self, tool: Tool[ToolArgs, ToolResult], args: ToolArgs | JSON | BaseModel
                   = None, *, labels: Strings = (), evidence: JSON = None, risks: Strings = (),
                   summary: str | None = None) -> ToolResult: ...
    @overload
    async def call(self, tool: str, args: JSON | BaseModel = None, *, labels: Strings = (),
                   evidence: JSON = None, risks: Strings = (), summary: str | None = None
                   ) -> JSON: ...
    async def call(self, tool: Tool[Any, Any] | str, args: Any = None, *,
                   labels: Strings = (), evidence: JSON = None, risks: Strings = (),
                   summary: str | None = None) -> Any:
        """Perform a tool call through the guard and the effect ledger; return its result.

        The allow-list, argument schema, budgets and policy are checked first; a call held
        for approval waits for a signed decision. A completed call returns its journaled result.

        Args:
            tool: A :class:`~underway.effects.Tool`, or a registered tool's name.
            args: The arguments (JSON, or a model dumped to JSON).
            labels: What the arguments carry (e.g. ``untrusted`` content), for policies.
            evidence: Shown to the approver.
            risks: Shown to the approver.
            summary: One line the approver reads first (else the tool's template's).

        Returns:
            An instance of the tool's result model, when it declares one; else the JSON.

        Raises:
            ToolCallError: The call failed or was refused (``error_type`` ``ToolNotAllowed``,
                ``PolicyDenied``, ``ApprovalRejected``, ``SchemaValidationFailed``...).
            ResultInvalid: A journaled result no longer fits the model (checked on replay).
        """
        if isinstance(args, BaseModel):
            args = args.model_dump(mode="json")
        return await self._x.call(
            tool, args, labels=frozenset(labels), evidence=evidence, risks=list(risks),
            typed=not isinstance(tool, str), summary=summary,
        )

    async def ask(self, question: str, *, context: JSON = None, role: str | None = None,
                  expires_in: float | None = None) -> JSON:
        """Stop and ask a person; the run escalates (holding no worker) until an approver
        sends a signed answer, which this returns (journaled: asked once).

        Args:
            question: What to ask.
            context: Shown with the question.
            role: The role of the approvers who may answer (None: any).
            expires_in: Seconds an answer may take, more than 0 (None: no limit).

        Raises:
            ToolCallError: No answer came in time (``error_type`` ``QuestionExpired``).
        """
        if expires_in is not None and not expires_in > 0:
            raise ConfigurationError(f"expires_in must be a positive number of seconds, "
                                     f"not {expires_in!r}")
        return await self._x.ask(question, context=context, role=role, expires_in=expires_in)

    async def model(self, model: Model, request: JSON, *, stream: bool = False) -> JSON:
        """Ask a model; the response is journaled and never requested twice.

        Args:
            model: The adapter.
            request: The request, as JSON.
            stream: Forward its deltas to the run's live stream (a journaled call: none).
        """
        return await self._x.model(model, request, stream=stream)

    def note(self, event: Any) -> bool:
        """Journal an agent event (``PlanCreated``, ``PlanRevised``, ``ToolSelected``) once:
        a re-run of the step after a crash does not repeat it. True when it was new."""
        return self._x.note(event)

    async def start(
        self,
        flow: Flow[Any, Any] | str,
        input: JSON | BaseModel = None,
        *,
        key: str | None = None,
        detached: bool = False,
        queue: str | None = None,
        lineage: Lineage | None = None,
    ) -> str:
        """Start a run of ``flow`` as a child of this run, in this tenant; return its run id.

        Started once: its id derives from this run and ``key``, so a re-run step gets the
        same child. It acts for this run's principal, its end reaches this run (:meth:`wait_for`),
        and it inherits this run's :attr:`lineage` and the taint its context holds now.

        Args:
            flow: The child's flow, or its name.
            input: The child's input.
            key: Names the child (default: this call's position in the step).
            detached: Cancelling this run leaves the child running.
            queue: The child's queue (default: this run's).
            lineage: Adds to what the child inherits (taint, labels, shadow mode...).
        """
        if isinstance(input, BaseModel):
            input = input.model_dump(mode="json")
        taint = () if self._taint_of is None else tuple(self._taint_of(self.state))
        return await self._x.start_child(flow, input, key=key, detached=detached, queue=queue,
                                         lineage=lineage, taint=taint)

    async def wait_for(self, run_id: str) -> ChildOutcome:
        """How child run ``run_id`` (started by this run with :meth:`start`) ended. Until it
        has, the run waits holding no worker (a dead child: until an operator resumes or
        cancels it). Raises :class:`~underway.errors.ConfigurationError` for another run."""
        return await self._x.wait_child(run_id)

    def now(self) -> datetime:
        """The current time, journaled: a re-run sees the same value."""
        return datetime.fromtimestamp(float(self._x.value("now", self._x.clock())), UTC)

    def uuid(self) -> str:
        """A random UUID, journaled."""
        return str(self._x.value("uuid", str(_uuid.uuid4())))

    def random(self) -> float:
        """A random float in [0, 1), journaled."""
        return float(self._x.value("random", _random.random()))

    def label(self, *, sensitive: bool = False, **labels: LabelValue) -> None:
        """Set labels on this run, journaled: ``ctx.label(sku="A-7", qty=3)``. A name set
        again takes the new value; the same value journals nothing. Children started later
        inherit them. A bad label raises :class:`~underway.errors.InvalidInput` naming it.

        Args:
            sensitive: Show these labels redacted to viewers who may not reveal them.
            **labels: Names and values (text, whole numbers, numbers, true/false).
        """
        self._x.label(labels, sensitive)

    def version(self, change_id: str) -> bool:
        """True when this run takes the code path of change ``change_id``, False when it
        keeps the path it was on before the change was deployed (Temporal's ``patched``).
        Decided once per run and journaled (``VersionMarked``): a step whose journal has
        nothing past this point takes the new path; a re-run step whose journaled calls go
        further without the marker keeps the old one, which made them. Once ``underway
        deploy check`` lists no run on the old path, delete the old branch and the
        ``ctx.version`` call (docs/versioning.md)."""
        if not isinstance(change_id, str) or not change_id.strip():
            raise ConfigurationError(f"a change id must be a non-empty string, not {change_id!r}")
        return self._x.version(change_id)

    # -- where to go next ---------------------------------------------------------------
    def goto(self, step: str | Callable[..., Any]) -> Goto:
        """Continue with ``step``."""
        return Goto(_step_name(step))

    def sleep(self, duration: float | timedelta, *, then: str | Callable[..., Any]) -> Sleep:
        """Sleep on a durable timer (the run holds no worker meanwhile), then go to ``then``."""
        return Sleep(_seconds(duration), _step_name(then))

    def wait(self, signal: str, *, timeout: float | timedelta | None = None,
             then: str | Callable[..., Any]) -> Wait:
        """Wait for a signal (or the timeout), then go on; read ``ctx.signal`` there.

        Args:
            signal: The signal's name.
            timeout: How long to wait (None: for ever); see :attr:`timed_out`.
            then: The step to go to.
        """
        return Wait(signal, None if timeout is None else _seconds(timeout), _step_name(then))

    def done(self, result: JSON | BaseModel = None, *, marks: Iterable[Any] | None = None) -> Done:
        """Finish the run successfully.

        Args:
            result: The run's result.
            marks: Its parts untrusted content shaped (:attr:`.RunCompleted.marks`)."""
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json")
        return Done(result, cast(Any, () if marks is None else marks))

    def fail(self, reason: str) -> Fail:
        """Finish the run as failed."""
        return Fail(reason)


StepFn = Callable[[RunContext[S, I]], Awaitable[Next]]


class _NoInput(BaseModel):
    """Input of a flow declared without one."""


class Flow(Generic[S, I]):
    """A named set of steps over a typed state.

    Args:
        name: The flow's name (letters, digits, ``_``, ``-``, ``.``).
        state: The model of a run's state.
        input: The model of a run's input (None: no input).
        init: Builds the first state from the input (default: the state's defaults).
        tools: The tools its steps may call; a call to any other is refused and journaled.
        policy: Overrides the engine's policy.
        budget: Overrides the engine's budget.
        shadow: Overrides the engine's shadow mode.
        deny_unlisted_mutating: Deny mutating tools that no policy rule covers.
        default_policy: Applies when neither the flow nor the engine has a policy (an
            agent's flow: :data:`~underway.guard.policy.DEFAULT_POLICY`).
        signals: The names its steps wait for; any other sent to its runs is refused
            (None: every name accepted, and the CLI warns).
        taint_of: Where the untrusted content a run's context holds came from, read from
            its state; a child the run starts inherits it.

    >>> flow = Flow("invoice_followup", state=FollowUp, input=Customer)
    >>> @flow.step(start=True)
    ... async def fetch(ctx): ...
    """

    def __init__(
        self,
        name: str,
        *,
        state: type[S],
        input: type[I] | None = None,
        init: Callable[[I], S] | None = None,
        tools: list[Tool | str] | tuple[Tool | str, ...] | None = None,
        policy: Policy | None = None,
        budget: Budget | None = None,
        shadow: bool | None = None,
        deny_unlisted_mutating: bool | None = None,
        default_policy: Policy | None = None,
        signals: Iterable[str] | None = None,
        taint_of: Callable[[S], Iterable[str]] | None = None,
    ) -> None:
        self.name = self.check_name(name)
        self.taint_of = taint_of
        """Where the untrusted content a run's context holds came from (see the class)."""
        self.state_type = state
        self.input_type: type[Any] = input or _NoInput
        self._init = init
        self.steps: dict[str, StepFn[S, I]] = {}
        self.aliases: dict[str, str] = {}
        """Old step names (renamed or removed steps) and the step each now stands for."""
        self.start_step: str | None = None
        self.allowed_tools: frozenset[str] | None = (
            None if tools is None
            else frozenset(t if isinstance(t, str) else t.name for t in tools)
        )
        """The tools this flow may call (None: any registered tool)."""
        self.declared_tools: list[Tool] = [t for t in tools or () if not isinstance(t, str)]
        """Tool objects given in ``tools``; the engine registers them with the flow."""
        self.policy = policy
        self.budget = budget
        self.shadow = shadow
        self.deny_unlisted_mutating = deny_unlisted_mutating
        self.default_policy = default_policy
        self.signals: frozenset[str] | None = None
        """The signal names this flow's steps wait for (None: not declared)."""
        if signals is not None:
            if isinstance(signals, str):
                raise ConfigurationError(
                    f"flow {name!r}: signals must be a list of names, not the string {signals!r}")
            names = frozenset(signals)
            bad = sorted(n for n in names if not n or n.startswith("underway."))
            if bad:
                raise ConfigurationError(
                    f"flow {name!r}: signal names must be non-empty and must not start with "
                    f"'underway.' (reserved): {bad}")
            self.signals = names

    @overload
    def step(self, fn: StepFn[S, I], *, name: str | None = None, start: bool = False,
             aliases: Iterable[str] = ()) -> StepFn[S, I]: ...

    @overload
    def step(self, fn: None = None, *, name: str | None = None, start: bool = False,
             aliases: Iterable[str] = ()) -> Callable[[StepFn[S, I]], StepFn[S, I]]: ...

    def step(
        self, fn: StepFn[S, I] | None = None, *, name: str | None = None, start: bool = False,
        aliases: Iterable[str] = (),
    ) -> StepFn[S, I] | Callable[[StepFn[S, I]], StepFn[S, I]]:
        """Register a step (bare ``@flow.step`` or ``@flow.step(start=True)``).

        Args:
            fn: The step function (None: return a decorator).
            name: The step's name (default: the function's).
            start: Runs begin at this step (default: the first step registered).
            aliases: Its old names; runs and ``goto`` targets there continue here (:meth:`alias`).
        """
        if isinstance(aliases, str):
            raise ConfigurationError(
                f"flow {self.name!r}: aliases must be a list of names, not the string "
                f"{aliases!r}")

        def register(f: StepFn[S, I]) -> StepFn[S, I]:
            step_name = name or f.__name__
            if step_name in self.steps:
                raise ConfigurationError(f"flow {self.name!r} already has a step {step_name!r}")
            if step_name in self.aliases:
                raise ConfigurationError(
                    f"flow {self.name!r}: {step_name!r} is an alias of step "
                    f"{self.aliases[step_name]!r}; a name is a step or an alias, not both")
            self.steps[step_name] = f
            if start or self.start_step is None:
                self.start_step = step_name
            for old in aliases:
                self.alias(old, step_name)
            return f

        return register(fn) if fn is not None else register

    def alias(self, old: str, to: str | Callable[..., Any]) -> None:
        """Runs parked at step ``old`` (renamed or removed) continue at step ``to``, as do
        ``goto``/``then`` targets named ``old``; journaled calls keep their keys. ``to``
        must be a step once the flow is registered (docs/versioning.md)."""
        target = _step_name(to)
        if not old or not isinstance(old, str):
            raise ConfigurationError(f"flow {self.name!r}: an alias must be a non-empty "
                                     f"step name, not {old!r}")
        if old in self.steps:
            raise ConfigurationError(
                f"flow {self.name!r} still has a step {old!r}; alias a name only once no "
                "step has it")
        known = self.aliases.get(old)
        if known is not None and known != target:
            raise ConfigurationError(
                f"flow {self.name!r}: {old!r} is already an alias of {known!r}")
        self.aliases[old] = target

    def resolve_step(self, name: str) -> str:
        """The step ``name`` stands for: itself, or the step its aliases lead to."""
        seen = {name}
        while name not in self.steps and name in self.aliases:
            name = self.aliases[name]
            if name in seen:
                raise ConfigurationError(
                    f"flow {self.name!r}: the aliases of {sorted(seen)} go round in a circle")
            seen.add(name)
        return name

    def has_step(self, name: str) -> bool:
        """True when ``name`` is a step of this flow or an alias of one."""
        return self.resolve_step(name) in self.steps

    @staticmethod
    def check_name(name: str) -> str:
        """``name``, when it is a valid flow name; else :class:`ConfigurationError`."""
        if not name or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise ConfigurationError(
                f"flow name {name!r} must be non-empty letters, digits, '_', '-' or '.'"
            )
        return name

    def parse_input(self, data: JSON | BaseModel) -> I:
        """``data`` as this flow's input; every door refuses bad input with its InvalidInput."""
        if isinstance(data, self.input_type):
            return cast(I, data)
        if isinstance(data, BaseModel):
            data = data.model_dump(mode="json")
        try:
            return cast(I, self.input_type.model_validate(data or {}))
        except ValidationError as exc:
            raise invalid_model_input(exc, f"invalid input for flow {self.name!r}") from None

    def initial_state(self, input: I) -> S:
        """The state a new run starts from."""
        if self._init is not None:
            return self._init(input)
        try:
            return self.state_type()
        except ValidationError as exc:
            raise ConfigurationError(
                f"flow {self.name!r}: state {self.state_type.__name__} has required fields "
                f"({exc.error_count()} missing); give them defaults or pass init= to Flow"
            ) from exc

    def get_step(self, name: str) -> StepFn[S, I]:
        """The step function called ``name`` (or that ``name`` is an alias of)."""
        try:
            return self.steps[self.resolve_step(name)]
        except KeyError:
            hint = f", aliases: {sorted(self.aliases)}" if self.aliases else ""
            raise ConfigurationError(
                f"flow {self.name!r} has no step {name!r}; steps: {sorted(self.steps)}{hint}. "
                "A run parked at a step that was renamed or removed continues once the flow "
                "names it as an alias (flow.alias(old, to=...); docs/versioning.md), or when "
                "resumed at another step"
            ) from None

    def parse_state(self, data: JSON) -> S:
        """A run's journaled state as this flow's state model, with its defaults and its
        ``mode="before"`` validators (upcasters, docs/versioning.md) applied. Raises
        :class:`ConfigurationError` naming the flow and the fields that no longer fit."""
        try:
            return self.state_type.model_validate(data)
        except ValidationError as exc:
            fields = sorted({".".join(map(str, e["loc"])) or "(root)" for e in exc.errors()})
            raise ConfigurationError(
                f"flow {self.name!r}: the journaled state does not fit "
                f"{self.state_type.__name__} (fields {', '.join(fields)}): "
                f"{exc.errors(include_url=False)[0]['msg']}; give new fields a default or "
                "upcast old states in a model_validator(mode='before') (docs/versioning.md)"
            ) from None


__all__ = ["ChildOutcome", "Done", "Fail", "Flow", "Goto", "Next", "RunContext", "Sleep",
           "StepFn", "StepRuntime", "Wait"]
