"""Resolving ``module:attribute`` names given on the command line (``--app``, ``--routes``),
and :func:`load_app`, the flows and tools an ``--app`` names (without loading the executor:
``underway serve --app`` needs the flows' code, not the engine)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import agent as agents
from .effects import Tool
from .errors import ConfigurationError
from .flow import Flow

__all__ = ["App", "call_factory", "import_object", "load_app", "put_on_path"]

App = tuple[list[Flow[Any, Any]], list[Tool]]
"""The flows and tools a worker runs."""


def import_object(spec: str, *, option: str, example: str) -> Any:
    """The object ``spec`` names.

    Args:
        spec: ``module:attribute``; dots in the attribute reach into objects
            (``pkg.mod:registry.flows``).
        option: The option that named it, for the errors.
        example: A good ``spec``, for the error when it is malformed.

    Raises:
        ConfigurationError: ``spec`` is malformed or names nothing. It names ``option`` and
            says what is wrong.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{option} {spec!r} must be module:attribute, e.g. {example}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise ConfigurationError(
                f"{option} {spec!r}: no module named {exc.name!r} (is it on the Python path? "
                "run the command from the directory that holds it)"
            ) from None
        raise ConfigurationError(
            f"{option} {spec!r}: importing {module_name} failed: {exc}"
        ) from exc
    parts = attr.split(".")
    for i, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = f"{module_name}:{'.'.join(parts[:i])}" if i else module_name
            raise ConfigurationError(
                f"{option} {spec!r}: {where} has no attribute {part!r}"
            ) from None
    return obj


def call_factory(obj: Any, *, option: str, spec: str) -> Any:
    """``obj()``, with a failure reported against the option that named it.

    Args:
        obj: The factory.
        option: The option that named it.
        spec: What the option said.

    Raises:
        ConfigurationError: The call failed.
    """
    try:
        return obj()
    except Exception as exc:
        name = getattr(obj, "__name__", type(obj).__name__)
        raise ConfigurationError(
            f"{option} {spec!r}: calling {name}() failed: {type(exc).__name__}: {exc}"
        ) from exc


def load_app(spec: str, *, search: Sequence[str | os.PathLike[str]] = ()) -> App:
    """Resolve ``module:attribute`` to the flows and tools a worker runs.

    The attribute (dots reach into objects: ``pkg.mod:registry.flows``) may be a
    :class:`Flow`, :class:`~underway.agent.Agent` or :class:`~underway.agent.PlanAndExtract`,
    a list or tuple of Flows, Agents and Tools, or a callable taking no arguments that
    returns one of those. The module is imported as Python would import it, so it must
    be on ``sys.path``. Every command that takes ``--app`` passes the current directory
    and its config file's folder as ``search``, so they all find the same code.

    Args:
        spec: ``module:attribute``.
        search: Folders to put first on ``sys.path`` before importing, in this order
            (none: ``sys.path`` as it is).
    """
    put_on_path(search)
    obj = import_object(spec, option="--app", example="myapp.flows:flows")
    if callable(obj) and not isinstance(obj, Flow | Tool | type):
        obj = call_factory(obj, option="--app", spec=spec)
    items = [obj] if isinstance(obj, Flow | agents.Agent | agents.PlanAndExtract) else obj
    if not isinstance(items, list | tuple):
        raise ConfigurationError(
            f"--app {spec!r} is a {type(obj).__name__}; it must be a Flow, a list of Flows "
            "and Tools, or a function returning one"
        )
    flows: list[Flow[Any, Any]] = []
    tools: list[Tool] = []
    for i, item in enumerate(items):
        if isinstance(item, Flow):
            flows.append(item)
        elif isinstance(item, agents.Agent | agents.PlanAndExtract):
            flows.append(item.flow)
        elif isinstance(item, Tool):
            tools.append(item)
        else:
            raise ConfigurationError(
                f"--app {spec!r}: item {i} is a {type(item).__name__}, not a Flow or Tool"
            )
    if not flows:
        raise ConfigurationError(f"--app {spec!r} names no Flow: a worker needs at least one")
    return flows, tools


def put_on_path(folders: Sequence[str | os.PathLike[str]]) -> None:
    """Put ``folders`` first on ``sys.path``, the first of them first (one already there
    stays where it is).

    Args:
        folders: The folders.
    """
    for folder in reversed([os.fspath(f) for f in folders]):
        if folder not in sys.path:
            sys.path.insert(0, folder)
