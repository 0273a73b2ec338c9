"""What an MCP tool's annotations make of an underway tool: :func:`flags`.

The MCP annotations are hints a server gives about its own tools. They set the effect
flags of the underway tool unless the user says otherwise, and when a server says
nothing the tool is taken at its worst: it changes the world, cannot be undone, and its
output is untrusted. :mod:`underway.mcp` and the pydantic-ai integration (whose MCP
toolsets give a tool's annotations in its metadata) read MCP tools through this same
function. It lives here, beside the tools, so that the pydantic-ai integration reads it
without loading the MCP SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import ConfigurationError

FLAG_OPTIONS = frozenset({
    "read_only", "mutating", "idempotent", "irreversible", "trusted_output", "outbound",
})
"""The tool options :func:`flags` decides; an override of any of them wins over a hint."""

_HINTS = {
    "readOnlyHint": "read_only_hint", "destructiveHint": "destructive_hint",
    "idempotentHint": "idempotent_hint", "openWorldHint": "open_world_hint",
}


@dataclass(frozen=True)
class ToolFlags:
    """The effect flags of a tool (see :class:`underway.Tool` for each)."""

    mutating: bool
    idempotent: bool
    irreversible: bool
    trusted_output: bool
    outbound: bool

    def options(self) -> dict[str, Any]:
        """The flags as :class:`underway.Tool` keyword arguments."""
        return asdict(self)


def _hint(annotations: Any, camel: str) -> bool | None:
    """One hint of ``annotations``: an SDK ``ToolAnnotations``, a mapping spelt either way,
    or None."""
    if annotations is None:
        return None
    snake = _HINTS[camel]
    if isinstance(annotations, Mapping):
        value = annotations.get(camel, annotations.get(snake))
    else:
        value = getattr(annotations, snake, None)
    if value is not None and not isinstance(value, bool):
        raise ConfigurationError(f"MCP annotation {camel} must be true or false, not {value!r}")
    return value


def flags(annotations: Any = None, overrides: Mapping[str, Any] | None = None) -> ToolFlags:
    """The effect flags an MCP tool gets from its annotations and the user's overrides.

    Hints, as the MCP specification defines them and their defaults:

    - ``readOnlyHint`` true: read-only (not ``mutating``). Default: mutating.
    - ``destructiveHint`` (default true, for a tool that is not read-only): ``irreversible``.
    - ``idempotentHint`` true: ``idempotent``. A tool that says it is idempotent and says
      nothing of destruction is idempotent, not irreversible: running it again with the
      same arguments changes nothing more. A tool that says both is taken as irreversible
      and not idempotent (an underway tool cannot be both): a person settles a lost call.
    - ``openWorldHint`` (default true): read-only, it is ``outbound``. False: it works in a
      closed domain and is not outbound. Either way its output stays untrusted: trust is
      the user's to give (``trusted_output=True``), never a server's to claim.

    Args:
        annotations: The tool's ``annotations`` (the SDK's ``ToolAnnotations``, a mapping
            with camelCase or snake_case keys), or None.
        overrides: The user's options for this tool. Any of ``read_only``, ``mutating``,
            ``idempotent``, ``irreversible``, ``trusted_output`` and ``outbound`` given here
            wins over the hints; other keys are ignored.

    Raises:
        ConfigurationError: A hint is not a boolean, or the overrides contradict each
            other.
    """
    given = {k: v for k, v in (overrides or {}).items() if k in FLAG_OPTIONS}
    if "read_only" in given:
        read_only = bool(given.pop("read_only"))
        if "mutating" in given and given["mutating"] == read_only:
            raise ConfigurationError(
                f"read_only={read_only} contradicts mutating={given['mutating']}")
        given["mutating"] = not read_only
    mutating = given.get("mutating", _hint(annotations, "readOnlyHint") is not True)
    if not mutating:
        idempotent, irreversible = False, False
    else:
        destructive = _hint(annotations, "destructiveHint")
        idempotent = _hint(annotations, "idempotentHint") is True and destructive is not True
        irreversible = (destructive is not False) and not idempotent
    if "idempotent" in given and "irreversible" not in given:
        idempotent = bool(given["idempotent"])
        irreversible = irreversible and not idempotent
    elif "irreversible" in given and "idempotent" not in given:
        irreversible = bool(given["irreversible"])
        idempotent = idempotent and not irreversible
    else:
        idempotent = bool(given.get("idempotent", idempotent))
        irreversible = bool(given.get("irreversible", irreversible))
    if irreversible and not mutating:
        raise ConfigurationError("a tool set read-only cannot be irreversible")
    closed = _hint(annotations, "openWorldHint") is False
    trusted = bool(given.get("trusted_output", False))
    outbound = bool(given.get("outbound", not closed and not mutating))
    return ToolFlags(mutating=bool(mutating), idempotent=idempotent, irreversible=irreversible,
                     trusted_output=trusted, outbound=outbound)
