"""Install and environment promises are true on a base install.

Each test runs the real ``underway`` command in a fresh interpreter. The packages of every
extra (the service, metrics, queues, model SDKs, OpenTelemetry's SDK) are made impossible
to import there: a finder on ``sys.meta_path`` refuses them, as on a machine where only
``pip install underway`` ran. The checks:

- ``underway --help`` lists every command and imports none of their modules;
- a command that needs an extra says which one and exits 2, never a traceback;
- ``worker --metrics-port`` without prometheus-client says how to get it;
- what ``--help`` lists for a command is how that command's own help begins."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer

from underway.cli import LAZY, SUMMARY, app

EXTRAS = ("fastapi", "uvicorn", "starlette", "jinja2", "prometheus_client", "multipart",
          "python_multipart", "nats", "aio_pika", "openai", "anthropic", "yaml",
          "opentelemetry.sdk", "opentelemetry.exporter")

BASE_INSTALL = textwrap.dedent(f"""
    import importlib.abc, sys
    BLOCKED = {EXTRAS!r}

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    sys.argv = ["underway", *sys.argv[1:]]
    from underway.cli import main
    try:
        main()
    finally:
        loaded = sorted(m for m in sys.modules if m.startswith("underway.cli."))
        print("LOADED " + " ".join(loaded), file=sys.stderr)
""")


def base_install(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_")}
    return subprocess.run([sys.executable, "-c", BASE_INSTALL, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def loaded(done: subprocess.CompletedProcess[str]) -> list[str]:
    line = next(x for x in done.stderr.splitlines() if x.startswith("LOADED"))
    return line.split()[1:]


@pytest.mark.parametrize("args", [("--help",), ("-h",), ()])
def test_help_lists_every_command_and_loads_none(args: tuple[str, ...],
                                                 tmp_path: Path) -> None:
    done = base_install(*args, cwd=tmp_path)
    assert done.returncode in (0, 2) and "Traceback" not in done.stderr, done.stderr
    assert "Usage: underway" in done.stdout, done.stdout + done.stderr
    for name in LAZY:
        assert f" {name} " in done.stdout, name
    # `underway` alone shows the same help (no_args_is_help); nothing more was imported
    # than the options and the help text's own escaping.
    assert [m for m in loaded(done)
            if m not in ("underway.cli._common", "underway.cli._help")] == []


def test_a_command_that_needs_the_service_extra_names_it(tmp_path: Path) -> None:
    for args in (("serve", "--help"), ("serve",)):
        done = base_install(*args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        assert "needs the service extra" in done.stderr and "underway[service]" in done.stderr


def test_worker_metrics_without_prometheus_client_say_how_to_get_it(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'u.db'}"
    done = base_install("worker", "--app", "no_such_app:app", "--db", db,
                        "--metrics-port", "0", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr
    assert "needs the prometheus extra" in done.stderr
    assert "pip install 'underway[prometheus]'" in done.stderr


def test_a_base_install_runs_a_command_that_needs_no_extra(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'u.db'}"
    for args in (("db", "migrate", "--db", db), ("runs", "ls", "--db", db)):
        done = base_install(*args, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert "underway.cli.runs" in loaded(done) and "underway.cli.serve" not in loaded(done)


def test_each_listed_summary_is_how_its_command_begins() -> None:
    assert set(SUMMARY) == set(LAZY)
    root = typer.main.get_command(app)
    ctx = typer.Context(root)
    for name in LAZY:
        command = root.get_command(ctx, name)
        assert command is not None
        real = " ".join((command.short_help or command.help or "").split())
        assert real.startswith(SUMMARY[name].removesuffix(".")), (name, real[:120])
