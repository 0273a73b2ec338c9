"""Taint: which content nobody vouches for, and what it marks (``docs/agent.md``).

A context that has taken in untrusted content is *tainted* for the rest of the run. Its
taint is the list of sources that content came from (tool names, ``signal:<name>``,
``intake``), in order of arrival. Four rules follow:

- **What taints.** The results and errors of a tool whose output nobody vouches for
  (:func:`trusts_output`), the payload of a signal, and the input of a run whose lineage
  is tainted (:attr:`~underway.lineage.Lineage.tainted`). In a tainted context every
  observation is untrusted: errors and echoes carry the taint of their inputs
  (:func:`observation_trusted`).
- **What is labelled.** A tainted context's calls of a tool that changes something, sends
  a message or sends its arguments out (:func:`exposed`; not a tool declared
  ``untrusted_ok``) carry :data:`UNTRUSTED` and ``source:<source>`` (:func:`taint_labels`),
  as does a finish shaped by untrusted content.
- **What holds.** Nothing, by the context alone: each argument of a labelled call is then
  traced to its sources (:mod:`underway.guard.provenance`), and the default policy holds
  what provenance flags. The stricter rule
  :data:`~underway.guard.policy.UNTRUSTED_INPUT` holds every call labelled :data:`UNTRUSTED`.
- **What a result carries.** A run's result names what its lineage brought in, then what
  its context took in, then what the child outcomes it received carried (:func:`tainted_by`,
  journaled as ``RunCompleted.tainted_by``): taint flows down to the runs a run starts,
  and up with their results. A run it starts inherits all of it through its
  :class:`~underway.lineage.Lineage`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

from pydantic import BaseModel

from ..effects import Tool
from ..journal.state import REFUSAL_ERRORS
from ..lineage import Lineage

__all__ = [
    "UNTRUSTED",
    "Tracked",
    "add_source",
    "door_refused",
    "exposed",
    "observation_trusted",
    "output_taints",
    "taint_labels",
    "tainted_by",
    "trusts_output",
    "untrusted_outputs",
]

UNTRUSTED = "untrusted"
"""The label of content from a source nobody vouches for, and of calls proposed after it."""


class Tracked(Protocol):
    """What taint reads of a flow (:class:`~underway.flow.Flow`): where the untrusted
    content of a run's context came from, read from its state."""

    @property
    def taint_of(self) -> Callable[[Any], Iterable[str]] | None: ...


def untrusted_outputs(tools: Iterable[Tool], named: Iterable[str] = ()) -> frozenset[str]:
    """The tools whose output is untrusted whatever they declare: those ``named`` and those
    whose ``output_labels`` hold :data:`UNTRUSTED`."""
    return frozenset(named) | {t.name for t in tools if UNTRUSTED in t.output_labels}


def trusts_output(tool: Tool, untrusted: Collection[str] = ()) -> bool:
    """Whether ``tool``'s results and errors leave a clean context clean: it declares
    ``trusted_output`` and is not among ``untrusted``."""
    return tool.trusted_output and tool.name not in untrusted


_NOT_RUN = frozenset({*REFUSAL_ERRORS.values(), "SchemaValidationFailed"})
"""The errors of a call the door refused before its tool ran: they carry nothing a tool
said."""


def door_refused(error_type: str | None) -> bool:
    """Whether an error of ``error_type`` is the door's refusal of a call: its tool never
    ran, so the error carries nothing the tool said."""
    return error_type in _NOT_RUN


def output_taints(tool: Tool, error_type: str | None = None) -> bool:
    """Whether what a call of ``tool`` gave back (its result, or an error of
    ``error_type``) brings untrusted content into the context: the tool ran (the door did
    not refuse the call) and nobody vouches for its output (:func:`trusts_output`)."""
    return not door_refused(error_type) and not trusts_output(tool)


def observation_trusted(taint: Collection[str], output_trusted: bool) -> bool:
    """Whether what a call gave back is trusted in a context holding ``taint``
    (``output_trusted``: whether its tool's output is, :func:`trusts_output`). Only a clean
    context's observations can be: a call proposed from a tainted one passes its taint to
    its errors and echoes."""
    return not taint and output_trusted


def exposed(tool: Tool) -> bool:
    """Whether a call of ``tool`` from a tainted context carries the :data:`UNTRUSTED`
    label: it changes something, sends a message or sends its arguments out, and the
    tool is not declared ``untrusted_ok``."""
    return not tool.untrusted_ok and (tool.mutating or tool.message or tool.outbound)


def taint_labels(taint: Collection[str]) -> list[str]:
    """The labels of what a context holding ``taint`` proposes: :data:`UNTRUSTED` and
    ``source:<source>`` for each source; none from a clean context."""
    return [UNTRUSTED, *(f"source:{source}" for source in taint)] if taint else []


def add_source(taint: list[str], source: str) -> None:
    """Add ``source`` to a context's ``taint``, once, in order of arrival."""
    if source not in taint:
        taint.append(source)


def tainted_by(lineage: Lineage, flow: Tracked, state: BaseModel,
               received: Iterable[str] = ()) -> list[str]:
    """Where the untrusted content that shaped a run's result came from, in order.

    Args:
        lineage: The run's lineage; what it brought in comes first.
        flow: The run's flow; it reads the sources its context took in from ``state``.
        state: The run's state.
        received: Where the untrusted content of the child outcomes the run received came
            from (:attr:`~underway.flow.RunContext.child_taint`).
    """
    found: list[str] = list(lineage.sources)
    if flow.taint_of is not None:
        found += [str(source) for source in flow.taint_of(state)]
    found += received
    return list(dict.fromkeys(found))
