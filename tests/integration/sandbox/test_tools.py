"""The shell and code tools inside a flow: validated arguments, journaled results, a
failing command seen by the step as a result, and the profile carried by the tool."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import events as ev
from underway.sandbox import (
    CommandResult,
    Limits,
    PythonArgs,
    SandboxProfile,
    ShellArgs,
    python_tool,
    shell_tool,
)
from underway.testing import memory_engine

PROFILE = SandboxProfile(backend="bwrap", limits=Limits(timeout_s=20))


class Seen(BaseModel):
    results: list[dict[str, Any]] = []


class Calls(BaseModel):
    calls: list[dict[str, Any]]


def run_flow(tool: uw.Tool, calls: list[dict[str, Any]]) -> tuple[uw.RunState, list[Any]]:
    flow = uw.Flow(f"uses_{tool.name}", state=Seen, input=Calls)

    @flow.step
    async def use(ctx: uw.RunContext[Seen, Calls]) -> Any:
        for args in ctx.input.calls:
            result = await ctx.call(tool, args)  # a CommandResult: the tool is typed
            ctx.state.results.append(result.model_dump(mode="json"))
        return ctx.done({"results": ctx.state.results})

    engine, _ = memory_engine([flow], [tool])
    run_id, _ = engine.start(flow, {"calls": calls})
    state = asyncio.run(uw.Runner(engine).run_until_complete(run_id))
    events = [r.event for r in engine.journal.history("default", run_id)]
    return state, events


def test_shell_tool_results_are_journaled_and_a_failing_command_is_a_result() -> None:
    shell = shell_tool(name="sh", profile=PROFILE)
    state, events = run_flow(shell, [{"command": "echo hello"},
                                     {"command": "cat; exit 4", "stdin": "fed"}])
    assert state.status == "completed"
    first, second = (CommandResult.model_validate(r) for r in state.result["results"])
    assert first.stdout == "hello\n" and first.ok
    assert second.stdout == "fed" and second.exit_code == 4
    assert first.profile_digest == PROFILE.digest()
    started = [e for e in events if isinstance(e, ev.ToolStarted)]
    succeeded = [e for e in events if isinstance(e, ev.ToolSucceeded)]
    assert len(started) == 2, "a shell tool is mutating by default: its intent comes first"
    assert {s.sandbox_profile for s in started} == {PROFILE.digest()}
    assert [s.result["stdout"] for s in succeeded] == ["hello\n", "fed"]


def test_code_tool_runs_python_on_the_hosts_interpreter() -> None:
    code = python_tool(name="py", profile=PROFILE, mutating=False)
    state, _ = run_flow(code, [{"code": "import sys; print(sum(range(10)), sys.flags.isolated)"}])
    result = CommandResult.model_validate(state.result["results"][0])
    assert result.stdout == "45 1\n"


def test_bad_arguments_fail_the_call_naming_the_schema() -> None:
    shell = shell_tool(name="sh", profile=PROFILE)
    flow = uw.Flow("bad_args", state=Seen)

    @flow.step
    async def use(ctx: uw.RunContext[Seen, Any]) -> Any:
        try:
            await ctx.call(shell, {"cmd": "echo typo"})
        except uw.ToolCallError as exc:
            return ctx.done({"error": exc.error_type})
        return ctx.done({"error": None})

    engine, _ = memory_engine([flow], [shell])
    run_id, _ = engine.start(flow)
    state = asyncio.run(uw.Runner(engine).run_until_complete(run_id))
    assert state.result == {"error": "SchemaValidationFailed"}


def test_tools_declare_their_models_effects_timeout_and_profile() -> None:
    shell = shell_tool(name="sh", profile=PROFILE, idempotent=True)
    code = python_tool(name="py", profile=PROFILE)
    assert shell.args_model is ShellArgs and code.args_model is PythonArgs
    assert shell.result_model is CommandResult is code.result_model
    assert shell.mutating and shell.idempotent and not code.idempotent
    assert shell.timeout > PROFILE.limits.timeout_s, "the sandbox times out before the engine"
    assert shell.sandbox is PROFILE
    assert code.sandbox.python and not PROFILE.python, "the code tool shows the interpreter"


def test_code_longer_than_the_limit_is_refused_by_the_schema() -> None:
    with pytest.raises(ValueError, match="at most 100000 characters"):
        PythonArgs(code="x" * 100_001)
