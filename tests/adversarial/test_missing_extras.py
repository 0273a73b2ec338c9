"""Every way into an optional package names the extra that installs it.

Each case runs in a fresh interpreter where a finder on ``sys.meta_path`` refuses the
package's modules, as on a machine where its extra was not installed. The library raises
:class:`~underway.errors.MissingExtra` saying ``pip install 'underway[<extra>]'``; the
command line prints the same in one line and exits 2. psycopg without any libpq (no C
build, no binary build, no system library it can load) names the ``postgres`` extra."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from underway._extras import EXTRAS, needs_extra
from underway.errors import ConfigurationError, MissingExtra

ROOT = Path(__file__).resolve().parents[2]

WITHOUT = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = sys.argv[1].split(",")

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
""")

LIBRARY = WITHOUT + textwrap.dedent("""
    from underway.errors import ConfigurationError, MissingExtra
    try:
        exec(sys.argv[2])
    except MissingExtra as exc:
        assert isinstance(exc, ConfigurationError) and isinstance(exc, ModuleNotFoundError)
        print(exc.extra)
        print(exc)
    else:
        print("no error")
""")

COMMAND = WITHOUT + textwrap.dedent("""
    sys.argv = ["underway", *sys.argv[2:]]
    from underway.cli import main
    main()
""")

NO_LIBPQ = "psycopg_c,psycopg_binary,psycopg.pq.pq_ctypes"
"""psycopg finds no libpq wrapper: neither build, nor the system library through ctypes."""

YAML_POLICY = ("import pathlib, tempfile\n"
               "p = pathlib.Path(tempfile.mkdtemp()) / 'p.yaml'\n"
               "p.write_text('version: v1')\n"
               "from underway.guard.policy import load_policy\n"
               "load_policy(p)\n")

LIBRARY_CASES = [
    ("fastapi", "import underway.service", "service"),
    ("uvicorn", "import underway.service", "service"),
    ("jinja2", "import underway.service", "service"),
    ("python_multipart,multipart", "import underway.service", "service"),
    ("prometheus_client", "import underway.service", "prometheus"),
    ("prometheus_client", "from underway.telemetry import PrometheusMetrics", "prometheus"),
    ("opentelemetry.sdk", "from underway.telemetry import Tracing", "otel"),
    ("opentelemetry.sdk",
     "from underway.telemetry import span_exporter\nspan_exporter('console')", "otel"),
    ("opentelemetry.exporter",
     "from underway.telemetry import span_exporter\nspan_exporter('otlp')", "otel"),
    ("openai", "from underway.models import OpenAIChat\nOpenAIChat('m', api_key='k')",
     "openai"),
    ("anthropic",
     "from underway.models import AnthropicMessages\nAnthropicMessages('m', api_key='k')",
     "anthropic"),
    ("yaml", YAML_POLICY, "yaml"),
    ("nats", "from underway.scheduling.intake_sources import NatsIntake", "nats"),
    ("aio_pika", "from underway.scheduling.intake_sources import RabbitMQIntake", "rabbitmq"),
    (NO_LIBPQ, "from underway.store import connect\nconnect('postgresql://127.0.0.1:1/x')",
     "postgres"),
]


def run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UNDERWAY_", "PSYCOPG"))}
    return subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("blocked", "code", "extra"), LIBRARY_CASES,
                         ids=[f"{c[2]}-{c[0].split(',')[0]}-{i}"
                              for i, c in enumerate(LIBRARY_CASES)])
def test_the_library_names_the_extra(blocked: str, code: str, extra: str,
                                     tmp_path: Path) -> None:
    done = run(LIBRARY, blocked, code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    named, message = done.stdout.strip().split("\n", 1)
    assert named == extra, message
    assert message.endswith(f"pip install 'underway[{extra}]'"), message


def test_psycopg_without_a_libpq_names_the_postgres_extra(tmp_path: Path) -> None:
    for code in ("import underway.store.postgres", LIBRARY_CASES[-1][1],
                 "from underway.store import PostgresStore"):
        done = run(LIBRARY, NO_LIBPQ, code, cwd=tmp_path)
        assert done.stdout.splitlines()[1:] == [
            "the PostgreSQL store needs the postgres extra (no pq wrapper available): "
            "pip install 'underway[postgres]'"], done.stdout + done.stderr


@pytest.mark.parametrize(("blocked", "args", "extra"), [
    ("fastapi", ["serve", "--help"], "service"),
    ("prometheus_client", ["worker", "--app", "no_such_app:app", "--db", "sqlite:///u.db",
                           "--metrics-port", "0"], "prometheus"),
    ("opentelemetry.sdk", ["worker", "--app", "one_flow:app", "--db", "sqlite:///u.db",
                           "--traces"], "otel"),
    ("nats", ["intake", "nats", "--stream", "S", "--subject", "x", "--routes", "x:y",
              "--db", "memory://"], "nats"),
    ("yaml", ["policy", "check", "p.yaml"], "yaml"),
    (NO_LIBPQ, ["runs", "ls", "--db", "postgresql://127.0.0.1:1/x"], "postgres"),
])
def test_the_command_line_names_the_extra(blocked: str, args: list[str], extra: str,
                                          tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("version: v1\n")
    (tmp_path / "one_flow.py").write_text(
        "import pydantic, underway as uw\n"
        "class S(pydantic.BaseModel):\n    pass\n"
        "app = uw.Flow('noop', state=S)\n")
    done = run(COMMAND, blocked, *args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    # A usage error may come in a box, wrapped: read its words.
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", done.stderr).split())
    assert f"needs the {extra} extra" in said, said
    assert f"pip install 'underway[{extra}]'" in said, said


def test_every_extra_named_is_declared_and_in_dev() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    extras = set(declared) - {"dev", "metrics"}
    assert set(EXTRAS.values()) == extras
    assert declared["metrics"] == ["underway[prometheus]"]
    # dev is made of the extras themselves, so its list cannot drift from theirs
    (composed,) = [r for r in declared["dev"] if r.startswith("underway[")]
    assert set(composed.removeprefix("underway[").removesuffix("]").split(",")) == extras


def test_an_import_error_of_underway_itself_is_not_taken_for_a_missing_extra() -> None:
    with pytest.raises(ImportError) as raised, needs_extra("service", "underway.service"):
        raise ImportError("cannot import name 'x'", name="underway.service._app")
    assert not isinstance(raised.value, MissingExtra)
    with pytest.raises(MissingExtra) as named, needs_extra("service", "underway.service"):
        raise ModuleNotFoundError("No module named 'h11'", name="h11")
    assert isinstance(named.value, ConfigurationError) and named.value.name == "h11"
    assert str(named.value) == ("underway.service needs the service extra (h11 is missing): "
                                "pip install 'underway[service]'")
