"""The Agents SDK's function tools through the one door: each call of the model's becomes
``ctx.call`` of an underway tool (allow-list, schema, policy, budgets, approvals, taint)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext
from pydantic_core import to_jsonable_python

from ...effects import CallInfo, Tool, ToolOptions, tool
from ...effects._schema_args import SchemaArguments, schema_arguments
from ...errors import ConfigurationError, ToolCallError
from ...events import JSON
from ...flow import RunContext
from ...guard.policy import APPROVAL_LABEL
from .._provenance import Provenance, labelled


@dataclass
class StepScope:
    """What the SDK's calls inside one step reach: the step's context, whether model calls
    stream, the lock that runs the tools of a turn one at a time (so their journal order is
    the same on every re-run), and where the untrusted content in the agent's context came
    from."""

    ctx: RunContext[Any, Any]
    stream: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    taint: list[str] = field(default_factory=list)
    proposed_from: list[str] = field(default_factory=list)
    """The taint of the context the model's latest response was made in: the calls it
    proposes carry it (not what the other calls of the same turn add)."""
    stopped: BaseException | None = None
    """The stop (an approval wait, a budget's refusal...) a call of this step raised: the
    calls queued behind it end with it instead of running."""
    provenance: Provenance | None = None
    """What trusted and untrusted sources put in the agent's context, per value."""

    def traced(self) -> Provenance:
        """The step's provenance, made on first use (sharing :attr:`taint`)."""
        if self.provenance is None:
            self.provenance = Provenance(self.taint)
        return self.provenance


SCOPE: ContextVar[StepScope] = ContextVar("underway_openai_agents_scope")
_TOOL_CONTEXT: ContextVar[ToolContext[Any]] = ContextVar("underway_openai_agents_tool")
_CALL: ContextVar[CallInfo] = ContextVar("underway_openai_agents_call")


def current_call() -> CallInfo:
    """The :class:`~underway.effects.CallInfo` of the tool call running now: an SDK tool
    reads its idempotency key (``current_call().key``) here to pass it to the outside
    system. A :class:`ConfigurationError` outside a durable agent's tool call."""
    info = _CALL.get(None)
    if info is None:
        raise ConfigurationError("current_call() is known only inside a durable agent's "
                                 "tool call")
    return info


def scope() -> StepScope:
    """The step the SDK runs in; a :class:`ConfigurationError` outside one."""
    found = SCOPE.get(None)
    if found is None:
        raise ConfigurationError(
            "a durable agent's models and tools run only inside its underway step; start "
            "a run of DurableAgent.flow instead of calling Runner.run on the agent")
    return found


async def _needs_approval(tool: FunctionTool, ctx: ToolContext[Any], args: JSON) -> bool:
    rule = tool.needs_approval
    if isinstance(rule, bool):
        return rule
    out = rule(ctx, args if isinstance(args, dict) else {}, ctx.tool_call_id)
    return bool(await out if inspect.isawaitable(out) else out)


def durable_tool(sdk: FunctionTool, options: ToolOptions) -> tuple[FunctionTool, Tool]:
    """The SDK tool ``sdk`` made durable: the copy the agent keeps, whose every call goes
    through ``ctx.call``, and the underway tool that runs the original.

    Args:
        sdk: The SDK's function tool.
        options: Underway's options of the tool (:func:`underway.tool`); by default a tool
            is mutating, not idempotent, and its output untrusted.
    """
    original = sdk.on_invoke_tool

    # Typed Any so that the tool is built first, then given its argument model (whose
    # fields are the schema's properties, where money paths point).
    async def run(args: Any, info: CallInfo) -> JSON:
        tool_ctx = _TOOL_CONTEXT.get(None)
        if tool_ctx is None:
            raise ConfigurationError(
                f"tool {sdk.name!r} of an Agents SDK agent runs only when its agent calls it")
        token = _CALL.set(info)
        try:
            out = await original(tool_ctx, json.dumps(SchemaArguments.arguments(args)))
        finally:
            _CALL.reset(token)
        return to_jsonable_python(out, fallback=str)

    opts: dict[str, Any] = {"description": sdk.description, "name": sdk.name}
    if sdk.timeout_seconds is not None:
        opts["timeout"] = sdk.timeout_seconds
    opts.update(options)
    made = tool(run, **opts)
    made = dataclasses.replace(made, args_model=schema_arguments(
        sdk.name, sdk.params_json_schema, where="OpenAI Agents SDK", extra="openai-agents",
        base=SchemaArguments))

    async def invoke(tool_ctx: ToolContext[Any], raw: str) -> Any:
        step = scope()
        try:
            args: JSON = json.loads(raw) if raw else {}
        except ValueError:
            args = raw  # the door's schema check refuses it, journaled
        # The calls of a turn reach the lock in the model's order, as the SDK starts them;
        # nothing here may wait on anything else before it.
        async with step.lock:
            if step.stopped is not None:
                raise step.stopped
            sources = list(step.proposed_from)
            found = step.traced().assess(made, args, sources)
            labels, risks, evidence = labelled(found, sources,
                                               {"call_id": tool_ctx.tool_call_id})
            if await _needs_approval(sdk, tool_ctx, args):
                labels.append(APPROVAL_LABEL)
            token = _TOOL_CONTEXT.set(tool_ctx)
            try:
                result: Any = await step.ctx.call(made, args, labels=labels,
                                                  evidence=evidence, risks=risks)
                failed: str | None = None
            except ToolCallError as exc:
                result = f"The tool call was not carried out ({exc.error_type}): {exc.message}"
                failed = exc.error_type
            except BaseException as exc:
                if not isinstance(exc, Exception | asyncio.CancelledError):
                    step.stopped = exc
                raise
            finally:
                _TOOL_CONTEXT.reset(token)
            # What the tool said enters the model's context: its later calls carry it.
            step.traced().took(made, found, result, failed)
        return result

    copy = dataclasses.replace(sdk, on_invoke_tool=invoke, needs_approval=False,
                               timeout_seconds=None)
    return copy, made


def check_tools(tools: Mapping[str, ToolOptions] | None, known: set[str]) -> None:
    """Check that every tool named in ``tools`` is one of the agent's."""
    unknown = sorted(set(tools or {}) - known)
    if unknown:
        raise ConfigurationError(
            f"options given for tools the agent does not have: {unknown}; its tools: "
            f"{sorted(known)}")
