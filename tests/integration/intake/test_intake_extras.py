"""Without its extra, ``underway intake nats`` (or ``rabbitmq``) says which to install;
``underway intake maildir`` needs none, and the other commands load neither client."""

from __future__ import annotations

import subprocess
import sys

import pytest

RUN_WITHOUT = (
    "import sys\n"
    "sys.modules[{module!r}] = None  # as if the extra were not installed\n"
    "sys.argv = {argv!r}\n"
    "from underway.cli import main\n"
    "main()\n"
)


@pytest.mark.parametrize(("command", "module", "options"), [
    ("nats", "nats", ["--stream", "S", "--subject", "x"]),
    ("rabbitmq", "aio_pika", ["--queue", "q"]),
])
def test_a_missing_extra_is_named(command: str, module: str, options: list[str]) -> None:
    argv = ["underway", "intake", command, *options, "--routes", "x:y", "--db", "memory://"]
    done = subprocess.run([sys.executable, "-c", RUN_WITHOUT.format(module=module, argv=argv)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert (f"`underway intake {command}` needs the {command} extra ({module} is missing): "
            f"pip install 'underway[{command}]'") in done.stderr


def test_the_maildir_command_loads_no_broker_client() -> None:
    code = ("import sys, typer, underway.cli as cli\n"
            "root = typer.main.get_command(cli.app)\n"
            "assert root.get_command(typer.Context(root), 'intake') is not None\n"
            "print(' '.join(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    loaded = set(done.stdout.split())
    assert "underway.scheduling.intake_sources" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("nats", "aio_pika", "aiormq")}
