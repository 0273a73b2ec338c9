"""Flows: named async steps over a typed state, and the context a step runs with.

A step is ``async def step(ctx) -> Next``. It reads and changes ``ctx.state``, performs
effects only through ``ctx.call`` / ``ctx.model``, and returns where to go next with
``ctx.goto``, ``ctx.sleep``, ``ctx.wait``, ``ctx.done`` or ``ctx.fail``.
"""

from __future__ import annotations

import random as _random
import uuid as _uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, overload

from pydantic import BaseModel, ValidationError

from ._next import ChildOutcome, Done, Fail, Goto, Next, Sleep, Wait
from .errors import ConfigurationError
from .events import JSON
from .lineage import Lineage

if TYPE_CHECKING:
    from .effects import Model, Tool
    from .guard.budgets import Budget
    from .guard.policy import Policy

S = TypeVar("S", bound=BaseModel)
I = TypeVar("I", bound=BaseModel)  # noqa: E741 - conventional name for the input type
ToolArgs = TypeVar("ToolArgs")
ToolResult = TypeVar("ToolResult")


def _seconds(duration: float | timedelta) -> float:
    return duration.total_seconds() if isinstance(duration, timedelta) else float(duration)


def _step_name(target: str | Callable[..., Any]) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


class StepRuntime(Protocol):
    """What a :class:`RunContext` needs from the executor running the step (the engine's
    step execution): the run's identity, and journaled calls and values."""

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

    def clock(self) -> float:
        """The current time (epoch seconds), before it is journaled."""
        ...

    async def call(
        self, tool: Tool | str, args: JSON, *, labels: frozenset[str], evidence: JSON,
        risks: list[str], typed: bool = False,
    ) -> Any:
        """A tool call through the guard and the effect ledger; with ``typed``, the result
        as the tool's result model (:meth:`~underway.effects.Tool.parse_result`)."""
        ...

    async def ask(self, question: str, *, context: JSON, role: str | None,
                  expires_in: float | None = None) -> JSON:
        """A question to a person (the run escalates until it is answered)."""
        ...

    async def model(self, model: Model, request: JSON) -> JSON:
        """A journaled model call."""
        ...

    def note(self, event: Any) -> bool:
        """Journal an agent event once."""
        ...

    def value(self, kind: Any, fresh: JSON) -> JSON:
        """A journaled value: ``fresh`` the first time, the journaled one after."""
        ...

    async def start_child(
        self, flow: Flow[Any, Any] | str, input: JSON, *, key: str | None, detached: bool,
        queue: str | None, lineage: Lineage | None = None, taint: tuple[str, ...] = (),
    ) -> str:
        """Start a child run once (journaled); its run id. ``lineage``: what the start
        adds to what the run passes on; ``taint``: the taint sources the run's context has
        now (its flow's :attr:`Flow.taint_of`)."""
        ...

    async def wait_child(self, run_id: str) -> ChildOutcome:
        """How a child run ended, suspending the run until it has."""
        ...

    def version(self, change_id: str) -> bool:
        """Whether the run takes the new path of change ``change_id`` (decided once per
        run and journaled)."""
        ...


class RunContext(Generic[S, I]):
    """What a step sees: the run's state and input, and the journaled ways to act."""

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
        """The key this run was started with; ``intake:<event key>`` when an outside event
        started it through :func:`~underway.scheduling.intake.intake`."""
        return self._x.idempotency_key

    @property
    def lineage(self) -> Lineage:
        """What this run inherited and passes on (:class:`~underway.lineage.Lineage`): its
        outside origin and taint, shadow mode, subject, purpose, trace and labels."""
        return self._x.lineage

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
    async def call(
        self, tool: Tool[ToolArgs, ToolResult], args: ToolArgs | JSON | BaseModel = None, *,
        labels: tuple[str, ...] | list[str] = (), evidence: JSON = None,
        risks: tuple[str, ...] | list[str] = (),
    ) -> ToolResult: ...
    @overload
    async def call(
        self, tool: str, args: JSON | BaseModel = None, *,
        labels: tuple[str, ...] | list[str] = (), evidence: JSON = None,
        risks: tuple[str, ...] | list[str] = (),
    ) -> JSON: ...
    async def call(
        self,
        tool: Tool[Any, Any] | str,
        args: Any = None,
        *,
        labels: tuple[str, ...] | list[str] = (),
        evidence: JSON = None,
        risks: tuple[str, ...] | list[str] = (),
    ) -> Any:
        """Perform a tool call through the guard and the effect ledger; return its result.

        Before the call runs: the flow's allow-list, the argument schema, budgets and the
        policy are checked; a call the policy holds for approval suspends the run until a
        signed decision arrives (``evidence`` and ``risks`` are shown to the approver).
        ``labels`` mark what the arguments carry (e.g. ``untrusted`` content) for policies.
        A call that already completed returns its journaled result without running again.
        Raises :class:`~underway.errors.ToolCallError` when the call failed or was refused
        (``error_type`` ``ToolNotAllowed``, ``PolicyDenied``, ``ApprovalRejected``,
        ``ApprovalExpired``, ``ApprovalInvalid``, ``SchemaValidationFailed``...).

        Given a :class:`~underway.effects.Tool` that declares a result model, the result is
        an instance of that model, validated from the journaled JSON the first time and on
        every replay (:class:`~underway.errors.ResultInvalid` when a journaled result no
        longer fits it); an untyped tool, or a tool named by a string, gives its JSON.
        """
        if isinstance(args, BaseModel):
            args = args.model_dump(mode="json")
        return await self._x.call(
            tool, args, labels=frozenset(labels), evidence=evidence, risks=list(risks),
            typed=not isinstance(tool, str),
        )

    async def ask(
        self,
        question: str,
        *,
        context: JSON = None,
        role: str | None = None,
        expires_in: float | None = None,
    ) -> JSON:
        """Stop and ask a person; the run escalates (holding no worker) until an approver
        with ``role`` sends a signed answer, which this returns (journaled: asked once).

        With ``expires_in`` (seconds) an answer must arrive in time: past it the run is
        woken and this raises :class:`~underway.errors.ToolCallError` with ``error_type``
        ``QuestionExpired``, so the step can decide what to do without one.
        """
        if expires_in is not None and not expires_in > 0:
            raise ConfigurationError(f"expires_in must be a positive number of seconds, "
                                     f"not {expires_in!r}")
        return await self._x.ask(question, context=context, role=role, expires_in=expires_in)

    async def model(self, model: Model, request: JSON) -> JSON:
        """Ask a model; the response is journaled and never requested twice."""
        return await self._x.model(model, request)

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

        Started once: the intent is journaled before the child is created, and the child's
        id derives from this run and ``key`` (default: this call's position in the step),
        so a step re-run after a crash gets the same child, never a second. The child acts
        for this run's principal, runs on ``queue`` (default: this run's queue), and its end
        reaches this run (:meth:`wait_for`). Cancelling this run cancels the child too,
        unless it is ``detached``.

        The child inherits this run's :attr:`lineage` (outside origin, taint, shadow
        mode, subject, purpose, consent, trace, labels), with the taint this run's context
        has taken in since it started (:attr:`Flow.taint_of`) and shadow mode when this
        run is in it. ``lineage`` adds to that (more taint, labels, shadow mode, a
        subject or purpose where this run has none); it can never remove what the child
        inherits.
        """
        if isinstance(input, BaseModel):
            input = input.model_dump(mode="json")
        taint = () if self._taint_of is None else tuple(self._taint_of(self.state))
        return await self._x.start_child(flow, input, key=key, detached=detached, queue=queue,
                                         lineage=lineage, taint=taint)

    async def wait_for(self, run_id: str) -> ChildOutcome:
        """How child run ``run_id`` (started by this run with :meth:`start`) ended.

        When it has not ended yet the run waits, holding no worker, until the child
        completes, fails or is cancelled; the step then runs again and this returns the
        outcome (a dead child keeps this run waiting until an operator resumes or
        cancels it). Raises :class:`~underway.errors.ConfigurationError` for a run that is
        not a child of this run.
        """
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

    def version(self, change_id: str) -> bool:
        """True when this run takes the code path of change ``change_id``, False when it
        keeps the path it was on before the change was deployed (Temporal's ``patched``).

        Decided the first time a run asks, and journaled (``VersionMarked``): every later
        step of the run gets the same answer. A run asks for the first time either in a
        step whose journal has nothing past this point — it takes the new path — or while
        a step is re-run (after an approval, a retry timer, a crash) whose journaled calls
        or values go further than this point without the marker: the old code made them,
        so the run keeps the old path and its journaled calls still match. Once no
        unfinished run is on the old path (``underway deploy check`` lists them), delete
        the old branch and the ``ctx.version`` call. See docs/versioning.md.
        """
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

    def wait(
        self,
        signal: str,
        *,
        timeout: float | timedelta | None = None,
        then: str | Callable[..., Any],
    ) -> Wait:
        """Wait for a signal (or the timeout), then go to ``then``; read ``ctx.signal`` there."""
        return Wait(signal, None if timeout is None else _seconds(timeout), _step_name(then))

    def done(self, result: JSON | BaseModel = None) -> Done:
        """Finish the run successfully."""
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json")
        return Done(result)

    def fail(self, reason: str) -> Fail:
        """Finish the run as failed."""
        return Fail(reason)


StepFn = Callable[[RunContext[S, I]], Awaitable[Next]]


class _NoInput(BaseModel):
    """Input of a flow declared without one."""


class Flow(Generic[S, I]):
    """A named set of steps over a typed state.

    ``tools`` is the allow-list of tools its steps may call (a call to any other is
    refused and journaled); ``policy``, ``budget`` and ``shadow`` override the engine's;
    ``deny_unlisted_mutating`` denies mutating tools that no policy rule covers;
    ``default_policy`` applies when neither the flow nor the engine has a policy (an
    agent's flow: :data:`~underway.guard.policy.DEFAULT_POLICY`).
    ``signals`` declares the names its steps wait for: the engine, ``underway runs signal``
    and intake then refuse any other name sent to its runs (a signal no step reads would
    sit unread); without it every name is accepted and the CLI warns.
    ``taint_of`` reads from a run's state where the untrusted content its context holds
    came from (an agent's flow: what its model has read); a child the run starts
    inherits that taint.

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
        """Where the untrusted content a run's context holds came from, read from its state
        (an agent's: what its model has read); a child the run starts inherits it."""
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
                    f"flow {name!r}: signals must be a list of names, not the string {signals!r}"
                )
            names = frozenset(signals)
            bad = sorted(n for n in names if not n or n.startswith("underway."))
            if bad:
                raise ConfigurationError(
                    f"flow {name!r}: signal names must be non-empty and must not start with "
                    f"'underway.' (reserved): {bad}"
                )
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

        ``aliases``: the names this step had before (a rename): runs parked at an old
        name, and ``goto`` targets still spelled that way, continue here (see
        :meth:`alias`)."""
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
        """Runs journaled at step ``old`` — a step renamed or removed — continue at step
        ``to``: a run parked there (waiting, escalated, dead, or interrupted mid-step)
        executes ``to`` when it next runs, and ``goto``/``then`` targets named ``old`` go
        to ``to``. Journaled calls keep the keys they were made with; the journal records
        the step under its new name from then on. ``to`` must be a step of this flow by
        the time the flow is registered with an engine. See docs/versioning.md."""
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
        """Validate ``data`` as this flow's input; raise ConfigurationError naming the fields."""
        if isinstance(data, self.input_type):
            return cast(I, data)
        if isinstance(data, BaseModel):
            data = data.model_dump(mode="json")
        try:
            parsed: I = self.input_type.model_validate(data or {})
            return parsed
        except ValidationError as exc:
            raise ConfigurationError(f"invalid input for flow {self.name!r}: {exc}") from exc

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
        """A run's journaled state as this flow's state model — the model's defaults and
        its ``mode="before"`` validators (the state's upcasters, see docs/versioning.md)
        applied. Raises :class:`ConfigurationError` naming the flow and the fields that no
        longer fit."""
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


__all__ = [
    "ChildOutcome",
    "Done",
    "Fail",
    "Flow",
    "Goto",
    "Next",
    "RunContext",
    "Sleep",
    "StepFn",
    "StepRuntime",
    "Wait",
]
