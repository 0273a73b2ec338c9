"""The run's lifecycle: started, its input checked, dead-lettered, resumed and ended; a
refused checkpoint."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..labels import LabelValue
from ..lineage import Lineage
from ._base import JSON, Event


class ForkOrigin(BaseModel):
    """Where a forked run came from (:class:`RunStarted` ``fork``): the parent run, the
    seq of the parent's journal whose state the fork starts from, the step the parent
    stood at there, who forked it and why, and what the fork carries over besides the
    state: the parent's usage counters at that seq (so budgets and counter rules such as
    "at most three reminders" still count what the parent did) and its version markers
    (``ctx.version``). Approvals, pending decisions, timers, waits and escalations are
    never carried over: a forked call needs its own approval."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    seq: int
    step: str | None
    by: str
    reason: str = ""
    usage: dict[str, float] = Field(default_factory=dict)
    """The parent's counters at ``seq``: ``tool_calls``, ``read_calls``, ``model_calls``,
    ``tokens_in``, ``tokens_out``, ``cost_usd``, ``messages`` and ``money.<CUR>``."""
    versions: dict[str, bool] = Field(default_factory=dict)


class RunStarted(Event):
    """A run was created: which flow, its input, its first step and initial state."""

    type: Literal["RunStarted"] = "RunStarted"
    flow: str
    input: JSON
    state: JSON
    first_step: str
    idempotency_key: str | None = None
    deadline: float | None = None
    principal: str | None = None
    """Who the run acts for (a user or service id); policies match on it."""
    roles: list[str] = Field(default_factory=list)
    """The principal's roles; policies and memory access match on them."""
    signals: list[str] | None = None
    """The signal names the flow declared when the run started (None: it declared none)."""
    checked: bool = True
    """False when the run was started by flow name without the flow's code: ``input`` is
    the raw input, ``state`` and ``first_step`` are empty until a worker that has the flow
    journals :class:`InputChecked` (or fails the run when the input does not match)."""
    parent_run_id: str | None = None
    """The run (same tenant) that started this one as a child with ``ctx.start``; its
    end reaches that run's inbox."""
    trace_context: dict[str, str] | None = None
    """The W3C trace context (``traceparent``, ``tracestate``) of the request that started
    the run: its spans join that trace, whichever worker runs them and however late."""
    subject: str | None = None
    """The data subject the run is about, as an opaque id (see :mod:`underway.subjects`)."""
    purpose: str = "operations"
    """What the run is for; policies may require the subject's consent for a purpose."""
    consent: str | None = None
    """The reference of the consent the run was started on (evidence, journaled as given;
    what policies check is the consent store at the time of each call)."""
    forked_from: str | None = None
    """The run (same tenant) this one was forked from (``underway runs fork``)."""
    fork: ForkOrigin | None = None
    """For a fork: where in its parent it starts and what it carries over."""
    lineage: Lineage | None = None
    """What the run inherited or was started with besides ``subject``, ``purpose``,
    ``consent`` and ``trace_context`` (:class:`~underway.lineage.Lineage`: outside origin,
    taint, shadow mode, labels, the root of its tree). None: nothing more, as every run
    started before the record existed."""

    @property
    def sensitive_fields(self) -> list[str] | None:
        """The labels the run starts with that are shown redacted (what a
        :class:`~underway.redaction.Redactor` learns, as from a tool's event)."""
        return list(self.lineage.sensitive_labels) or None if self.lineage else None


class RunLabeled(Event):
    """The flow set labels on its run (``ctx.label``): names and typed values, set over
    those the run had. ``sensitive_fields`` names those shown redacted."""

    type: Literal["RunLabeled"] = "RunLabeled"
    labels: dict[str, LabelValue]
    sensitive_fields: list[str] | None = None


class InputChecked(Event):
    """A worker checked the input of a run started without its flow's code: the parsed
    input, the initial state, the first step and the signals the flow declares."""

    type: Literal["InputChecked"] = "InputChecked"
    input: JSON
    state: JSON
    first_step: str
    signals: list[str] | None = None


class RunDeadLettered(Event):
    """The run stopped on an error it cannot get past by itself (an unhandled exception, an
    exhausted retry budget); an operator may resume or cancel it."""

    type: Literal["RunDeadLettered"] = "RunDeadLettered"
    reason: str
    error_type: str | None = None
    step: str | None = None


class RunResumed(Event):
    """An operator resumed a dead run, at ``step`` (None: the step where it stopped).

    ``decision`` holds the verified signed decision when the resume came signed
    (``underway approvals resolve --resolution resume``); None for an unsigned
    ``underway runs resume``. Calls the run goes on with pass the whole guard again.
    """

    type: Literal["RunResumed"] = "RunResumed"
    by: str
    step: str | None = None
    decision: JSON = None


class RunForked(Event):
    """An operator forked this run: run ``run_id`` (same tenant) starts from this run's
    state at ``seq`` (at step ``step``), for recovery or a what-if. Changes nothing here."""

    type: Literal["RunForked"] = "RunForked"
    run_id: str
    seq: int
    step: str | None
    by: str
    reason: str = ""


class RunCompleted(Event):
    """The run finished with a result."""

    type: Literal["RunCompleted"] = "RunCompleted"
    result: JSON
    tainted_by: list[str] = Field(default_factory=list)
    """Where the untrusted content that was in the run's context when it finished came
    from (tool names, ``signal:<name>``, ``intake``, sources inherited from its parent),
    in order. Empty: nothing untrusted shaped the result, as every run completed before
    it was recorded."""
    marks: list[dict[str, JSON]] = Field(default_factory=list)
    """The parts of the result that trusted sources do not account for, each
    ``{"path", "sources", "repeats"}``: where in the result, the untrusted sources it came
    from, and whether it repeats their text (:class:`~underway.guard.provenance.Mark`).
    Paths and source names only, never a value. Empty: nothing was marked, as for every
    run completed before marks were recorded."""


class RunFailed(Event):
    """The run ended in failure."""

    type: Literal["RunFailed"] = "RunFailed"
    reason: str
    error_type: str | None = None
    step: str | None = None


class RunCancelled(Event):
    """The run was cancelled at a step boundary; ``by`` says who asked."""

    type: Literal["RunCancelled"] = "RunCancelled"
    by: str
    reason: str = ""


class CheckpointRefused(Event):
    """A worker found a checkpoint row the journal does not vouch for (edited, spliced from
    another run or tenant, stale, or missing), ignored it and folded the whole journal."""

    type: Literal["CheckpointRefused"] = "CheckpointRefused"
    checkpoint_seq: int | None
    """The seq the refused row named (for a missing row: the seq last committed)."""
    reason: str
