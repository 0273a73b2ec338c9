"""Provenance per value for agents of other frameworks (pydantic-ai, the Agents SDK).

The framework keeps its model's conversation; underway sees each model request and each
tool call. :class:`Provenance` follows what trusted sources put in the model's context
(:class:`~underway.guard.provenance.Corpus`) and what untrusted ones did (blocks named by
their source), so each call the model proposes from a tainted context is traced per
argument (:func:`~underway.guard.provenance.assess`).

Trusted: the run's prompt or input (unless its lineage is tainted), the agent's
instructions and system prompts, a person's answers, and what a trusted tool gave back for
trusted arguments. Untrusted: what any other tool gave back, named by the tool, or by the
sources of its untrusted arguments when the tool itself is trusted (it is then never named
a source). A value enters the corpus only once the model was sent it (:meth:`seen`).

Nothing here is kept between steps: the step runs the framework's agent again on every
re-run, each call answers from the journal, and the same values come back in the same
order. The corpus is derived from journaled data alone.

These frameworks have no trusted plan turn. The tools a call may use without being
``unrequested`` are the ones the developer declares the agent writes with (``writes=``, a
constant of the flow); with none declared, every exposed call from a tainted context is
``unrequested``, and the default policy holds it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..effects import Tool
from ..errors import ConfigurationError
from ..events import JSON
from ..guard.provenance import Assessment, Corpus, assess, split_fields
from ..guard.taint import add_source, output_taints

__all__ = ["Provenance", "check_writes", "labelled"]


def check_writes(writes: Iterable[str] | None, known: Collection[str] | None,
                 owner: str) -> frozenset[str] | None:
    """The tools an agent's task writes with, checked: a list of names (not one string),
    each among ``known`` when the agent's tools are known now.

    Args:
        writes: The names the developer gave; None when none were.
        known: The agent's tool names; None when they are known only at run time.
        owner: The agent, for errors.
    """
    if writes is None:
        return None
    if isinstance(writes, str):
        raise ConfigurationError(f"{owner}: writes= is a list of tool names, not the "
                                 f"string {writes!r}")
    names = frozenset(writes)
    unknown = sorted(names - set(known)) if known is not None else []
    if unknown:
        raise ConfigurationError(f"{owner}: writes= names {unknown}, which are not among its "
                                 f"tools {sorted(known or ())}")
    return names


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           default=str)


@dataclass
class Provenance:
    """What trusted and untrusted sources put in one framework agent's context, this step.

    Args:
        taint: The context's untrusted sources, in order (the integration's own list: it
            grows as untrusted tools answer).
        requested: The tools a trusted source asked for (``writes=``); None: none known.
    """

    taint: list[str]
    requested: frozenset[str] | None = None
    corpus: Corpus = field(default_factory=Corpus)
    """What trusted sources put in the context the model was sent."""
    blocks: list[tuple[str, str]] = field(default_factory=list)
    """The untrusted content, as (source, lower-cased text)."""
    pending: list[tuple[JSON, bool]] = field(default_factory=list)
    """Trusted values the model was not sent yet, each with whether a tool listed it
    (else a person said it)."""
    said: set[str] = field(default_factory=set)
    """The instructions taken in already: each request sends them again."""

    def start(self, given: JSON, *, tainted: Sequence[str]) -> None:
        """Take in the run's prompt or input: trusted, unless the run's lineage brought
        untrusted content (``tainted``, its sources), whose blocks it then is.

        Args:
            given: The prompt or input items.
            tainted: The lineage's sources; empty for a clean lineage.
        """
        if tainted:
            self.blocks += [(s, _text(given).lower()) for s in tainted]
        else:
            self.corpus.add(given)

    def instructions(self, *texts: str | None) -> None:
        """Take in the agent's instructions or system prompts: constants of the flow,
        trusted.

        Args:
            texts: What the model is sent as instructions (None and empty are skipped).
        """
        for text in texts:
            if text and text not in self.said:
                self.said.add(text)
                self.corpus.add_text(text)

    def seen(self) -> None:
        """The model is sent its context now: the trusted values it was not sent before
        join the corpus, so a call is traced only to what its model could have read."""
        for value, listed in self.pending:
            self.corpus.add(value, listed=listed)
        self.pending.clear()

    def answered(self, answer: JSON) -> None:
        """Take in a person's answer (a deferred tool's result): trusted.

        Args:
            answer: The answer.
        """
        self.pending.append((answer, False))

    def untrusted(self, source: str, value: JSON) -> None:
        """Take in content nobody vouches for (a provider's search results): a block of
        ``source``, which joins the taint.

        Args:
            source: Where it came from.
            value: The content.
        """
        self.blocks.append((source, _text(value).lower()))
        add_source(self.taint, source)

    def assess(self, tool: Tool, args: Any, taint: Sequence[str]) -> Assessment:
        """The provenance of a proposed call of ``tool`` from a context holding ``taint``.

        Args:
            tool: The tool.
            args: The proposed arguments.
            taint: The untrusted sources of the context the call was proposed in.
        """
        if not taint:
            return assess(tool, args, Corpus(), taint=(), requested=self.requested)
        return assess(tool, args, self.corpus, taint=taint, requested=self.requested,
                      blocks=self.blocks)

    def took(self, tool: Tool, found: Assessment, value: Any,
             error_type: str | None = None) -> None:
        """Take in what a call gave back (its result, or an error's message).

        A tool nobody vouches for that ran is a source: its output is a block of its
        own and it joins the taint, but for its ``trusted_fields`` when its arguments were
        trusted. What a trusted tool or the door said carries the sources of the call's
        untrusted arguments (the tool is never named); with none, it is trusted.

        Args:
            tool: The tool called.
            found: The call's assessment (:meth:`assess`).
            value: What the model is given back.
            error_type: The error's type, when the call failed.
        """
        via = list(dict.fromkeys(s for t in found.traces if not t.trusted for s in t.sources))
        if output_taints(tool, error_type):
            if tool.trusted_fields and not via and error_type is None:
                kept, value = split_fields(value, tool.trusted_fields)
                self.pending.append((kept, True))
            self.untrusted(tool.name, value)
            return
        if via:
            self.blocks += [(s, _text(value).lower()) for s in via]
        else:
            self.pending.append((value if error_type is None else _text(value), True))


def labelled(found: Assessment, sources: Sequence[str], extra: dict[str, JSON]
             ) -> tuple[list[str], list[str], dict[str, JSON]]:
    """The labels, risks and evidence of a call assessed as ``found``, proposed from a
    context holding ``sources``.

    Args:
        found: The call's assessment.
        sources: The untrusted sources of the context it was proposed in.
        extra: The integration's own evidence.
    """
    labels = list(found.labels)
    evidence: dict[str, JSON] = {**extra, "tainted_by": list(sources)}
    if not labels:
        return labels, [], evidence
    risks = [f"proposed by a model that has read untrusted content from "
             f"{', '.join(sources)}", *found.risks()]
    evidence |= found.evidence()
    evidence["repeats"] = list(dict.fromkeys(s for t in found.traces if t.repeats
                                             for s in t.sources))
    return labels, risks, evidence

