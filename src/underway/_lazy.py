"""Lazy exports (PEP 562): names a package exports that load on first use.

A package keeps its import quick by naming, for each lazy export, the module that defines
it; the module is imported the first time the name is read, and the value is then kept in
the package's namespace so later reads cost nothing. The package imports the same names
under ``if TYPE_CHECKING:`` (type checkers see them; a misspelt name stays an error) and
installs the hooks in the ``else:`` branch::

    if TYPE_CHECKING:
        from .postgres import PostgresStore
    else:
        __getattr__, __dir__ = lazy_exports(__name__, {"PostgresStore": ".postgres"},
                                            globals())
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``: ``names`` maps each lazy
    name to the module (relative to ``package``) that defines it; ``namespace`` is the
    package's ``globals()``, where a name read once is kept. A submodule not imported yet
    is imported when read as an attribute (``underway.engine`` after ``import underway``),
    as it was when the package imported it eagerly."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module, package), name)
        elif not name.startswith("__"):
            try:
                value = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
