"""Bulk operations: one action on every run a filter selects.

The filter is the runs list's own (:class:`RunFilter`, the keywords of
:meth:`Client.list_runs`). Runs are read a page at a time, keyed on (created, id), so runs
created meanwhile never shift a page and no run is seen twice. Each run is read again just
before the action, and the action is the single-run one: :meth:`Client.cancel`,
:meth:`Client.resume`, :meth:`Client.resolve`, or :meth:`Client.submit_decision` for a
signed answer, approval, rejection or resolution. So each run journals its own action,
with the operator, when its worker takes it.

A repeat acts on nothing twice. An unsigned action is sent under a signal id made of the
action and the run's journal head, so a second operation (concurrent, or a re-run
after a crash) sends nothing new while the run has not moved. A run with the same kind of
action already in its inbox is skipped. A signed decision gets a nonce made of the run and
the request, so two signings of one request are one decision.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from .. import faults, inputs
from ..clock import Clock
from ..control import CANCEL, RESOLVE, RESUME
from ..errors import (
    ConfigurationError,
    RunNotFound,
    SignedResolutionRequired,
    UnderwayError,
)
from ..events import JSON
from ..guard.approvals import ApprovalCheck, SignedDecision, sign_decision, verify_decision
from ..guard.approvals.decision import REASON_TEXT, Decision
from ..journal.state import ANSWER_SIGNAL, APPROVAL_SIGNAL
from ..labels import LabelValue
from ..store.base import FINAL, RunRecord, Store
from ._pages import RunPage
from ._requests import PendingRequest

if TYPE_CHECKING:
    from ._transport import Transport

BulkAction = Literal["resume", "cancel", "resolve", "answer", "approve", "reject"]
ACTIONS: tuple[BulkAction, ...] = ("resume", "cancel", "resolve", "answer", "approve",
                                   "reject")
"""Every bulk action."""
SIGNED_ONLY = frozenset({"answer", "approve", "reject"})
"""Actions that are always signed decisions."""
Outcome = Literal["done", "eligible", "skipped", "failed"]

_STATUS: dict[str, str] = {"resume": "dead", "resolve": "escalated", "answer": "escalated",
                           "approve": "waiting", "reject": "waiting"}
"""The one status an action can act on (cancel: any unfinished one)."""
_INBOX: dict[str, frozenset[str]] = {
    "cancel": frozenset({CANCEL}), "resume": frozenset({RESUME, ANSWER_SIGNAL}),
    "resolve": frozenset({RESOLVE, ANSWER_SIGNAL}), "answer": frozenset({ANSWER_SIGNAL}),
    "approve": frozenset({APPROVAL_SIGNAL}), "reject": frozenset({APPROVAL_SIGNAL}),
}
"""The inbox signals that carry each action: one waiting there means it was sent."""
_KIND = {"resume": "resolution", "resolve": "resolution", "answer": "question",
         "approve": "approval", "reject": "approval"}
_DECISION: dict[str, Decision] = {"resume": "resolve", "resolve": "resolve",
                                  "answer": "answer", "approve": "approve",
                                  "reject": "reject"}

Signer = Callable[[str, PendingRequest, Decision, JSON], JSON]
"""Signs one run's decision: given the tenant, the request, the verdict and the answer, it
returns the signed decision (as JSON), or None when it has none for that run."""


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs: the filter of :meth:`Client.list_runs`, as one value.

    Every field narrows the selection; None leaves it open. Times are epoch seconds.
    ``search`` is a plain, case-sensitive substring of the run id or flow.
    """

    status: str | None = None
    flow: str | None = None
    since: float | None = None
    until: float | None = None
    updated_since: float | None = None
    updated_until: float | None = None
    search: str | None = None
    labels: Mapping[str, LabelValue] | None = None
    """Only runs with every one of these labels (a value matches by its text)."""

    def keywords(self) -> dict[str, Any]:
        """The keywords of :meth:`Client.list_runs` this filter stands for."""
        return {"status": self.status, "flow": self.flow, "since": self.since,
                "until": self.until, "updated_since": self.updated_since,
                "updated_until": self.updated_until, "search": self.search,
                "labels": self.labels}


@dataclass(frozen=True, slots=True)
class BulkItem:
    """What a bulk operation did to one run.

    ``outcome``: ``done`` (the action was sent), ``eligible`` (a dry run would send it),
    ``skipped`` (``reason`` says why) or ``failed`` (``reason`` is the error).
    ``request_id``: the request the run waits on, when the action settles one (what a
    signer signs for that run).
    """

    run_id: str
    outcome: Outcome
    reason: str = ""
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class BulkResult:
    """A bulk operation's report: the action, whether it was a dry run, one item per run
    the filter selected (newest first), and the filter it used."""

    action: BulkAction
    dry_run: bool
    filter: RunFilter
    items: list[BulkItem] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        """How many runs had each outcome (every outcome listed, zeros included)."""
        found = {o: 0 for o in ("done", "eligible", "skipped", "failed")}
        for item in self.items:
            found[item.outcome] += 1
        return found

    def ids(self, outcome: Outcome) -> list[str]:
        """The runs with ``outcome``, in order.

        Args:
            outcome: The outcome.
        """
        return [i.run_id for i in self.items if i.outcome == outcome]


class _Acting(Protocol):
    """What a bulk operation needs of the client."""

    signed_resolutions: bool

    @property
    def clock(self) -> Clock: ...
    _transport: Transport

    @property
    def store(self) -> Store: ...

    def list_runs(self, *, tenant_id: str = "default", limit: int = 100,
                  cursor: str | None = None, **filters: Any) -> RunPage: ...

    def get_run(self, run_id: str, *, tenant_id: str = "default") -> RunRecord: ...

    def pending_request(self, run_id: str, *,
                        tenant_id: str = "default") -> PendingRequest | None: ...

    def cancel(self, run_id: str, *, by: str, reason: str = "", tenant_id: str = "default",
               signal_id: str | None = None) -> bool: ...

    def resume(self, run_id: str, *, by: str, step: str | None = None,
               tenant_id: str = "default", signal_id: str | None = None) -> bool: ...

    def resolve(self, run_id: str, *, resolution: str, by: str, result: JSON = None,
                tenant_id: str = "default", signal_id: str | None = None) -> bool: ...

    def submit_decision(self, decision: JSON, *, tenant_id: str = "default") -> bool: ...


@dataclass(frozen=True, slots=True)
class _Plan:
    """One bulk operation's settings, checked once."""

    action: BulkAction
    by: str
    tenant_id: str
    reason: str
    step: str | None
    resolution: str | None
    result: JSON
    question: str | None
    answer: JSON
    signer: Signer | None


class Bulk:
    """What :class:`~underway.client.Client` does to many runs at once."""

    def bulk(
        self,
        action: BulkAction,
        filter: RunFilter,
        *,
        by: str,
        tenant_id: str = "default",
        dry_run: bool = True,
        reason: str = "",
        step: str | None = None,
        resolution: str | None = None,
        result: JSON = None,
        question: str | None = None,
        answer: JSON = None,
        signer: Signer | None = None,
        page_size: int = 100,
        on_item: Callable[[BulkItem], None] | None = None,
    ) -> BulkResult:
        """Apply ``action`` to every run ``filter`` selects, one run at a time.

        Without a status in ``filter``, an action that acts on one status selects only
        it (resume: dead; resolve and answer: escalated; approve and reject: waiting).
        A run the action does not fit now is skipped, with the reason. A dry run (the
        default) sends nothing and reports what would be done.

        Args:
            action: resume, cancel, resolve, answer, approve or reject.
            filter: Which runs.
            by: Who acts (journaled with each run's action).
            tenant_id: The runs' tenant.
            dry_run: Report only; send nothing.
            reason: Why (journaled with a cancel).
            step: With resume: the step to resume at (None: where each run stopped).
            resolution: With resolve: ``succeeded``, ``failed`` or ``retry``.
            result: With resolve ``succeeded``: the effect's result.
            question: With answer: the exact question the runs ask (others are skipped).
            answer: With answer: the answer each run gets.
            signer: Signs each run's decision (:class:`KeySigner`). Answers, approvals
                and rejections need one; with one, resume and resolve are signed too.
            page_size: Runs read per page (over HTTP the server reads its own pages).
            on_item: Called with each run's item as soon as it is known (over HTTP, once
                the server answers).

        Raises:
            ConfigurationError: The action or its options are wrong; nothing was sent.
            SignedResolutionRequired: Runs here settle only with signed resolutions and
                no ``signer`` was given; nothing was sent.
        """
        # (A protocol cannot spell list_runs' keywords as the filter's; the client has them.)
        client = cast(_Acting, self)
        tenant_id = client._transport.tenant(tenant_id)
        plan = _plan(client, action, by=by, tenant_id=tenant_id, reason=reason, step=step,
                     resolution=resolution, result=result, question=question,
                     answer=answer, signer=signer)
        if page_size < 1:
            raise ConfigurationError(f"page_size must be at least 1, not {page_size}")
        if filter.status is None and action in _STATUS:
            filter = replace(filter, status=_STATUS[action])
        return client._transport.bulk(client, plan, filter, dry_run=dry_run,
                                      page_size=page_size, on_item=on_item)


def run_each(client: _Acting, plan: _Plan, filter: RunFilter, *, dry_run: bool,
             page_size: int, on_item: Callable[[BulkItem], None] | None) -> BulkResult:
    """``plan`` applied to each run ``filter`` selects, read a page at a time and acted
    on one run at a time through ``client`` (see the module's docstring).

    Args:
        client: The client whose single-run actions act.
        plan: The checked operation.
        filter: Which runs (its status already defaulted).
        dry_run: Report only; send nothing.
        page_size: Runs read per page.
        on_item: Called with each run's item as soon as it is known.
    """
    out = BulkResult(plan.action, dry_run, filter)
    cursor: str | None = None
    while True:
        page = client.list_runs(tenant_id=plan.tenant_id, limit=page_size, cursor=cursor,
                                **filter.keywords())
        for row in page.runs:
            item = _one(client, plan, row.run_id, dry_run)
            out.items.append(item)
            if on_item is not None:
                on_item(item)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def _plan(client: _Acting, action: str, **options: Any) -> _Plan:
    if action not in ACTIONS:
        raise ConfigurationError(f"unknown bulk action {action!r}; choose one of "
                                 f"{', '.join(ACTIONS)}")
    plan = _Plan(action=action, **options)
    inputs.text("reason", plan.reason)
    inputs.json_value("result", plan.result)
    inputs.json_value("answer", plan.answer)
    if action in SIGNED_ONLY and plan.signer is None:
        raise ConfigurationError(f"a bulk {action} is a signed decision per run: give a "
                                 "signer (an approver's key)")
    if action in ("resume", "resolve") and plan.signer is None and client.signed_resolutions:
        raise SignedResolutionRequired("", f"bulk {action}", how=(
            f"Sign one per run: `underway runs bulk {action} --key FILE --as APPROVER`, or "
            "POST signed decisions to /v1/runs/bulk/settle"))
    if action == "resolve" and plan.resolution not in ("succeeded", "failed", "retry"):
        raise ConfigurationError("a bulk resolve needs a resolution: succeeded, failed or "
                                 f"retry, not {plan.resolution!r}")
    if action == "answer" and not plan.question:
        raise ConfigurationError("a bulk answer needs the question the runs ask: runs "
                                 "asking anything else are skipped")
    if action == "answer" and plan.answer is None:
        raise ConfigurationError("a bulk answer needs the answer to send")
    return plan


def _one(client: _Acting, plan: _Plan, run_id: str, dry_run: bool) -> BulkItem:
    """Check one run as it is now, then act on it (or say what would be done)."""
    try:
        row = client.get_run(run_id, tenant_id=plan.tenant_id)
        request: PendingRequest | None = None
        why = _unfit(plan.action, row)
        if why is None and ((plan.action in _KIND and plan.signer is not None)
                            or plan.action == "resolve"):
            request = client.pending_request(run_id, tenant_id=plan.tenant_id)
            why = _unfit_request(plan, request)
        if why is None and _sent(client.store, row, plan.action):
            why = f"a {plan.action} was already sent and the run has not taken it yet"
        asked = request.request_id if request is not None else None
        if why is not None:
            return BulkItem(run_id, "skipped", why, asked)
        if dry_run:
            return BulkItem(run_id, "eligible", "", asked)
        faults.point("bulk.before_action")
        sent = _act(client, plan, row, request)
        faults.point("bulk.after_action")
    except SignedResolutionRequired:
        raise
    except RunNotFound:
        return BulkItem(run_id, "skipped", "it no longer exists")
    except ConfigurationError as exc:
        # The run moved between the read and the action: the client refused it.
        return BulkItem(run_id, "skipped", str(exc))
    except UnderwayError as exc:
        return BulkItem(run_id, "failed", str(exc))
    if not sent:
        return BulkItem(run_id, "skipped", f"this {plan.action} was sent before", asked)
    return BulkItem(run_id, "done", "", asked)


def _unfit(action: str, row: RunRecord) -> str | None:
    """Why ``action`` does not fit the run's status now (None: it may)."""
    if action == "cancel":
        return f"it is already {row.status}" if row.status in FINAL else None
    wanted = _STATUS[action]
    return None if row.status == wanted else f"it is {row.status}, not {wanted}"


def _unfit_request(plan: _Plan, r: PendingRequest | None) -> str | None:
    """Why the run's pending request is not what ``plan`` settles (None: it is)."""
    kind = _KIND[plan.action]
    if r is None or r.kind != kind:
        return f"it waits for no {kind}" if r is None else f"it waits for a {r.kind}"
    if plan.action == "resolve" and r.cause == "dead":
        return "it is dead: resume it"
    if plan.action == "answer" and r.question != plan.question:
        return f"it asks another question: {r.question!r}"
    return None


def _sent(store: Store, row: RunRecord, action: str) -> bool:
    """Whether the run's inbox already holds an untaken signal carrying ``action``."""
    names = _INBOX[action]
    # Every action travels as a control signal: the rest of the inbox is not read.
    return any(s.name in names for s in store.actionable_signals(
        row.tenant_id, row.run_id, waiting=None))


def _act(client: _Acting, plan: _Plan, row: RunRecord, request: PendingRequest | None) -> bool:
    """Send the action to the run: the single-run call, once per run and journal head."""
    # Signal ids are the run's own: the action and the journal head name one sending.
    once = f"bulk:{plan.action}:{row.last_seq}"
    tenant = plan.tenant_id
    if plan.action == "cancel":
        return client.cancel(row.run_id, by=plan.by, reason=plan.reason, tenant_id=tenant,
                             signal_id=once)
    if plan.signer is None and plan.action == "resume":
        return client.resume(row.run_id, by=plan.by, step=plan.step, tenant_id=tenant,
                             signal_id=once)
    if plan.signer is None:
        return client.resolve(row.run_id, resolution=plan.resolution or "", by=plan.by,
                              result=plan.result, tenant_id=tenant, signal_id=once)
    if request is None:
        request = client.pending_request(row.run_id, tenant_id=tenant)
        if request is None:
            raise ConfigurationError(f"run {row.run_id} waits for nothing to decide")
    decision = plan.signer(tenant, request, _DECISION[plan.action], plan_answer(plan))
    if decision is None:
        raise ConfigurationError(f"no signed decision was given for run {row.run_id} on "
                                 "its request, with this verdict and answer")
    _check(client, tenant, request, decision)
    try:
        return client.submit_decision(decision, tenant_id=tenant)
    except ConfigurationError as exc:
        # A decision the run would refuse (a bad signature, an approver not registered):
        # a failure of this run's action, not a run that moved.
        raise UnderwayError(str(exc)) from None


def plan_answer(plan: _Plan) -> JSON:
    """What a signed decision of ``plan`` carries: the answer, or the resolution."""
    if plan.action == "resume":
        return {"resolution": "resume", "step": plan.step}
    if plan.action == "resolve":
        return {"resolution": plan.resolution, "result": plan.result}
    return plan.answer


def _check(client: _Acting, tenant_id: str, request: PendingRequest, decision: JSON) -> None:
    """Refuse a decision the run would refuse, before it is sent: the run's own check, its
    required role and expiry included (:meth:`Client.submit_decision` checks the rest)."""
    try:
        d = SignedDecision.model_validate(decision)
    except ValidationError:
        return  # submit_decision names what is wrong with it
    check = ApprovalCheck(
        request_id=request.request_id, run_id=request.run_id, tenant_id=tenant_id,
        tool=request.tool, args_hash=request.args_hash,
        required_role=request.required_role, expires_at=request.expires_at)
    approver = client.store.get_approver(tenant_id, d.approver_id)
    reason = verify_decision(d, check=check, approver=approver, now=client.clock.now())
    if reason is not None:
        raise UnderwayError(f"run {request.run_id} would refuse the decision by "
                            f"{d.approver_id!r}: {REASON_TEXT[reason]} ({reason})")


def request_nonce(request: PendingRequest, approver_id: str) -> str:
    """The nonce of ``approver_id``'s decision on ``request``: the same every time, so
    two signings of one request (a repeat, a re-run) make one decision.

    Args:
        request: The pending request.
        approver_id: The approver who signs.
    """
    raw = f"{request.run_id}\x00{request.request_id}\x00{approver_id}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


class KeySigner:
    """A :data:`Signer` that signs with one approver's private key, where the key is.

    Each decision's nonce is :func:`request_nonce`. A request with no expiry gets a
    decision valid for a day, counted from the start of the hour: signing the same
    request again within the hour makes the very same decision. Signed in two hours,
    they are two decisions with one nonce: the run takes the first and refuses the other
    (journaled), so it still acts once.

    Args:
        private_key: The approver's key (:func:`~underway.guard.approvals.load_private_key`).
        approver_id: The approver, as registered.
        comment: Why, in the approver's words (signed and journaled).
        clock: Gives the time (default: the system's).
    """

    def __init__(self, private_key: Ed25519PrivateKey, *, approver_id: str,
                 comment: str = "", clock: Callable[[], float] = time.time) -> None:
        self.private_key = private_key
        self.approver_id = approver_id
        self.comment = comment
        self.clock = clock

    def __call__(self, tenant_id: str, request: PendingRequest, decision: Decision,
                 answer: JSON) -> JSON:
        """The signed decision on ``request``, as JSON.

        Args:
            tenant_id: The run's tenant.
            request: The request the run waits on.
            decision: The verdict.
            answer: The answer (or resolution) it carries.
        """
        expires = request.expires_at
        if expires == float("inf"):
            expires = (self.clock() // 3600 + 1) * 3600 + 86400
        signed = sign_decision(
            self.private_key, request_id=request.request_id, run_id=request.run_id,
            tenant_id=tenant_id, tool=request.tool,
            args_hash=request.args_hash, decision=decision, expires_at=expires,
            approver_id=self.approver_id, comment=self.comment, answer=answer,
            nonce=request_nonce(request, self.approver_id),
        )
        return signed.model_dump(mode="json")
