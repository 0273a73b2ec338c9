"""Every command's ``--help`` shows its help as written: no ``[bracketed]`` word lost to
rich markup, no RST ````double backticks```` shown literally. And every command's
``--tenant`` behaves alike: none requires it."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer.rich_utils
from typer.testing import CliRunner

from fakes.cli_commands import COMMANDS, with_option
from underway.cli import app


def _source_words(command: Any) -> set[str]:
    """The bracketed and angle-bracketed words the command's sources wrote in its help."""
    fn = getattr(command, "callback", None)
    texts = [getattr(fn, "__doc__", None) or ""]
    texts += [getattr(p, "help", None) or "" for p in command.params]
    found = set()
    for text in texts:
        found |= set(re.findall(r"\[[a-z?][^\]\s]*\]", text.replace("\\[", "[")))
    return found


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide enough that rich never cuts a long word (a URL) short with an ellipsis: what
    is tested is the markup, not the terminal's width."""
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 200)


def _shown(args: list[str]) -> str:
    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    # Box borders and wrapping aside, the words as a reader sees them.
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())


def test_the_walk_reaches_every_command() -> None:
    assert {"runs resolve", "apikeys new", "access-log", "policy explain",
            "intake rabbitmq", "hold add"} <= set(COMMANDS)
    assert len(COMMANDS) > 60


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_help_shows_what_was_written(path: str) -> None:
    args = path.split()
    shown = _shown(args)
    assert "``" not in shown, f"underway {path} --help shows RST backticks"
    for word in _source_words(COMMANDS[path]):
        assert word in shown, f"underway {path} --help lost {word!r}: {shown}"


def test_the_words_that_vanished_before_are_shown() -> None:
    assert "([approvals] signed_resolutions in the deployment's config" in _shown(
        ["runs", "resolve"])
    assert "(`--outcome resume`)" in _shown(["approvals", "resolve"])
    assert "[redacted]" in _shown(["replay"])
    assert "[purged]" in _shown(["runs", "events"])


@pytest.mark.parametrize("path", sorted(with_option("--tenant")))
def test_no_command_requires_a_tenant(path: str) -> None:
    """One tenant is the default tenant everywhere; a filter's absence means every
    tenant. None makes the user name one."""
    option = next(o for o in COMMANDS[path].params if "--tenant" in getattr(o, "opts", []))
    assert not option.required
    assert option.default in ("default", None) or option.multiple
