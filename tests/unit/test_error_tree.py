"""One exception tree: every public exception of the package derives from
:class:`~underway.errors.UnderwayError` (or is a ``BaseException`` signal), and the
docstring of :mod:`underway.errors` draws each one under one of its own bases."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import underway
from underway import errors
from underway.errors import UnderwayError

_NAME = re.compile(r"── (\w+)")


def public_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class a public module holds under a public name (the CLI is a
    command, not an API). A module that needs an extra not installed is skipped."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(underway.__path__, "underway."):
        parts = info.name.split(".")[1:]
        if any(p.startswith("_") for p in parts) or parts[0] == "cli":
            continue
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] == "underway":
                raise
            continue
        for name, value in vars(module).items():
            if (
                not name.startswith("_") and inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.split(".")[0] == "underway"
            ):
                assert found.setdefault(value.__name__, value) is value, (
                    f"two public exceptions are named {value.__name__}")
    return found


def drawn_tree() -> dict[str, str]:
    """Each class the docstring draws, with the class drawn above it."""
    doc = errors.__doc__ or ""
    parents: dict[str, str] = {}
    path: list[str] = []
    for line in doc.splitlines():
        match = _NAME.search(line)
        root = line.strip()
        if match is None:
            if root in ("UnderwayError", "BaseException"):
                path = [root]
            continue
        depth = (match.start(1) - 4) // 4
        del path[depth:]
        assert len(path) == depth, f"the tree skips a level at {line!r}"
        name = match.group(1)
        assert name not in parents, f"{name} is drawn twice"
        parents[name] = path[-1]
        path.append(name)
    return parents


def test_every_public_exception_derives_from_underway_error() -> None:
    found = public_exceptions()
    assert len(found) > 40
    strays = sorted(
        name for name, cls in found.items()
        if issubclass(cls, Exception) and not issubclass(cls, UnderwayError)
    )
    assert strays == []


def test_the_docstring_draws_every_public_exception_under_a_base() -> None:
    found = public_exceptions()
    drawn = drawn_tree()
    assert sorted(set(found) - set(drawn) - {"UnderwayError"}) == []
    assert sorted(set(drawn) - set(found)) == []
    for name, parent in drawn.items():
        cls = found[name]
        bases = {base.__name__ for base in cls.__bases__}
        assert parent in bases, f"{name} is drawn under {parent}, its bases are {bases}"


@pytest.mark.parametrize("name", ["RunCancelledSignal", "HookFailed", "Diverged"])
def test_signals_stay_outside_exception(name: str) -> None:
    cls = public_exceptions()[name]
    assert not issubclass(cls, Exception)
    assert drawn_tree()[name] == "BaseException"
