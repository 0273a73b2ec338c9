"""Resolving ``module:attribute`` names given on the command line (``--app``, ``--routes``)."""

from __future__ import annotations

import importlib
from typing import Any

from .errors import ConfigurationError


def import_object(spec: str, *, option: str, example: str) -> Any:
    """The object ``spec`` names: ``module:attribute``, where dots in the attribute reach
    into objects (``pkg.mod:registry.flows``). Errors name ``option`` and say what is wrong."""
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
    """``obj()``, with a failure reported against the option that named it."""
    try:
        return obj()
    except Exception as exc:
        name = getattr(obj, "__name__", type(obj).__name__)
        raise ConfigurationError(
            f"{option} {spec!r}: calling {name}() failed: {type(exc).__name__}: {exc}"
        ) from exc
