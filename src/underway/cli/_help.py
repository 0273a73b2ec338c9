"""Help text as it was written. Typer reads command and option help as rich markup, so
a ``[bracketed]`` word vanished and a docstring's RST ````literal```` showed its
backticks. :func:`plain_help` turns a command tree's help into plain text once, as each
command is loaded."""

from __future__ import annotations

import re

from rich.markup import escape
from typer._click.core import Command

_LITERAL = re.compile(r"``([^`]+)``")
_ITEM = re.compile(r"\s*([-*]|\d+\.)\s")


def plain(text: str) -> str:
    """``text`` as rich shows it literally: RST ````literals```` in single backticks,
    brackets escaped, and each paragraph's lines joined (rich keeps a docstring's line
    breaks, so a wrapped sentence broke at random places). A list item keeps its line.

    Args:
        text: Help text as written.
    """
    paragraphs = []
    for para in re.split(r"\n\s*\n", text):
        lines: list[str] = []
        for line in para.splitlines():
            if lines and not _ITEM.match(line):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.strip())
        paragraphs.append("\n".join(lines))
    return escape(_LITERAL.sub(r"`\1`", "\n\n".join(paragraphs)))


def plain_help(command: Command) -> Command:
    """Make ``command``, its parameters and its subcommands show their help as written
    (:func:`plain`); returns ``command``.

    Args:
        command: A command or group, changed in place.
    """
    if getattr(command, "_plain", False):
        return command  # a command object made once and asked for again
    command._plain = True  # type: ignore[attr-defined]
    if command.help:
        command.help = plain(command.help)
    if command.short_help:
        command.short_help = plain(command.short_help)
    for param in command.params:
        text = getattr(param, "help", None)
        if text:
            param.help = plain(text)  # type: ignore[attr-defined]
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    return command
