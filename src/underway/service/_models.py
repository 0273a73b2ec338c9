"""The API's request and response bodies, as pydantic models (the OpenAPI document's schemas
come from these). Requests refuse unknown fields, so a misspelt field is named, not
ignored. Times are epoch seconds."""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue

from ..client import PendingRequest, RunEvent
from ..client._forking import MAX_REASON
from ..codec import ENCRYPTED
from ..errors import ConfigurationError
from ..events import Encrypted, PayloadPurged
from ..flow import Flow
from ..inputs import MAX_INT, MAX_TIME
from ..labels import MAX_LABELS, LabelValue
from ..redaction import Redactor
from ..store.base import RunRecord
from ..subjects import DEFAULT_PURPOSE, MAX_ID, check_purpose, check_reference, check_subject


def _checked(check: Callable[..., str], what: str) -> Callable[[str], str]:
    def validate(value: str) -> str:
        try:
            return check(value, field=what)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
    return validate


Subject = Annotated[str, Field(min_length=1, max_length=MAX_ID,
                               pattern=r"^[^\s\x00-\x1f\x7f\x85]+$",
                               description="A data subject, as an opaque id (no whitespace)."),
                    AfterValidator(_checked(check_subject, "the subject"))]
Purpose = Annotated[str, Field(min_length=1, max_length=64,
                               pattern=r"^[a-z][a-z0-9_.\-]{0,63}$",
                               description="A purpose name, e.g. `marketing`."),
                    AfterValidator(_checked(check_purpose, "the purpose"))]


def _flow_name(name: str) -> str:
    try:
        return Flow.check_name(name)
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None


FLOW_NAME_PATTERN = r"^[\w.\-]*[^\W_][\w.\-]*$"
"""What :meth:`~underway.flow.Flow.check_name` accepts, as a regular expression of
Python's, whose word characters are those ``isalnum()`` and ``_``."""
# Checked here, not only by the client, so a bad name is refused as ``body.flow``. The
# pattern is only documented: the check itself stays Flow.check_name's.
FlowName = Annotated[str, Field(min_length=1, description="A flow's name.",
                                json_schema_extra={"pattern": FLOW_NAME_PATTERN}),
                     AfterValidator(_flow_name)]
Reference = Annotated[str, Field(min_length=1, max_length=MAX_ID,
                                 description="A consent reference (a consent artefact's id)."),
                      AfterValidator(_checked(check_reference, "the reference"))]


class RunStatus(StrEnum):
    """Where a run stands (:data:`underway.journal.state.RunStatus`). One named schema, so
    a generated client has one enum for the filter of every runs query and for the
    status of every run it reads."""

    READY = "ready"
    WAITING = "waiting"
    ESCALATED = "escalated"
    DEAD = "dead"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunSummary(BaseModel):
    """A run's row: what listing shows. ``last_hash`` chains the run's next event;
    ``control_pending`` says a cancel, resume or resolution waits in its inbox; the
    ``lease_*`` fields name the worker that holds it now, if any."""

    run_id: str
    flow: str
    status: RunStatus
    step: str | None
    queue: str
    idempotency_key: str | None
    last_seq: int
    waiting_signal: str | None
    next_wake_at: float | None
    created_at: float
    updated_at: float
    error: str | None
    subject: str | None = None
    purpose: str = DEFAULT_PURPOSE
    waiting: str | None = None
    """What it waits on, in words (``approval by procurement``, ``signal paid``); null
    once finished. ``waiting_signal`` is the machine's name of it."""
    labels: dict[str, LabelValue] = Field(default_factory=dict)
    """The run's labels; a sensitive one's value reads ``[redacted]`` unless revealed."""
    tenant_id: str = "default"
    last_hash: str = ""
    control_pending: bool = False
    lease_owner: str | None = None
    lease_token: int = 0
    lease_expires_at: float | None = None

    @classmethod
    def of(cls, row: RunRecord, labels: dict[str, LabelValue] | None = None) -> RunSummary:
        """The summary of a stored row, with its labels as the viewer sees them."""
        return cls(
            run_id=row.run_id, flow=row.flow, status=RunStatus(row.status), step=row.step,
            queue=row.queue, idempotency_key=row.idempotency_key, last_seq=row.last_seq,
            waiting_signal=row.waiting_signal, next_wake_at=row.next_wake_at,
            created_at=row.created_at, updated_at=row.updated_at, error=row.error,
            subject=row.subject, purpose=row.purpose, labels=labels or {},
            tenant_id=row.tenant_id, last_hash=row.last_hash,
            control_pending=row.control_pending, lease_owner=row.lease_owner,
            lease_token=row.lease_token, lease_expires_at=row.lease_expires_at,
        )


class RunPage(BaseModel):
    """A page of runs, newest first; pass ``next_cursor`` as ``cursor`` for the next."""

    runs: list[RunSummary]
    next_cursor: str | None


class Pending(BaseModel):
    """What a run waits for a person to decide: an approval (the exact ``tool``, ``args``
    and their ``args_hash``, ``evidence``, ``risks``), a question, or a resolution of an
    escalation. ``expires_at`` is null when it never expires. ``sensitive_fields`` and
    ``secret_fields`` name what the tool hides: their values read ``"[redacted]"`` unless
    the read revealed them (secrets, never); ``args_hash`` is always of the exact
    arguments."""

    run_id: str
    kind: Literal["approval", "question", "resolution"]
    request_id: str
    tool: str
    args: JsonValue
    args_hash: str
    evidence: JsonValue
    risks: list[str]
    required_role: str | None
    expires_at: float | None
    question: str | None
    context: JsonValue
    rule_id: str | None
    policy_version: str | None
    cause: str | None
    key: str | None
    sensitive_fields: list[str] = Field(default_factory=list)
    secret_fields: list[str] = Field(default_factory=list)
    summary: str = ""
    """One line that says what is decided."""
    money: JsonValue = None
    """The money the guard read for the call: ``amount`` (a decimal string),
    ``currency``, ``direction``, ``account``; null when it moves none."""
    labels: dict[str, LabelValue] = Field(default_factory=dict)
    """The run's labels; a sensitive one's value reads ``[redacted]`` unless revealed."""
    moves: str | None = None
    """``money`` in words, in the currency's locale (``moves ₹2,32,000.00 out of
    ACME-OPS``)."""

    @classmethod
    def of(cls, r: PendingRequest) -> Pending:
        """The request as the API shows it."""
        return cls(
            run_id=r.run_id, kind=r.kind, request_id=r.request_id, tool=r.tool, args=r.args,
            args_hash=r.args_hash, evidence=r.evidence, risks=list(r.risks),
            required_role=r.required_role,
            expires_at=None if math.isinf(r.expires_at) else r.expires_at,
            question=r.question, context=r.context, rule_id=r.rule_id,
            policy_version=r.policy_version, cause=r.cause, key=r.key,
            sensitive_fields=list(r.sensitive_fields), secret_fields=list(r.secret_fields),
            summary=r.summary, money=r.money, moves=r.moves,
        )


class WaitingOn(BaseModel):
    """What a run that is not finished waits for: a ``worker`` (it is ready), a ``timer``,
    a ``signal`` (``signal``; ``until`` its timeout), a ``child`` run, or a person
    (``approval``, ``question``, ``resolution``: ``request``)."""

    kind: Literal["worker", "timer", "signal", "child", "approval", "question", "resolution"]
    text: str = ""
    """The same in words: ``approval by procurement``, ``an answer from finance``,
    ``signal paid (until ...)``, ``a timer until ...``."""
    signal: str | None = None
    until: float | None = None
    request: Pending | None = None


class AnswerMark(BaseModel):
    """A part of a run's result that trusted sources do not account for: where it is in
    the result (``result``, ``result.items[0]``), the untrusted sources it came from, and
    whether it repeats their text. Names only, never the value."""

    path: str
    sources: list[str]
    repeats: bool


class RunDetail(RunSummary):
    """A run's row, the step it is at, and what it waits on (null once finished).
    ``tainted_by``: once it completed, where the untrusted content that shaped its result
    came from (tool names, ``signal:<name>``, ``intake``; empty: none did); null while it
    has not completed, or when its end cannot be read here. ``marks``: likewise, the parts
    of its result that untrusted content shaped (empty: none)."""

    waiting_on: WaitingOn | None
    tainted_by: list[str] | None = None
    marks: list[AnswerMark] | None = None


class Event(BaseModel):
    """One journaled event: its sequence number, time, type, chain hash and fields. An
    event whose payload retention purged is ``purged``: its ``data`` holds only the
    skeleton that was kept (docs/data-protection.md)."""

    seq: int
    at: float
    type: str
    hash: str
    data: dict[str, JsonValue]
    purged: bool = False

    @classmethod
    def of(cls, e: RunEvent, hide: Redactor) -> Event:
        """The event as the API shows it to a viewer: what ``hide`` hides redacted (a
        purged event: its skeleton; a sealed one without its key here: its type and time,
        its payload ``[encrypted]``)."""
        if isinstance(e.event, PayloadPurged):
            return cls(seq=e.seq, at=e.at, type=e.event.event_type, hash=e.hash,
                       data=e.event.kept, purged=True)
        if isinstance(e.event, Encrypted):
            return cls(seq=e.seq, at=e.at, type=e.event.event_type, hash=e.hash,
                       data={"payload": ENCRYPTED})
        data = hide.event(e.event).model_dump(mode="json")
        event_type = str(data.pop("type"))
        return cls(seq=e.seq, at=e.at, type=event_type, hash=e.hash, data=data)


class StartRun(_Request):
    """Start a run of ``flow`` (by name) with ``input``. ``start_at`` delays its first
    step; past ``deadline`` it escalates to a person. ``subject`` is the data subject the
    run is about, ``purpose`` what it is for, ``consent`` the reference of the consent it
    acts on (see docs/data-protection.md). ``labels`` are typed names and values the run
    is found and shown by; ``sensitive_labels`` names those shown redacted."""

    flow: FlowName
    input: JsonValue = None
    queue: str = Field(default="default", min_length=1)
    start_at: float | None = Field(default=None, ge=0, le=MAX_TIME)
    deadline: float | None = Field(default=None, ge=0, le=MAX_TIME)
    subject: Subject | None = None
    purpose: Purpose = DEFAULT_PURPOSE
    consent: Reference | None = None
    labels: dict[str, LabelValue] | None = Field(default=None, max_length=MAX_LABELS)
    sensitive_labels: list[str] = Field(default_factory=list, max_length=MAX_LABELS)


class Started(BaseModel):
    """The run a start created (201) or found by its idempotency key (200)."""

    run_id: str
    created: bool


class SendSignal(_Request):
    """A signal to deliver: once per ``signal_id`` when given."""

    name: str = Field(min_length=1)
    payload: JsonValue = None
    signal_id: str | None = Field(default=None, min_length=1)


SignalId = Annotated[str | None, Field(
    default=None, min_length=1,
    description="Sent once per id: a repeat with the same id is not delivered again.")]


class Cancel(_Request):
    """Why the run is cancelled (journaled with the key's name)."""

    reason: str = ""
    signal_id: SignalId = None


class Resume(_Request):
    """Resume a dead run at ``step``, or where it stopped."""

    step: str | None = Field(default=None, min_length=1)
    signal_id: SignalId = None


class Resolve(_Request):
    """Resolve an escalation, unsigned: the effect ``succeeded`` (with ``result``),
    ``failed``, or may be ``retry``-ed."""

    resolution: Literal["succeeded", "failed", "retry"]
    result: JsonValue = None
    signal_id: SignalId = None


class ForkRun(_Request):
    """Start a new run from the run's state at its event ``at_seq``: at ``step`` (default:
    the step it stood at then, from its start), with ``state_patch`` applied (an RFC 7386
    merge patch object, or a list of RFC 6902 operations). ``reason`` is journaled in
    both runs, with the key's name."""

    at_seq: int = Field(ge=1, le=MAX_INT)
    step: str | None = Field(default=None, min_length=1)
    state_patch: JsonValue = None
    reason: str = Field(default="", max_length=MAX_REASON)


class Forked(BaseModel):
    """The fork: its ``run_id``, the parent, the parent's ``seq`` it starts from and the
    step the parent stood at then (with its status), the ``step`` the fork starts at,
    the calls it makes again (``redone``) and what else it does not inherit (``notes``)."""

    run_id: str
    parent_run_id: str
    seq: int
    step: str
    parent_step: str | None
    parent_status: str
    redone: list[str]
    notes: list[str]


class Accepted(BaseModel):
    """A request delivered to the run's inbox (``delivered`` false: a duplicate); the run
    acts on it at its next step boundary. ``note`` says what else to know."""

    run_id: str
    delivered: bool
    note: str = ""
