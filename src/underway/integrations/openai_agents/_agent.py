""":class:`DurableAgent`: an Agents SDK agent as an underway flow, whose one step runs
``Runner.run`` with every model call journaled and every tool call through the door."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from agents import Agent, FunctionTool, Handoff, RunConfig, RunHooks, Runner
from agents.agent_output import AgentOutputSchemaBase
from agents.exceptions import AgentsException
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelProvider, ModelTracing
from agents.models.multi_provider import MultiProvider
from agents.run_context import AgentHookContext, RunContextWrapper
from agents.tool import Tool as SDKTool
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from ...effects import Tool, ToolOptions, tool_options
from ...errors import ConfigurationError
from ...flow import Flow, Next, RunContext
from ...guard.budgets import Budget
from ...guard.policy import DEFAULT_POLICY, Policy
from ...guard.taint import add_source
from ...models.errors import ModelError
from ...models.pricing import PriceTable
from .._provenance import Provenance, check_writes
from ._requests import HOSTED, AgentsModel, decode_response, encode_request
from ._tools import SCOPE, StepScope, check_tools, durable_tool, scope


class AgentInput(BaseModel):
    """A durable agent run's input: what ``Runner.run`` is given."""

    input: str | list[dict[str, Any]]
    """The user's message, or input items in the Responses format."""


class AgentRun(BaseModel):
    """A durable agent run's state: the journal holds its calls, so nothing more."""


class DurableModel(Model):
    """An SDK model whose every response comes through ``ctx.model``: journaled once,
    counted by budgets, read back from the journal when the step runs again."""

    def __init__(self, model: Model, *, prices: PriceTable | None = None) -> None:
        self.adapter = AgentsModel(model, prices=prices)

    async def get_response(
        self, system_instructions: str | None, input: str | list[TResponseInputItem],
        model_settings: ModelSettings, tools: list[SDKTool],
        output_schema: AgentOutputSchemaBase | None, handoffs: list[Handoff],
        tracing: ModelTracing, *, previous_response_id: str | None,
        conversation_id: str | None, prompt: Any,
    ) -> ModelResponse:
        """The model's response: from the journal, else asked once and journaled.

        Args:
            system_instructions: The agent's instructions.
            input: The conversation so far.
            model_settings: The agent's model settings.
            tools: The tools the model may call.
            output_schema: The shape of the final output, if any.
            handoffs: The agents the model may hand over to.
            tracing: The SDK's tracing mode (the journal is the record).
            previous_response_id: A server-side conversation to continue.
            conversation_id: A server-side conversation to join.
            prompt: A stored prompt of the provider's.
        """
        request = encode_request(
            system_instructions=system_instructions, input=input,
            model_settings=model_settings, tools=tools, output_schema=output_schema,
            handoffs=handoffs, previous_response_id=previous_response_id,
            conversation_id=conversation_id, prompt=prompt)
        step = scope()
        # The agent's instructions are the flow's constants; what trusted tools gave back
        # since the last request is in the context the model is sent now.
        step.traced().instructions(system_instructions)
        step.traced().seen()
        response = decode_response(
            await step.ctx.model(self.adapter, request, stream=step.stream))
        # The calls this response proposes come from the context the model saw.
        step.proposed_from = list(step.taint)
        for item in response.output:
            if item.type in ("web_search_call", "file_search_call"):
                # What the provider's search found is in the model's context now.
                source = item.type.removesuffix("_call")
                step.traced().untrusted(source, to_jsonable_python(item))
                add_source(step.proposed_from, source)
        return response

    def stream_response(
        self, system_instructions: str | None, input: str | list[TResponseInputItem],
        model_settings: ModelSettings, tools: list[SDKTool],
        output_schema: AgentOutputSchemaBase | None, handoffs: list[Handoff],
        tracing: ModelTracing, *, previous_response_id: str | None,
        conversation_id: str | None, prompt: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Not offered: the durable step runs the agent with ``Runner.run``.

        Args:
            system_instructions: As for :meth:`get_response`.
            input: As for :meth:`get_response`.
            model_settings: As for :meth:`get_response`.
            tools: As for :meth:`get_response`.
            output_schema: As for :meth:`get_response`.
            handoffs: As for :meth:`get_response`.
            tracing: As for :meth:`get_response`.
            previous_response_id: As for :meth:`get_response`.
            conversation_id: As for :meth:`get_response`.
            prompt: As for :meth:`get_response`.
        """
        raise ConfigurationError(
            "a durable agent runs inside its step with Runner.run; Runner.run_streamed is "
            "not offered")


class _Provider(ModelProvider):
    """Looks models up by name in the user's provider and makes each durable."""

    def __init__(self, base: ModelProvider, prices: PriceTable | None) -> None:
        self._base, self._prices = base, prices
        self._models: dict[str | None, DurableModel] = {}

    def get_model(self, model_name: str | None) -> Model:
        found = self._models.get(model_name)
        if found is None:
            found = self._models[model_name] = DurableModel(self._base.get_model(model_name),
                                                            prices=self._prices)
        return found


class _Hooks(RunHooks[Any]):
    """Refuses an agent that was not made durable (reached by a handoff the graph walk could
    not see into), then passes every hook on to the user's."""

    def __init__(self, durable: set[int], user: RunHooks[Any] | None) -> None:
        self._durable, self._user = durable, user or RunHooks()

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        if id(agent) not in self._durable:
            raise ConfigurationError(
                f"agent {agent.name!r} was reached by a handoff whose target agent the "
                "durable wrapper could not see; hand off to the Agent object itself (or "
                "with agents.handoff(agent)) so its model and tools are made durable")
        await self._user.on_agent_start(context, agent)

    async def on_agent_end(self, context: AgentHookContext[Any], agent: Agent[Any],
                           output: Any) -> None:
        await self._user.on_agent_end(context, agent, output)

    async def on_handoff(self, context: RunContextWrapper[Any], from_agent: Agent[Any],
                         to_agent: Agent[Any]) -> None:
        await self._user.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any],
                            tool: SDKTool) -> None:
        await self._user.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Agent[Any],
                          tool: SDKTool, result: object) -> None:
        await self._user.on_tool_end(context, agent, tool, result)

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Agent[Any],
                           system_prompt: str | None,
                           input_items: list[TResponseInputItem]) -> None:
        await self._user.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any],
                         response: ModelResponse) -> None:
        await self._user.on_llm_end(context, agent, response)


class _Graph:
    """Copies an agent and every agent it hands off to, with durable models and tools."""

    def __init__(self, options: Mapping[str, ToolOptions], prices: PriceTable | None) -> None:
        self.options, self.prices = options, prices
        self.clones: dict[int, Agent[Any]] = {}
        self.tools: dict[int, tuple[FunctionTool, Tool]] = {}
        self.names: dict[str, int] = {}
        self.originals: list[FunctionTool] = []

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        done = self.clones.get(id(agent))
        if done is not None:
            return done
        if agent.mcp_servers:
            raise ConfigurationError(
                f"agent {agent.name!r} takes tools from MCP servers, which would run outside "
                "underway's guard; give it underway's MCP tools instead")
        clone = agent.clone()
        self.clones[id(agent)] = clone
        self.clones[id(clone)] = clone
        clone.tools = [self.tool(agent, t) for t in agent.tools]
        if isinstance(agent.model, Model):
            clone.model = DurableModel(agent.model, prices=self.prices)
        clone.handoffs = [self.agent(h) if isinstance(h, Agent) else self.handoff(h)
                          for h in agent.handoffs]
        return clone

    def tool(self, agent: Agent[Any], t: SDKTool) -> SDKTool:
        if isinstance(t, tuple(HOSTED.values())):
            return t
        if not isinstance(t, FunctionTool) or t._is_agent_tool:
            kind = "an agent used as a tool" if isinstance(t, FunctionTool) else type(t).__name__
            raise ConfigurationError(
                f"agent {agent.name!r}: tool {getattr(t, 'name', t)!r} is {kind}; a durable "
                "agent takes function tools, each run through ctx.call, and the provider's "
                f"{' and '.join(HOSTED)}")
        made = self.tools.get(id(t))
        if made is None:
            if t.name in self.names:
                raise ConfigurationError(
                    f"two different tools are named {t.name!r}; underway knows a tool by "
                    "its name, so give them different names")
            self.names[t.name] = id(t)
            self.originals.append(t)
            made = self.tools[id(t)] = durable_tool(t, self.options.get(t.name, {}))
        return made[0]

    def handoff(self, h: Handoff[Any, Any]) -> Handoff[Any, Any]:
        ref = h._agent_ref() if h._agent_ref is not None else None
        if isinstance(ref, Agent):
            self.agent(ref)
        original, clones = h.on_invoke_handoff, self.clones

        async def invoke(ctx: RunContextWrapper[Any], args: str) -> Any:
            target = await original(ctx, args)
            return clones.get(id(target), target)

        copy = dataclasses.replace(h, on_invoke_handoff=invoke)
        copy._agent_ref = h._agent_ref
        return copy


class DurableAgent:
    """An OpenAI Agents SDK agent run durably by underway.

    ``flow`` is an underway flow with one step that runs the agent with ``Runner.run``.
    Every model call goes through ``ctx.model``: journaled once with tokens and cost,
    counted by budgets, read back when the step runs again after a crash. Every call of a
    function tool goes through ``ctx.call``: allow-list, JSON Schema, policy, budgets,
    approvals and taint. A tool with ``needs_approval`` waits for a signed decision
    instead of interrupting the run. The run's result is the agent's final output.

    Args:
        agent: The SDK agent. It is copied; the original is left as it was.
        name: The flow's name (default: the agent's name, with other characters as ``_``).
        tools: Underway's options per tool name (``{"refund": {"idempotent": True}}``, see
            :func:`underway.tool`). A tool is mutating, not idempotent and untrusted unless
            its options say otherwise.
        policy: The flow's policy (None: the engine's, else
            :data:`~underway.guard.policy.DEFAULT_POLICY`). Whatever the policy, the guard
            holds a call of a ``needs_approval`` tool for a signed decision unless the
            policy denies it.
        budget: The flow's budget (default: the engine's).
        run_config: Passed to ``Runner.run``; its model provider is made durable.
        hooks: The SDK hooks to call. They are called again each time the step runs again
            (after a crash or an approval), as the agent walks its journaled path.
        max_turns: Passed to ``Runner.run``.
        stream: Stream each model call's text and tool-call deltas to the run's live stream
            as they arrive (``Client.stream``); the complete response is journaled once.
        context: Makes the SDK run context from the step's context (default: None).
        prices: Prices model calls; None means the maintained table.
        writes: The tools the agent's task writes with, a constant of the flow: a call of
            one from a context that has read untrusted content is not ``unrequested``;
            its arguments are still traced (:mod:`underway.guard.provenance`). None: no
            tool is requested, so the default policy holds every mutating or outbound
            call from a tainted context.
    """

    def __init__(
        self,
        agent: Agent[Any],
        *,
        name: str | None = None,
        tools: Mapping[str, ToolOptions] | None = None,
        policy: Policy | None = None,
        budget: Budget | None = None,
        run_config: RunConfig | None = None,
        hooks: RunHooks[Any] | None = None,
        max_turns: int = 10,
        stream: bool = False,
        context: Callable[[RunContext[AgentRun, AgentInput]], Any] | None = None,
        prices: PriceTable | None = None,
        writes: Sequence[str] | None = None,
    ) -> None:
        for tool_name, options in (tools or {}).items():
            tool_options(f"tool {tool_name!r}", options)
        graph = _Graph(tools or {}, prices)
        self.agent = graph.agent(agent)
        check_tools(dict(tools or {}), set(graph.names))
        self.writes = check_writes(writes, set(graph.names), f"agent {agent.name!r}")
        """The tools the agent's task writes with (None: none declared)."""
        self.tools = [made for _, made in graph.tools.values()]
        """The underway tools the agent's calls go through."""
        config = run_config or RunConfig()
        self.run_config = dataclasses.replace(
            config, model_provider=_Provider(config.model_provider or MultiProvider(), prices))
        self._hooks = _Hooks(set(graph.clones), hooks)
        self._max_turns, self._context, self._stream = max_turns, context, stream
        flow_name = name or re.sub(r"[^A-Za-z0-9_.-]+", "_", agent.name).strip("_")
        self.flow: Flow[AgentRun, AgentInput] = Flow(
            flow_name, state=AgentRun, input=AgentInput, tools=list[Tool | str](self.tools),
            policy=policy, budget=budget, default_policy=DEFAULT_POLICY, signals=())
        """The flow to register with an engine; start runs with ``{"input": ...}``."""
        self.flow.step(self._run, name="run", start=True)

    async def _run(self, ctx: RunContext[AgentRun, AgentInput]) -> Next:
        step = StepScope(ctx, stream=self._stream, taint=[*ctx.lineage.sources])
        # Rebuilt on every run of the step, from the input and what the journal answers.
        step.provenance = Provenance(step.taint, requested=self.writes)
        step.provenance.start(to_jsonable_python(ctx.input.input),
                              tainted=ctx.lineage.sources)
        token = SCOPE.set(step)
        try:
            result = await Runner.run(
                self.agent, ctx.input.input,  # type: ignore[arg-type]
                context=None if self._context is None else self._context(ctx),
                max_turns=self._max_turns, hooks=self._hooks, run_config=self.run_config)
        except (AgentsException, ModelError) as exc:
            # A transient ModelError never gets here: the engine retries it on a timer.
            return ctx.fail(f"{type(exc).__name__}: {exc}")
        finally:
            SCOPE.reset(token)
        return ctx.done(to_jsonable_python(result.final_output, fallback=str))

