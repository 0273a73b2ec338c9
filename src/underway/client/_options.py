"""The options of a run's start, declared once: :class:`StartOptions` holds them with their
defaults and checks, and :class:`StartKeywords` types the same names as keyword arguments.

Every start entry point (:meth:`Client.start <underway.client.Client.start>`,
:meth:`Client.prepare_start <underway.client.Client.prepare_start>`,
:meth:`Engine.start <underway.engine.Engine.start>`, and the engine's ``prepare_start``)
takes either the keywords or a ready ``options=StartOptions(...)``, never both.

>>> import underway as uw
>>> opts = uw.StartOptions(queue="billing", idempotency_key="INV-7")
>>> client.start("invoice_followup", {"invoice": "INV-7"}, options=opts)  # doctest: +SKIP
>>> client.start("invoice_followup", {"invoice": "INV-7"}, queue="billing",
...              idempotency_key="INV-7")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import TypedDict

from .. import inputs
from ..errors import ConfigurationError
from ..labels import LabelValue, check_key, check_labels
from ..lineage import Lineage
from ..subjects import DEFAULT_PURPOSE


class StartKeywords(TypedDict, total=False):
    """The keyword arguments of a start: the fields of :class:`StartOptions`, by the same
    names and types (see there for each). A unit test keeps the two equal."""

    tenant_id: str
    idempotency_key: str | None
    run_id: str | None
    start_at: float | None
    queue: str
    deadline: float | None
    principal: str | None
    roles: Iterable[str]
    trace_context: dict[str, str] | None
    subject: str | None
    purpose: str
    consent: str | None
    lineage: Lineage | None
    labels: Mapping[str, LabelValue] | None
    sensitive_labels: Iterable[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class StartOptions:
    """How a run is started: whose it is, when and where it runs, whom it acts for and
    what it inherits. Checked when made: text a database cannot hold, or a time no date
    can show, raises :class:`~underway.errors.InvalidInput` naming the field; an empty
    queue raises :class:`~underway.errors.ConfigurationError`.

    Args:
        tenant_id: the tenant the run belongs to.
        idempotency_key: starting again with the same key finds the run it started. No
            second run is created.
        run_id: the new run's id (default: a random UUID).
        start_at: when the first step may run (epoch seconds; default: now).
        queue: the queue whose workers run it.
        deadline: past this time (epoch seconds) the run escalates to a person.
        principal: whom the run acts for. Policies match on it.
        roles: the principal's roles. Policies match on them.
        trace_context: the W3C trace context (``traceparent``, ``tracestate``) the run's
            spans join. It is journaled with the run.
        subject: the data subject the run is about, as an opaque id. It is checked and
            journaled.
        purpose: what the run is for. It is checked and journaled.
        consent: the reference of the consent the run acts on. It is checked and
            journaled.
        lineage: what the run starts with besides (an outside origin, taint, shadow mode,
            labels). The fields above add to it and never replace what it has. Every
            descendant inherits it all.
        labels: typed names and values the run is found and shown by
            (:mod:`underway.labels`). They are checked and journaled. They are set over
            the labels ``lineage`` holds.
        sensitive_labels: names of labels shown redacted to a viewer who may not reveal
            sensitive data.
    """

    tenant_id: str = "default"
    idempotency_key: str | None = None
    run_id: str | None = None
    start_at: float | None = None
    queue: str = "default"
    deadline: float | None = None
    principal: str | None = None
    roles: Iterable[str] = ()
    trace_context: dict[str, str] | None = None
    subject: str | None = None
    purpose: str = DEFAULT_PURPOSE
    consent: str | None = None
    lineage: Lineage | None = None
    labels: Mapping[str, LabelValue] | None = None
    sensitive_labels: Iterable[str] = ()

    def __post_init__(self) -> None:
        # A one-shot iterable of roles would be empty the second time it is read.
        object.__setattr__(self, "roles", tuple(self.roles))
        object.__setattr__(self, "labels", check_labels(self.labels) or None)
        object.__setattr__(self, "sensitive_labels", tuple(sorted(
            {check_key(k, field="sensitive_labels") for k in self.sensitive_labels})))
        for field, value in (("run_id", self.run_id),
                             ("idempotency_key", self.idempotency_key),
                             ("queue", self.queue)):
            if value is not None:
                inputs.text(field, value, max_length=inputs.MAX_NAME)
        for field, when in (("start_at", self.start_at), ("deadline", self.deadline)):
            if when is not None:
                inputs.when(field, when)
        if not self.queue:
            raise ConfigurationError("queue name must not be empty")

    @classmethod
    def of(cls, options: StartOptions | None, keywords: StartKeywords) -> StartOptions:
        """The options a start was given: ``options``, or else made of ``keywords``.

        Raises :class:`~underway.errors.ConfigurationError` naming the keywords given
        beside ``options``: the options already hold every field.

        Args:
            options: a ready :class:`StartOptions`, or None.
            keywords: the start's keyword arguments.
        """
        unknown = sorted(set(keywords) - START_FIELDS)
        if unknown:
            raise TypeError(f"a start takes no keyword argument {unknown[0]!r}")
        if options is None:
            return cls(**keywords)
        if keywords:
            given = ", ".join(f"{name}=" for name in sorted(keywords))
            raise ConfigurationError(
                f"a start got options= and {given} too: give each field once, in the options "
                "(dataclasses.replace(options, ...)) or as a keyword without options=")
        return options


START_FIELDS = frozenset(f.name for f in fields(StartOptions))
"""The names of a start's options."""
