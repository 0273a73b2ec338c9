"""Each ``underway`` command loads what it needs and nothing else: ``underway serve``
(whose start-up a benchmark measures, ``bench/service.py``) loads neither the executor nor
another command's module, nor an HTTP client, the OpenTelemetry SDK, the sandbox or the
model adapters."""

from __future__ import annotations

import subprocess
import sys


def loaded_by(command: str) -> set[str]:
    """The modules loaded once the CLI has resolved ``command`` (as running it would)."""
    code = (
        "import sys, typer, underway.cli as cli\n"
        "root = typer.main.get_command(cli.app)\n"
        f"assert root.get_command(typer.Context(root), {command!r}) is not None\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return set(done.stdout.split())


def within(modules: set[str], *packages: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_serve_loads_no_executor_and_no_other_command() -> None:
    loaded = loaded_by("serve")
    assert "fastapi" in loaded and "underway.service" in loaded
    assert within(loaded, "underway.engine", "underway.worker", "underway.runner",
                  "underway.sandbox", "underway.agent._agent", "underway.models.openai_chat",
                  "underway.models.anthropic_messages", "underway.telemetry._tracing",
                  "opentelemetry.sdk", "httpx", "psycopg") == []
    others = {f"underway.cli.{m}" for m in ("runs", "worker", "approvals", "audit", "policy",
                                             "knowledge", "apikeys", "schedules", "usage")}
    assert loaded & others == set()


def test_a_command_other_than_serve_loads_no_web_framework() -> None:
    loaded = loaded_by("runs")
    assert "underway.cli.runs" in loaded
    assert within(loaded, "fastapi", "uvicorn", "starlette", "underway.service",
                  "underway.engine") == []
