"""pydantic-ai toolsets as underway tools: every call passes the one door.

:class:`GuardedToolset` wraps each leaf toolset of an agent (a ``FunctionToolset``, an MCP
server, any ``AbstractToolset``). Each of its tools becomes an underway
:class:`~underway.effects.Tool` and each call a ``ctx.call``: allow-list, argument schema,
budgets, policy, approvals and taint, journaled write-ahead when it changes the world.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.tools import RunContext as PaiContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import (
    AbstractToolset,
    ApprovalRequiredToolset,
    CombinedToolset,
    ToolsetTool,
    WrapperToolset,
)
from pydantic_core import SchemaValidator, core_schema, to_jsonable_python

from ...effects import CallInfo, Tool, tool_options
from ...effects import tool as declare_tool
from ...effects._mcp_hints import flags
from ...effects._schema_args import SchemaArguments, arguments_model
from ...errors import ConfigurationError, ToolCallError
from ...events import JSON
from ...guard.policy import approval_label
from .._provenance import Provenance, labelled
from ._model import SCOPE, StepScope

_ANY_ARGS = SchemaValidator(core_schema.dict_schema(core_schema.str_schema(),
                                                    core_schema.any_schema()))
"""Lets the model's arguments through to the door, which checks them against the tool's own
validator and journals a failure (``SchemaValidationFailed``)."""


@dataclass(frozen=True)
class _Call:
    """The pydantic-ai call an underway tool function carries out."""

    toolset: AbstractToolset[Any]
    tool: ToolsetTool[Any]
    ctx: PaiContext[Any]
    args: dict[str, Any]


_CALL: ContextVar[_Call | None] = ContextVar("underway_pydantic_ai_call", default=None)
_INFO: ContextVar[CallInfo | None] = ContextVar("underway_pydantic_ai_info", default=None)


def call_info() -> CallInfo:
    """The underway call a pydantic-ai tool is running as: its idempotency ``key`` (send it
    to the outside system, so a ``reconcile`` hook can ask about it), run, tenant, fence.

    Raises:
        ConfigurationError: Called outside a tool call of a durable agent.
    """
    info = _INFO.get()
    if info is None:
        raise ConfigurationError("call_info() is for a pydantic-ai tool running in a "
                                 "DurableAgent's run")
    return info


async def _carry_out(args: Any, info: CallInfo) -> JSON:
    """The body of every underway tool made here: run the pydantic-ai tool once.

    Its result is returned as JSON, the form the journal keeps, so a first run and a
    re-run hand the agent the same value."""
    call = _CALL.get()
    if call is None:
        raise ConfigurationError("a pydantic-ai tool ran outside the durable agent's step")
    validated = call.tool.args_validator.validate_python(
        call.args, context=call.ctx.validation_context)
    token = _INFO.set(info)
    try:
        out = await call.toolset.call_tool(call.tool.tool_def.name, validated, call.ctx,
                                           call.tool)
    finally:
        _INFO.reset(token)
    result: JSON = to_jsonable_python(out)
    return result


class _Arguments(SchemaArguments):
    """Base of the argument models made for pydantic-ai tools: checked by the tool's own
    validator (the one pydantic-ai runs), its schema the tool's."""

    @classmethod
    def schema_errors(cls, value: Any) -> list[str]:
        """What the pydantic-ai tool's validator finds wrong with ``value``."""
        try:
            cls.validator.validate_python(value)
        except ValidationError as exc:
            return [f"{'.'.join(map(str, e['loc'])) or '(arguments)'}: {e['msg']}"
                    for e in exc.errors(include_url=False)]
        return []


def _flags_from_metadata(tool: ToolsetTool[Any], overrides: Mapping[str, Any]
                         ) -> dict[str, Any]:
    """The effect flags of an MCP tool, by the rules of :func:`underway.mcp.flags` (no
    annotation: mutating, irreversible, output untrusted), the user's ``overrides``
    winning. An MCP tool is one whose metadata carries ``annotations``, as pydantic-ai's
    MCP toolsets give them (None when the server gave none); other tools get nothing
    here."""
    meta = tool.tool_def.metadata
    if not isinstance(meta, dict) or "annotations" not in meta:
        return {}
    return flags(meta["annotations"], overrides).options()


def check_flags(flags: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The user's per-tool options, each a keyword of :func:`~underway.tool`, checked now
    (their values too) rather than when a run first lists the tool."""
    checked: dict[str, dict[str, Any]] = {}
    for name, options in flags.items():
        checked[name] = dict(tool_options(f"tool {name!r}", options))
        declare_tool(_carry_out, name=name, **checked[name])
    return checked


@dataclass
class Tools:
    """The underway tools made for one durable agent, by name, with the user's options."""

    flags: dict[str, dict[str, Any]]
    made: dict[str, Tool] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    """Tools pydantic-ai marks ``requires_approval``: their calls carry
    :data:`~underway.guard.policy.APPROVAL_LABEL`."""
    external: set[str] = field(default_factory=set)
    """Deferred tools whose result comes from outside the run: a person answers them."""
    approver_role: str | None = None
    """Who approves the calls held for approval (None: the policy's, else any approver)."""

    def tool(self, tool: ToolsetTool[Any]) -> Tool:
        """The underway tool standing for ``tool`` (made once)."""
        name = tool.tool_def.name
        found = self.made.get(name)
        if found is None:
            given = self.flags.get(name, {})
            options = {"timeout": tool.tool_def.timeout or 30.0,
                       **_flags_from_metadata(tool, given), **given}
            # Declared as any underway tool is (read_only, hosts and the rest checked the
            # same way), then given the tool's own argument model.
            described = options.pop("description", None) or tool.tool_def.description or ""
            made = declare_tool(_carry_out, name=name, **options)
            found = self.made[name] = dataclasses.replace(
                made, description=described,
                args_model=arguments_model(name, tool.tool_def.parameters_json_schema,
                                           tool.args_validator, _Arguments))
        return found


@dataclass
class GuardedToolset(WrapperToolset[Any]):
    """A pydantic-ai toolset whose every call goes through ``ctx.call``.

    Tools that ``requires_approval`` wait for a signed approval; deferred (external) tools
    ask a person for their result; neither goes back to the caller as
    ``DeferredToolRequests``.
    """

    tools: Tools = field(default_factory=lambda: Tools({}))

    async def get_tools(self, ctx: PaiContext[Any]) -> dict[str, ToolsetTool[Any]]:
        listed = await super().get_tools(ctx)
        if SCOPE.get() is None:
            return listed
        out: dict[str, ToolsetTool[Any]] = {}
        for name, t in listed.items():
            kind = t.tool_def.kind
            if kind == "output":
                out[name] = t
                continue
            if kind == "unapproved":
                self.tools.held.add(name)
            elif kind == "external":
                self.tools.external.add(name)
            tool_def = dataclasses.replace(t.tool_def, kind="function")
            validator = t.args_validator if t.args_validator_func is not None else _ANY_ARGS
            out[name] = dataclasses.replace(t, tool_def=tool_def, args_validator=validator,
                                            toolset=self)
            # The door checks arguments with the tool's own validator.
            self._originals[name] = t
        return out

    def __post_init__(self) -> None:
        self._originals: dict[str, ToolsetTool[Any]] = {}

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: PaiContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        """Call a tool through underway's door when inside a durable step, else directly.

        Args:
            name: The tool's name.
            tool_args: Its arguments, as the model gave them.
            ctx: pydantic-ai's run context.
            tool: The tool as this toolset listed it.
        """
        scope = SCOPE.get()
        if scope is None:
            return await super().call_tool(name, tool_args, ctx, tool)
        original = self._originals.get(name, tool)
        args = to_jsonable_python(tool_args)
        if name in self.tools.external:
            answer = await scope.ctx.ask(
                f"The agent asks for the result of {name!r}.",
                context={"tool": name, "args": args, "description": tool.tool_def.description})
            if scope.provenance is not None:
                # A person's answer is trusted, whatever the context.
                scope.provenance.answered(answer)
            return answer
        held = name in self.tools.held or _HELD.get()
        try:
            return await self._door(scope, original, ctx, args, held=held)
        except _AskedForApproval:
            # The tool raised ApprovalRequired before acting: the same call again, held
            # for a signed approval, then run as approved.
            return await self._door(scope, original, ctx, args, held=True)

    async def _door(self, scope: StepScope, original: ToolsetTool[Any], ctx: PaiContext[Any],
                    args: dict[str, Any], *, held: bool) -> Any:
        """One ``ctx.call`` of the tool, its refusals and failures in pydantic-ai's terms."""
        t = self.tools.tool(original)
        found = _provenance(scope).assess(t, args, scope.sources)
        labels, risks, evidence = labelled(found, scope.sources, {"agent": scope.agent})
        if held:
            labels.append(approval_label(self.tools.approver_role))
            # The door lets the call through only once a person approved it.
            ctx = dataclasses.replace(ctx, tool_call_approved=True)
        token = _CALL.set(_Call(self.wrapped, original, ctx, args))
        try:
            result = await scope.ctx.call(t, args, labels=labels, risks=risks,
                                          evidence=evidence)
        except ToolCallError as exc:
            if exc.error_type == "ApprovalRequired" and not held:
                raise _AskedForApproval from None
            retry = exc.error_type in ("SchemaValidationFailed", "ModelRetry")
            told = exc.message if retry else f"{exc.error_type}: {exc.message}"
            # A tool that raised ApprovalRequired did so before acting: it said nothing.
            if exc.error_type != "ApprovalRequired":
                _provenance(scope).took(t, found, told, exc.error_type)
            if retry:
                raise ModelRetry(exc.message) from None
            raise ToolFailed(told) from None
        finally:
            _CALL.reset(token)
        _provenance(scope).took(t, found, result)
        return result


def _provenance(scope: StepScope) -> Provenance:
    """The provenance of the step's agent: made on first use for a scope that has none."""
    if scope.provenance is None:
        scope.provenance = Provenance(scope.sources)
    return scope.provenance


class _AskedForApproval(Exception):
    """A tool raised pydantic-ai's ``ApprovalRequired``: its call is to be held."""


_HELD: ContextVar[bool] = ContextVar("underway_pydantic_ai_held", default=False)
"""Set by :class:`_HeldByPolicy` for a call an ``ApprovalRequiredToolset`` would defer."""


@dataclass
class _HeldByPolicy(WrapperToolset[Any]):
    """Stands for an ``ApprovalRequiredToolset``: a call its function says needs approval
    is held by the durable agent's policy for a signed decision, not deferred."""

    approval_required_func: Callable[[PaiContext[Any], ToolDefinition, dict[str, Any]], bool] \
        = field(default=lambda ctx, tool_def, args: True)

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: PaiContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        if SCOPE.get() is None or ctx.tool_call_approved or not self.approval_required_func(
                ctx, tool.tool_def, tool_args):
            return await super().call_tool(name, tool_args, ctx, tool)
        token = _HELD.set(True)
        try:
            return await super().call_tool(name, tool_args, ctx, tool)
        finally:
            _HELD.reset(token)


def guard_toolset(toolset: AbstractToolset[Any], tools: Tools) -> AbstractToolset[Any]:
    """``toolset`` with each leaf toolset wrapped in a :class:`GuardedToolset`, and each
    ``ApprovalRequiredToolset`` holding its calls for a signed approval instead."""
    if isinstance(toolset, ApprovalRequiredToolset):
        return _HeldByPolicy(guard_toolset(toolset.wrapped, tools),
                             approval_required_func=toolset.approval_required_func)
    if isinstance(toolset, WrapperToolset):
        return dataclasses.replace(toolset, wrapped=guard_toolset(toolset.wrapped, tools))
    if isinstance(toolset, CombinedToolset):
        return dataclasses.replace(toolset, toolsets=[guard_toolset(t, tools)
                                                      for t in toolset.toolsets])
    return GuardedToolset(toolset, tools=tools)
