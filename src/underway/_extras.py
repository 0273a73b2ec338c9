"""Optional packages: which extra installs each, and the one way to import them.

Every import of an optional package goes through :func:`import_extra` or
:func:`needs_extra`, so a missing one is always told the same way: a
:class:`~underway.errors.MissingExtra` naming the extra to install::

    openai = import_extra("openai", what="OpenAIChat")

    with needs_extra("service", "underway.service"):
        from ._app import create_app
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from .errors import MissingExtra

EXTRAS: dict[str, str] = {
    "fastapi": "service",
    "starlette": "service",
    "uvicorn": "service",
    "jinja2": "service",
    "python_multipart": "service",
    "multipart": "service",
    "prometheus_client": "prometheus",
    "opentelemetry.sdk": "otel",
    "opentelemetry.exporter.otlp.proto.http": "otel",
    "psycopg_binary": "postgres",
    "openai": "openai",
    "anthropic": "anthropic",
    "pydantic_ai": "pydantic-ai",
    "agents": "openai-agents",
    "mcp": "mcp",
    "yaml": "yaml",
    "nats": "nats",
    "aio_pika": "rabbitmq",
}
"""The extra (of pyproject.toml) that installs each optional module, by module name; a
dotted name covers its submodules. ``prometheus_client`` is in ``service`` too, which
names it for the app's ``/metrics``."""


def extra_of(module: str) -> str | None:
    """The extra that installs ``module`` (by its longest listed prefix), or None."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        found = EXTRAS.get(".".join(parts[:end]))
        if found is not None:
            return found
    return None


def import_extra(module: str, *, what: str, extra: str | None = None) -> ModuleType:
    """Import ``module``, or raise :class:`~underway.errors.MissingExtra`.

    Args:
        module: The module to import.
        what: What needs it, for the error (``OpenAIChat``, ``underway serve``).
        extra: The extra to name; None looks it up in :data:`EXTRAS`.
    """
    named = extra or extra_of(module)
    if named is None:
        raise ValueError(f"no extra installs {module!r}: add it to underway._extras.EXTRAS")
    with needs_extra(named, what):
        return importlib.import_module(module)


@contextmanager
def needs_extra(extra: str, what: str) -> Iterator[None]:
    """Turn an import error raised inside into :class:`~underway.errors.MissingExtra`.
    It names the missing module's own extra (:data:`EXTRAS`), else ``extra``. An error
    of underway's own modules is left as it is: it is a bug, not a missing package.

    Args:
        extra: The extra that installs what the block imports.
        what: What needs it, for the error.
    """
    try:
        yield
    except MissingExtra:
        raise
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "underway":
            raise
        # An import error with no module name comes from a package that is there but
        # cannot load what it needs (psycopg without a libpq): its first line says why.
        lines = [] if exc.name else str(exc).strip().splitlines()
        reason = lines[0].rstrip(".") if lines else None
        named = (extra_of(exc.name) if exc.name else None) or extra
        raise MissingExtra(what, extra=named, module=exc.name, reason=reason) from exc
