"""What a run inherits: the one record a run passes to every run it starts, to its forks
and to its replays.

A run's :class:`Lineage` says where its work came from and under what limits it runs: the
outside origin that started its tree (an intake event's source), the taint of the
content it starts with, shadow mode, the data subject, purpose and consent, the trace its
spans join, its labels and the run at the top of its tree (the scope a tree's budgets
count in). The start path (:func:`underway.client._starting.new_run`) is the only place
that writes it; every descendant gets its parent's through :meth:`Lineage.descend`,
which only ever adds restrictions: a child cannot drop the taint, shadow mode, subject or
purpose its parent had.

Every run has a trace context: the caller's, or one minted at its start
(:func:`minted_context`). Its descendants sit below its root span, in its trace.

The record is journaled in the run's :class:`~underway.events.RunStarted` (``lineage``).
Subject, purpose, consent and trace context keep their own fields there, as they always
had; the journaled record holds the rest, and a run started before the record existed
reads as the fields it has (a run intake started, known by its ``intake:`` key, has its
outside origin).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from .errors import ConfigurationError
from .labels import LabelValue, check_key, check_labels
from .subjects import DEFAULT_PURPOSE

__all__ = ["INTAKE_KEY_PREFIX", "INTAKE_TAINT", "Lineage", "below", "minted_context",
           "restored", "root_span_id", "trace_parent"]

INTAKE_KEY_PREFIX = "intake:"
"""How the idempotency key of every run intake starts begins."""

INTAKE_TAINT = "intake"
"""The taint source of content an outside event brought in (a run intake started)."""

_OWN_FIELDS = ("subject", "purpose", "consent", "trace_context")
"""What :class:`~underway.events.RunStarted` holds in fields of its own."""


class Lineage(BaseModel):
    """What a run inherits from the run that started it, and passes on to every run it
    starts, to its forks and to its replays.

    ``origin``: the outside source whose event started the tree (an intake event's
    ``source``; None: a person or a service started it). ``taint``: where the untrusted
    content the run starts with came from (``intake``, tool names, ``signal:<name>``), in
    order; an agent treats its input as untrusted when it is not empty. ``shadow``: the
    run's mutating calls are journaled, never executed. ``subject``, ``purpose``,
    ``consent``: the data subject, what the run is for and the consent it acts on.
    ``trace_context``: the W3C trace context its spans join. ``labels``: typed names and
    values it is found and shown by (:mod:`underway.labels`); ``sensitive_labels``: those
    of them shown redacted. ``root_run_id``: the run at the top of its tree (None: this
    run is the top), the scope a tree's budgets count in.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    origin: str | None = None
    taint: tuple[str, ...] = ()
    shadow: bool = False
    subject: str | None = None
    purpose: str = DEFAULT_PURPOSE
    consent: str | None = None
    trace_context: dict[str, str] | None = None
    labels: dict[str, LabelValue] = Field(default_factory=dict)
    sensitive_labels: tuple[str, ...] = ()
    root_run_id: str | None = None

    @field_validator("labels", mode="after")
    @classmethod
    def _labels(cls, value: dict[str, LabelValue]) -> dict[str, LabelValue]:
        return check_labels(value)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out when empty, so a journal written before it existed stores the same.
        dumped: dict[str, Any] = handler(self)
        if not dumped.get("sensitive_labels"):
            dumped.pop("sensitive_labels", None)
        return dumped

    @field_validator("sensitive_labels", mode="after")
    @classmethod
    def _sensitive(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted({check_key(k, field="sensitive_labels") for k in value}))

    def labeled(self, labels: dict[str, LabelValue], sensitive: tuple[str, ...] = ()
                ) -> Lineage:
        """This lineage with ``labels`` set (a name given again takes the new value)
        and ``sensitive`` added to the sensitive ones.

        Args:
            labels: Names and values.
            sensitive: Names of labels shown redacted.
        """
        return self.model_copy(update={
            "labels": check_labels({**self.labels, **labels}),
            "sensitive_labels": tuple(sorted({*self.sensitive_labels, *sensitive}))})

    @property
    def tainted(self) -> bool:
        """Whether the run starts with untrusted content (an outside origin, or taint)."""
        return bool(self.taint) or self.origin is not None

    @property
    def sources(self) -> tuple[str, ...]:
        """Where the untrusted content the run starts with came from: its taint, or
        ``intake`` for a run with an outside origin and no taint named."""
        if self.taint:
            return self.taint
        return (INTAKE_TAINT,) if self.origin is not None else ()

    def join(self, adds: Lineage | None) -> Lineage:
        """This lineage with the restrictions of ``adds`` added: the outside origin and
        the taint sources ``adds`` names besides these, shadow mode when either has it,
        and the subject, purpose, consent and trace context where this one has none.
        Nothing of this one is ever dropped or replaced, but for labels: ``adds`` sets
        its labels over these (a child started with ``sku=B`` is about ``B``).

        Raises :class:`ConfigurationError` when ``adds`` names another data subject,
        purpose or consent than this one (a run cannot act for someone else, or for
        another purpose, than the run it comes from).
        """
        if adds is None:
            return self
        for name in ("subject", "consent"):
            mine, theirs = getattr(self, name), getattr(adds, name)
            if mine is not None and theirs is not None and mine != theirs:
                raise ConfigurationError(
                    f"a run inherits {name} {mine!r}; it cannot start with {name} {theirs!r}")
        if DEFAULT_PURPOSE not in (self.purpose, adds.purpose) \
                and self.purpose != adds.purpose:
            raise ConfigurationError(
                f"a run inherits purpose {self.purpose!r}; it cannot start with purpose "
                f"{adds.purpose!r}")
        return Lineage(
            origin=self.origin if self.origin is not None else adds.origin,
            taint=_union(self.taint, adds.taint),
            shadow=self.shadow or adds.shadow,
            subject=self.subject if self.subject is not None else adds.subject,
            purpose=self.purpose if self.purpose != DEFAULT_PURPOSE else adds.purpose,
            consent=self.consent if self.consent is not None else adds.consent,
            trace_context=self.trace_context if self.trace_context is not None
            else adds.trace_context,
            labels={**self.labels, **adds.labels},
            sensitive_labels=_union(self.sensitive_labels, adds.sensitive_labels),
            root_run_id=self.root_run_id if self.root_run_id is not None
            else adds.root_run_id,
        )

    def descend(self, run_id: str, adds: Lineage | None = None, *, shadow: bool = False,
                taint: Iterable[str] = ()) -> Lineage:
        """The lineage of a run that run ``run_id`` (whose lineage this is) starts, forks
        or replays: all of this one, with ``run_id``'s tree as its root, plus what the
        start adds (``adds``, see :meth:`join`) and what the parent has at this moment
        beyond its own start: ``shadow`` (it runs in shadow mode) and ``taint`` (sources
        its context has taken in since).

        The descendant stays in this run's trace, with this run's root span as its parent
        (:func:`below`).

        Args:
            run_id: the parent run.
            adds: what the start asks for besides; it can add restrictions, never remove.
            shadow: the parent runs in shadow mode now (its flow's or engine's setting).
            taint: taint sources the parent's context has now.
        """
        here = Lineage(taint=tuple(taint), shadow=shadow,
                       root_run_id=self.root_run_id or run_id)
        whole = self.join(here).join(adds)
        if self.trace_context is None:
            return whole
        # The descendant's spans sit below this run's root span, in this run's trace.
        return whole.model_copy(update={"trace_context": below(self.trace_context, run_id)})

    def journaled(self) -> Lineage | None:
        """What :class:`~underway.events.RunStarted` journals of this lineage in its
        ``lineage`` field: everything but the subject, purpose, consent and trace context
        (fields of their own there); None when nothing is left, so such a run is
        journaled as it always was."""
        rest = self.model_copy(update={name: Lineage.model_fields[name].default
                                       for name in _OWN_FIELDS})
        return None if rest == _EMPTY else rest


_EMPTY = Lineage()


def restored(
    journaled: Lineage | None, *, idempotency_key: str | None, subject: str | None,
    purpose: str, consent: str | None, trace_context: Mapping[str, str] | None,
) -> Lineage:
    """A run's lineage from what its start journaled: the ``lineage`` record (None for a
    run started before it existed, or with nothing more to inherit) and the fields of its
    own. A run whose key says intake started it has its outside origin, whatever else
    was journaled.

    Args:
        journaled: ``RunStarted.lineage``.
        idempotency_key: the key the run was started with.
        subject: the data subject.
        purpose: what the run is for.
        consent: the consent reference.
        trace_context: the W3C trace context.
    """
    found = journaled or _EMPTY
    if idempotency_key is not None and idempotency_key.startswith(INTAKE_KEY_PREFIX):
        found = found.join(Lineage(origin=found.origin or INTAKE_TAINT,
                                   taint=(INTAKE_TAINT,)))
    return found.model_copy(update={
        "subject": subject, "purpose": purpose, "consent": consent,
        "trace_context": None if trace_context is None else dict(trace_context),
    })


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def trace_parent(context: Mapping[str, str] | None) -> tuple[str, str, str] | None:
    """The trace id, parent span id and flags of a W3C trace context; None when it has no
    valid ``traceparent`` (W3C: such a context is ignored and a new trace begins).

    Args:
        context: The carrier (``traceparent``, ``tracestate``).
    """
    if not context:
        return None
    found = _TRACEPARENT.fullmatch(str(context.get("traceparent", "")).strip().lower())
    if found is None or set(found[1]) == {"0"} or set(found[2]) == {"0"}:
        return None
    return found[1], found[2], found[3]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def root_span_id(run_id: str) -> str:
    """The span id of run ``run_id``'s root span (16 hex digits, never zero): the same in
    every process, so every activation, child and fork can name it as a parent.

    Args:
        run_id: The run.
    """
    found = _digest("underway.run", run_id)[:16]
    return found if set(found) != {"0"} else "1" * 16


def minted_context(tenant_id: str, run_id: str) -> dict[str, str]:
    """The trace context a run starts a trace with when none is given: a trace id of its
    own (derived from the tenant and run, so a replay makes the same), naming the run's
    own root span, which then has no parent.

    Args:
        tenant_id: The run's tenant.
        run_id: The run.
    """
    trace_id = _digest("underway.trace", tenant_id, run_id)[:32]
    return {"traceparent": f"00-{trace_id}-{root_span_id(run_id)}-01"}


def below(context: Mapping[str, str], run_id: str) -> dict[str, str] | None:
    """The trace context of a run that run ``run_id`` starts, forks or replays: the same
    trace, with the run's root span as parent. None when ``context`` is not valid.

    Args:
        context: Run ``run_id``'s trace context.
        run_id: The run whose root span is the parent.
    """
    found = trace_parent(context)
    if found is None:
        return None
    out = {"traceparent": f"00-{found[0]}-{root_span_id(run_id)}-{found[2]}"}
    if context.get("tracestate"):
        out["tracestate"] = context["tracestate"]
    return out


def _union(first: tuple[str, ...], then: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*first, *then)))
