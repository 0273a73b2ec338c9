"""Public callables document their parameters. Every function, method and ``__init__``
reachable through a public module's ``__all__`` that takes more than two parameters has
a Google-style ``Args:`` section naming each of them, so IDEs and rendered docs show
them. ``self`` and ``cls`` do not count; ``*args`` and ``**kwargs`` need not be named.
An ``__init__`` may be documented in its class's docstring."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from test_public_surface import public_modules

import underway
from underway.knowledge.base import KnowledgeBase
from underway.store import Store

PACKAGE = Path(underway.__file__).resolve().parent

# Empty now: every public module is checked. A module that a change in flight is editing
# may be listed here for a while, to be skipped until it lands; paths are below
# src/underway, and one ending in "/" covers a whole package.
PENDING: tuple[str, ...] = ()

BACKENDS: dict[str, type] = {
    **{f"store/{d}/": Store for d in ("memory", "sqlite", "postgres", "regional", "_sqlbase")},
    **{f"knowledge/{d}.py": KnowledgeBase for d in ("memory", "sqlite", "postgres")},
}
"""Backends by path, each with the protocol that documents its methods."""

_ENTRY = re.compile(r"(\*{0,2}\w+)(?: \([^)]*\))?:(?:\s|$)")


@dataclass(frozen=True)
class Public:
    """One public callable: where it is defined (below the package; None outside it), its
    named parameters (``self``/``cls``, ``*args`` and ``**kwargs`` left out) and the
    docstrings that may document them."""

    where: str | None
    params: list[str]
    docs: list[str]
    variadic: tuple[str, ...] = ()
    """The names of its ``*args`` and ``**kwargs``, which may be named or not."""


def _methods(cls: type) -> Iterator[tuple[Callable[..., Any], bool]]:
    """The public methods and ``__init__`` of ``cls``, inherited ones too, each with
    whether it takes ``self`` or ``cls`` first."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, raw in vars(klass).items():
            if name in seen or (name.startswith("_") and name != "__init__"):
                continue
            seen.add(name)
            fn = raw.__func__ if isinstance(raw, staticmethod | classmethod) else raw
            if inspect.isfunction(fn):
                yield fn, not isinstance(raw, staticmethod)


def describe(fn: Callable[..., Any], *, bound: bool, owner: type | None = None) -> Public:
    """``fn`` as a public callable. ``bound``: it takes ``self`` or ``cls`` first."""
    path = Path(fn.__code__.co_filename).resolve()
    every = inspect.signature(fn).parameters.values()
    variadic = tuple(p.name for p in every if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    params = [p.name for p in every if p.name not in variadic]
    docs = [fn.__doc__ or ""]
    if owner is not None and fn.__name__ == "__init__":
        definer = next(k for k in owner.__mro__ if vars(k).get("__init__") is fn)
        docs.append(definer.__doc__ or "")
    where = path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else None
    protocol = next((p for path, p in BACKENDS.items()
                     if where is not None and where.startswith(path)), None)
    if owner is not None and protocol is not None:
        # A backend's method is documented where its protocol declares it.
        declared = getattr(protocol, fn.__name__, None)
        if declared is not None:
            docs.append(declared.__doc__ or "")
    return Public(where, params[1:] if bound else params, docs, variadic)


def public_callables() -> dict[str, Public]:
    """Every public callable the package defines in source, by qualified name. Code made
    at run time (a dataclass's ``__init__``) and code of other packages are left out."""
    found: dict[str, Public] = {}
    for module in public_modules().values():
        for attr in module.__all__:
            value = getattr(module, attr)
            if inspect.isfunction(value):
                pairs = [(value, False, None)]
            elif inspect.isclass(value):
                pairs = [(fn, bound, value) for fn, bound in _methods(value)]
            else:
                continue
            for fn, bound, owner in pairs:
                name = f"{fn.__module__}.{fn.__qualname__}"
                c = describe(fn, bound=bound, owner=owner)
                if c.where is not None:
                    found.setdefault(name, c)
    return found


def documented(doc: str) -> set[str]:
    """The names a docstring's ``Args:`` sections give entries for."""
    names: set[str] = set()
    lines = inspect.cleandoc(doc).splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "Args:":
            continue
        indent = len(line) - len(line.lstrip())
        for entry in lines[i + 1:]:
            depth = len(entry) - len(entry.lstrip())
            if entry.strip() and depth <= indent:
                break  # the next section, or the text after the section
            m = _ENTRY.match(entry.strip()) if depth == indent + 4 else None
            if m:
                names.add(m.group(1).lstrip("*"))
    return names


def _under(where: str | None, entry: str) -> bool:
    """Whether the file ``where`` is the PENDING ``entry``, or in it."""
    if where is None:
        return False
    return where == entry or (entry.endswith("/") and where.startswith(entry))


def _pending(where: str | None) -> bool:
    return any(_under(where, entry) for entry in PENDING)


def undocumented(callables: dict[str, Public]) -> dict[str, list[str]]:
    """Each callable of more than two parameters whose docstrings do not name every one
    of them in an ``Args:`` section, with the names left out."""
    out = {}
    for name, c in callables.items():
        if len(c.params) > 2:
            named = set().union(*map(documented, c.docs))
            missing = [p for p in c.params if p not in named]
            if missing:
                out[name] = missing
    return out


def test_public_callables_name_their_parameters_in_args() -> None:
    checked = {n: c for n, c in public_callables().items() if not _pending(c.where)}
    assert len(checked) > 500, "the walk over the public surface found too little"
    assert undocumented(checked) == {}, (
        "add an Args: section naming each parameter (Google style), one short line each")


def test_args_sections_name_no_parameter_that_is_gone() -> None:
    """A renamed or removed parameter does not linger in its callable's Args: section."""
    stale = {}
    for name, c in public_callables().items():
        if not _pending(c.where) and len(c.params) > 2:
            extra = set().union(*map(documented, c.docs)) - {*c.params, *c.variadic}
            if extra:
                stale[name] = sorted(extra)
    assert stale == {}


def test_every_pending_path_exists() -> None:
    """PENDING names no file that moved or went: a stale entry would skip nothing."""
    assert [entry for entry in PENDING if not (PACKAGE / entry).exists()] == []


def test_a_missing_parameter_is_caught() -> None:
    """The check above can fail: a parameter the Args: section leaves out is reported,
    ``self`` and ``*args``/``**kwargs`` are not asked for, and an ``__init__`` may be
    documented in its class's docstring."""

    def fn(a: int, b: int, c: int, *rest: int, **more: int) -> None:
        """Sum.

        Args:
            a: The first.
            b (int): The second.
                c: Not an entry: a continuation line.
        """

    class Widget:
        """A widget.

        Args:
            x: X.
            y: Y.
            z: Z.
        """

        def __init__(self, x: int, y: int, z: int) -> None:
            self.x, self.y, self.z = x, y, z

    here = {"fn": describe(fn, bound=False),
            "Widget.__init__": describe(Widget.__init__, bound=True, owner=Widget)}
    assert here["Widget.__init__"].params == ["x", "y", "z"]
    assert undocumented(here) == {"fn": ["c"]}
