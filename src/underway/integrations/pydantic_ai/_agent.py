"""A pydantic-ai ``Agent``, unmodified, run as an underway run.

The whole ``agent.run`` happens inside one step. Its model is swapped for a
:class:`~._model.JournaledModel` and its toolsets for :class:`~._toolset.GuardedToolset`
wrappers, through ``agent.override`` (pydantic-ai's public seam, the one its DBOS and
Temporal integrations use). A re-run of the step after a crash, an approval or a
resolution runs the agent again: every model request and tool call that completed
returns its journaled answer, so none is made twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.models import Model, infer_model
from pydantic_ai.tools import RunContext as PaiContext
from pydantic_ai.usage import UsageLimits
from pydantic_core import to_jsonable_python

from ...errors import ConfigurationError, NonDeterminismError
from ...flow import Flow, Next, RunContext
from ...guard.budgets import Budget
from ...guard.policy import DEFAULT_POLICY, Policy
from .._provenance import Provenance, check_writes
from ._model import SCOPE, JournaledModel, StepScope
from ._toolset import Tools, check_flags, guard_toolset


class AgentInput(BaseModel):
    """What a durable pydantic-ai run is asked: the user prompt."""

    prompt: str


class AgentState(BaseModel):
    """A durable pydantic-ai run's state: the agent's conversation lives in the journal."""

    taint: list[str] = Field(default_factory=list)
    """Where the untrusted content that reached the agent's context came from (tool names,
    the run's lineage), in order: the run's result carries it."""


def usage_budget(limits: UsageLimits, *, on_exceed: Literal["escalate", "fail"]) -> Budget:
    """The underway budget that enforces pydantic-ai's ``limits``: ``request_limit`` counts
    model calls, ``tool_calls_limit`` tool calls, ``total_tokens_limit`` tokens and
    ``cost_limit`` dollars."""
    return Budget(
        model_calls=limits.request_limit, tool_calls=limits.tool_calls_limit,
        tokens=limits.total_tokens_limit,
        cost_usd=float(limits.cost_limit) if limits.cost_limit is not None else None,
        on_exceed=on_exceed,
    )


def _tighter(a: Budget | None, b: Budget) -> Budget:
    """The limits of ``a`` and ``b`` together: the smaller where both set one."""
    if a is None:
        return b

    def least(x: Any, y: Any) -> Any:
        return y if x is None else x if y is None else min(x, y)

    return Budget(
        tokens=least(a.tokens, b.tokens), cost_usd=least(a.cost_usd, b.cost_usd),
        model_calls=least(a.model_calls, b.model_calls),
        tool_calls=least(a.tool_calls, b.tool_calls), wall_clock_s=a.wall_clock_s,
        messages=a.messages, money=a.money, on_exceed=a.on_exceed,
    )


async def _drain(ctx: PaiContext[Any], events: AsyncIterable[Any]) -> None:
    """Asks the agent to stream; the user's handler sees the live events inside the call."""
    async for _ in events:
        pass


class DurableAgent:
    """A pydantic-ai ``Agent`` made durable and guarded; register :attr:`flow` with an engine.

    >>> durable = DurableAgent(agent, name="support")
    >>> engine = uw.Engine(uw.connect("sqlite:///runs.db"), flows=[durable.flow])
    >>> run_id, _ = engine.start(durable.flow, {"prompt": "Where is my order?"})

    The run's result is the agent's output, as JSON.

    Args:
        agent: The agent, unmodified. It must have a model.
        name: The flow's name.
        tools: Options of the underway tool each pydantic-ai tool becomes, by tool name
            (keywords of :func:`~underway.tool`: ``read_only``, ``idempotent``,
            ``trusted_output``, ``untrusted_args``, ``reconcile``, ``amount``...). A tool
            without options is mutating, not idempotent, and its output untrusted; an MCP
            tool's annotations set its flags as :func:`underway.mcp.flags` does (none:
            also irreversible), these options winning. A tool's timeout is its
            pydantic-ai ``timeout``, else 30 seconds.
        allow: The tools the agent may call (None: every tool its toolsets offer).
        policy: The flow's policy (None: the engine's, else the default agent policy,
            which holds a call from a tainted context when an argument that may not
            carry untrusted content does, or when ``writes`` does not name its tool).
            Whatever the policy, the guard holds a call of a ``requires_approval`` tool
            for a signed decision unless the policy denies it.
        budget: Its limits, besides those of ``usage_limits``.
        usage_limits: pydantic-ai's limits, enforced as underway budgets (the default is
            pydantic-ai's: 50 requests). Input and output token limits stay pydantic-ai's.
        on_exceed: What a budget from ``usage_limits`` does when crossed: ``escalate`` to a
            person or ``fail`` the run.
        approver_role: The role asked to approve ``requires_approval`` tools.
        event_stream_handler: Sees the agent's events as each model response streams (None:
            the agent's own handler, if any).
        deps: Makes the agent's dependencies for each run (None: no dependencies).
        shadow: Run in shadow mode; None means the engine's setting.
        writes: The tools the agent's task writes with, a constant of the flow: a call of
            one from a context that has read untrusted content is not ``unrequested``;
            its arguments are still traced (:mod:`underway.guard.provenance`). None: no
            tool is requested, so the default policy holds every mutating or outbound
            call from a tainted context. Each name must be in ``allow`` when it is given.
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        name: str,
        tools: Mapping[str, Mapping[str, Any]] | None = None,
        allow: Sequence[str] | None = None,
        policy: Policy | None = None,
        budget: Budget | None = None,
        usage_limits: UsageLimits | None = None,
        on_exceed: Literal["escalate", "fail"] = "escalate",
        approver_role: str | None = None,
        event_stream_handler: EventStreamHandler[Any] | None = None,
        deps: Callable[[], Any] | None = None,
        shadow: bool | None = None,
        writes: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise ConfigurationError(f"DurableAgent wraps a pydantic_ai.Agent, not "
                                     f"{type(agent).__name__}")
        model = agent.model
        if model is None:
            raise ConfigurationError(f"agent {name!r} has no model; give the pydantic-ai "
                                     "Agent one (model=...) before making it durable")
        self.agent = agent
        self.name = name
        self.writes = check_writes(writes, list(allow) if allow is not None else None,
                                   f"agent {name!r}")
        """The tools the agent's task writes with (None: none declared)."""
        self.model = JournaledModel(model if isinstance(model, Model) else infer_model(model))
        self.tools = Tools(check_flags(tools or {}), approver_role=approver_role)
        self.toolsets = [guard_toolset(ts, self.tools) for ts in agent.toolsets]
        limits = usage_limits if usage_limits is not None else UsageLimits()
        self._limits = UsageLimits(
            request_limit=None, input_tokens_limit=limits.input_tokens_limit,
            output_tokens_limit=limits.output_tokens_limit,
            per_request_input_tokens_limit=limits.per_request_input_tokens_limit,
        )
        self.handler = (event_stream_handler if event_stream_handler is not None
                        else agent.event_stream_handler)
        self._deps = deps
        self.flow: Flow[AgentState, AgentInput] = Flow(
            name, state=AgentState, input=AgentInput,
            tools=list(allow) if allow is not None else None,
            policy=policy, default_policy=DEFAULT_POLICY,
            budget=_tighter(budget, usage_budget(limits, on_exceed=on_exceed)),
            shadow=shadow, taint_of=_taint_of,
        )
        self.flow.step(self._run, name="run", start=True)

    async def _run(self, ctx: RunContext[AgentState, AgentInput]) -> Next:
        scope = StepScope(ctx, agent=self.name, handler=self.handler,
                          sources=[*ctx.lineage.sources])
        # Rebuilt on every run of the step, from the input and what the journal answers.
        scope.provenance = Provenance(scope.sources, requested=self.writes)
        scope.provenance.start(ctx.input.prompt, tainted=ctx.lineage.sources)
        token = SCOPE.set(scope)
        try:
            with (
                self.agent.override(model=self.model, toolsets=self.toolsets, tools=[]),
                # One call at a time, in the model's order: the journal's order on every run.
                self.agent.parallel_tool_call_execution_mode("sequential"),
            ):
                result = await self.agent.run(
                    ctx.input.prompt, usage_limits=self._limits,
                    deps=self._deps() if self._deps is not None else None,
                    event_stream_handler=_drain if self.handler is not None else None,
                )
        except BaseException as exc:
            stop = _stop_in(exc)
            if stop is None or stop is exc:
                raise
            raise stop from None
        finally:
            SCOPE.reset(token)
        ctx.state.taint = list(scope.sources)
        return ctx.done(to_jsonable_python(result.output))


def _taint_of(state: AgentState) -> list[str]:
    return state.taint


def _stop_in(exc: BaseException) -> BaseException | None:
    """The engine's stop (an approval wait, an escalation, a budget...) inside ``exc``, which
    pydantic-ai may have wrapped in an exception group."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _stop_in(inner)
            if found is not None:
                return found
        return None
    if not isinstance(exc, Exception) or isinstance(exc, NonDeterminismError):
        return exc
    return None
