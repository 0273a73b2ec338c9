"""Every command of the ``underway`` command line, each lazily loaded one loaded: what a
test that must hold for every command walks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from underway.cli import app

_ROOT = typer.main.get_command(app)
_Ctx = type(_ROOT.make_context("underway", ["--help"], resilient_parsing=True))


def _commands() -> Iterator[tuple[list[str], Any]]:
    """(path, command) for every command and group."""
    def walk(command: Any, path: list[str], ctx: Any) -> Iterator[tuple[list[str], Any]]:
        yield path, command
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                yield from walk(sub, [*path, name], _Ctx(sub, parent=ctx, info_name=name))
    yield from walk(_ROOT, [], _Ctx(_ROOT, info_name="underway"))


COMMANDS: dict[str, Any] = {" ".join(path): command for path, command in _commands()}
"""Each command once, by its words after ``underway`` ('' is the root)."""


def with_option(name: str) -> set[str]:
    """The commands that take option ``name``.

    Args:
        name: The option, e.g. ``--app``.
    """
    return {path for path, c in COMMANDS.items()
            if any(name in getattr(o, "opts", []) for o in c.params)}
