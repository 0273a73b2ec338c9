"""Failing closed: without a usable backend nothing runs, and the unsandboxed backend
runs only when asked for explicitly, warning every time."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from fakes.docker_image import engine_reason, require_image
from underway.errors import ConfigurationError, UnderwayError
from underway.sandbox import (
    SandboxProfile,
    SandboxUnavailable,
    run_command,
    shell_tool,
    why_unavailable,
)
from underway.testing import memory_engine


class Empty(BaseModel):
    """No state."""


@pytest.fixture
def no_sandbox_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH holds a directory with neither bwrap nor docker; the file the test would
    create if a command ran anyway is returned."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return tmp_path / "ran"


def test_bwrap_missing_from_path_refuses_and_says_how_to_fix_it(no_sandbox_binaries: Path) -> None:
    with pytest.raises(SandboxUnavailable) as caught:
        run_command(f"touch {no_sandbox_binaries}", profile=SandboxProfile(backend="bwrap"))
    message = str(caught.value)
    assert "`bwrap` is not on PATH" in message
    assert "apt-get install bubblewrap" in message
    assert not no_sandbox_binaries.exists()
    assert isinstance(caught.value, ConfigurationError)
    assert isinstance(caught.value, UnderwayError)


def test_auto_with_no_backend_names_each_one_tried(no_sandbox_binaries: Path) -> None:
    with pytest.raises(SandboxUnavailable) as caught:
        run_command(f"touch {no_sandbox_binaries}", profile=SandboxProfile())
    message = str(caught.value)
    assert "bwrap: `bwrap` is not on PATH" in message
    assert "docker: the `docker` client is not on PATH" in message
    assert not no_sandbox_binaries.exists()
    assert why_unavailable("auto") is not None


def test_docker_is_used_only_when_an_engine_answers(tmp_path: Path) -> None:
    """Without an engine the backend says so and refuses; where an engine runs, the same
    test runs the command in a container."""
    profile = SandboxProfile(backend="docker")
    reason = engine_reason()
    if reason is None:
        profile = SandboxProfile(backend="docker", image=require_image())
        r = run_command("echo in-a-container", profile=profile)
        assert r.backend == "docker" and r.stdout == "in-a-container\n"
        return
    with pytest.raises(SandboxUnavailable, match="docker: ") as caught:
        run_command(f"touch {tmp_path / 'ran'}", profile=profile)
    assert reason in str(caught.value)
    assert not (tmp_path / "ran").exists()


def test_auto_picks_bubblewrap_when_it_is_usable() -> None:
    assert why_unavailable("bwrap") is None
    assert run_command("true", profile=SandboxProfile()).backend == "bwrap"


def test_none_without_the_opt_out_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNDERWAY_ALLOW_UNSANDBOXED", raising=False)
    with pytest.raises(SandboxUnavailable, match="allow_unsandboxed=True"):
        run_command(f"touch {tmp_path / 'ran'}", profile=SandboxProfile(backend="none"))
    assert not (tmp_path / "ran").exists()
    monkeypatch.setenv("UNDERWAY_ALLOW_UNSANDBOXED", "yes")
    with pytest.raises(SandboxUnavailable, match="UNDERWAY_ALLOW_UNSANDBOXED=1"):
        run_command("true", profile=SandboxProfile(backend="none"))


def test_none_with_the_opt_out_runs_and_warns_on_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("UNDERWAY_ALLOW_UNSANDBOXED", raising=False)
    profile = SandboxProfile(backend="none", allow_unsandboxed=True)
    with caplog.at_level(logging.WARNING, logger="underway.sandbox"):
        r = run_command(f"touch {tmp_path / 'ran'}; pwd", profile=profile)
        run_command("true", profile=profile)
    assert r.ok and r.backend == "none"
    assert (tmp_path / "ran").exists(), "no isolation: the host path was written"
    warnings = [rec for rec in caplog.records if "UNSANDBOXED" in rec.getMessage()]
    assert len(warnings) == 2 and all(w.levelno == logging.WARNING for w in warnings)


def test_none_allowed_by_the_environment(monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("UNDERWAY_ALLOW_UNSANDBOXED", "1")
    with caplog.at_level(logging.WARNING, logger="underway.sandbox"):
        r = run_command("echo hi", profile=SandboxProfile(backend="none"))
    assert r.stdout == "hi\n"
    assert any("UNSANDBOXED" in rec.getMessage() for rec in caplog.records)


def test_a_tool_without_a_sandbox_fails_its_call_not_retryable(
    no_sandbox_binaries: Path,
) -> None:
    shell = shell_tool(name="sh", profile=SandboxProfile(backend="bwrap"))
    flow = uw.Flow("no_sandbox", state=Empty)

    @flow.step
    async def use(ctx: uw.RunContext[Empty, Any]) -> Any:
        try:
            await ctx.call(shell, {"command": f"touch {no_sandbox_binaries}"})
        except uw.ToolCallError as exc:
            return ctx.done({"error": exc.error_type, "retryable": exc.retryable,
                             "message": exc.message})
        return ctx.done({"error": None})

    engine, _ = memory_engine([flow], [shell])
    run_id, _ = engine.start(flow)
    state = asyncio.run(uw.Runner(engine).run_until_complete(run_id))
    assert state.result["error"] == "SandboxUnavailable"
    assert state.result["retryable"] is False
    assert "install bubblewrap" in state.result["message"]
    assert not no_sandbox_binaries.exists()
