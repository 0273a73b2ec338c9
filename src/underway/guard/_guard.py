"""What stands between a step and its tools: allow-list, policy, approvals, budgets and
shadow mode. The engine consults a :class:`Guard` before every call; nothing here asks a
model, so a model that was talked into a harmful call still meets the same checks.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from ..codec import Codec
from ..errors import ConfigurationError
from ..journal.state import RunState
from ..money import Money, Unreadable
from ..secrets import BoundSecrets, SecretProvider
from ..store._offload import run_io
from ..store.budgets import UNSEEDED, Refused
from .budgets import (
    Budget,
    Exceeded,
    Scope,
    TenantBudgets,
    TenantUsage,
    Usage,
    check,
    ledger_terms,
    run_usage,
)
from .intent import CallIntent
from .policy import FINISH, Amount, Decision, PolicyContext, declared_approval
from .policy.context import Consent

if TYPE_CHECKING:
    from ..store.core import CoreStore
    from ..store.features import EngineStore
    from .approvals.notify import Notifier
    from .policy import Policy


DEFAULT_ENVIRONMENT = "dev"
"""The environment of an engine (and worker) not told one."""


class Governed(Protocol):
    """What the guard reads of a flow (:class:`~underway.flow.Flow`): its own rules."""

    @property
    def policy(self) -> Policy | None: ...
    @property
    def default_policy(self) -> Policy | None: ...
    @property
    def deny_unlisted_mutating(self) -> bool | None: ...
    @property
    def budget(self) -> Budget | None: ...
    @property
    def shadow(self) -> bool | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardOptions:
    """What an engine sets on its guard (:meth:`Guard.configure`).

    A field left None keeps the guard's own value. ``Engine(guard_options=...)`` takes
    one; the engine's keywords of the same names build one.
    """

    policy: Policy | None = None
    """The policy of every flow that has none of its own."""
    environment: str | None = None
    """What policies match on (``dev``, ``staging``, ``prod``...)."""
    budget: Budget | None = None
    """What each run may spend, unless its flow has a budget."""
    tenant_budget: Budget | TenantBudgets | None = None
    """What each tenant's runs may spend per UTC day."""
    shadow: bool | None = None
    """Journal mutating calls without running them."""
    secrets: SecretProvider | None = None
    """Where tools' secrets come from."""
    notifier: Notifier | None = None
    """Who is told when a run waits for a person."""
    signed_resolutions: bool | None = None
    """Refuse unsigned resolutions and resumes."""


@dataclass
class Guard:
    """The engine-wide defaults; a flow may override ``policy``, ``budget`` and ``shadow``.

    ``environment`` (``dev``, ``staging``, ``prod``...) is what policies match on;
    ``tenant_budget`` limits what each tenant's runs spend per UTC day: one
    :class:`~underway.guard.budgets.Budget` for every tenant, or
    :class:`~underway.guard.budgets.TenantBudgets` (a default and per-tenant budgets);
    ``approval_ttl`` is how long an approval request stays open unless its rule says;
    ``tenant_usage_ttl`` is how long a tenant's journal-derived usage is cached (it is read
    on the store's I/O threads, never on the event loop);
    ``signed_resolutions`` refuses unsigned resolutions of escalations (``underway runs
    resolve``): only a resolution signed by a registered approver (``underway approvals
    resolve``) then settles an unknown outcome, a deadline or a budget escalation.
    """

    policy: Policy | None = None
    environment: str = DEFAULT_ENVIRONMENT
    budget: Budget | None = None
    tenant_budget: Budget | TenantBudgets | None = None
    shadow: bool = False
    secrets: SecretProvider | None = None
    notifier: Notifier | None = None
    approval_ttl: float = 24 * 3600.0
    tenant_usage_ttl: float = 5.0
    signed_resolutions: bool = False
    codec: Codec | None = None
    """The engine's codec (set by the engine; None: the store's), to read journals it
    encrypted."""
    _usage_cache: dict[str, _Kept] = field(default_factory=dict, repr=False)

    def configure(self, options: GuardOptions) -> None:
        """Take every setting ``options`` gives; keep the rest.

        Raises:
            ConfigurationError: The secret provider is bound to another environment.
        """
        o = options
        self.policy = o.policy if o.policy is not None else self.policy
        self.environment = o.environment if o.environment is not None else self.environment
        self.budget = o.budget if o.budget is not None else self.budget
        self.tenant_budget = o.tenant_budget if o.tenant_budget is not None \
            else self.tenant_budget
        self.shadow = o.shadow if o.shadow is not None else self.shadow
        self.secrets = o.secrets if o.secrets is not None else self.secrets
        self.notifier = o.notifier if o.notifier is not None else self.notifier
        self.signed_resolutions = o.signed_resolutions if o.signed_resolutions is not None \
            else self.signed_resolutions
        bound = self.secrets
        if isinstance(bound, BoundSecrets) and bound.environment != self.environment:
            raise ConfigurationError(
                f"the secret provider serves environment {bound.environment!r} but the "
                f"engine runs in {self.environment!r}; give both the same environment")

    def policy_for(self, flow: Governed) -> Policy | None:
        """The policy that governs ``flow``'s calls: the flow's, else the engine's, else the
        flow's default (an agent's: :data:`~underway.guard.policy.DEFAULT_POLICY`)."""
        policy = flow.policy if flow.policy is not None else self.policy
        if policy is None:
            policy = flow.default_policy
        if policy is not None and flow.deny_unlisted_mutating is not None:
            policy = policy.with_options(deny_unlisted_mutating=flow.deny_unlisted_mutating)
        return policy

    def budget_of_tenant(self, tenant_id: str) -> Budget | None:
        """The budget that limits all of ``tenant_id``'s runs (None: no limit)."""
        if isinstance(self.tenant_budget, TenantBudgets):
            return self.tenant_budget.for_tenant(tenant_id)
        return self.tenant_budget

    def has_budget(self, flow: Governed) -> bool:
        """True when any budget (the flow's, the engine's or a tenant's) may apply."""
        return (flow.budget is not None or self.budget is not None
                or self.tenant_budget is not None)

    def shadow_for(self, flow: Governed) -> bool:
        """True when ``flow``'s mutating calls are journaled but not executed."""
        return self.shadow if flow.shadow is None else flow.shadow

    async def decide(
        self, flow: Governed, store: EngineStore, s: RunState, call: CallIntent, now: float,
    ) -> Decision:
        """The policy's decision on ``call`` now.

        A call whose money cannot be read is denied, with or without a policy
        (:attr:`CallIntent.refusal`). The tenant's usage is read (from the store, off the event
        loop) only for a decision that may match on ``tenant.*`` counters. The subject's consent
        is read from the consent store now, for the purposes that the rules that may apply to the
        tool require consent for (none: no read). So a consent withdrawn after the run started
        stops its very next such call.

        Args:
            flow: The run's flow, whose policy applies.
            store: Where the tenant's usage and the subject's consent are read.
            s: The run's state.
            call: The call's facts.
            now: The time of the decision.
        """
        policy = self.policy_for(flow)
        money, t = call.money, call.tool
        if policy is None:
            if isinstance(money, Unreadable):
                return Decision("deny", None, "none", str(money))
            return declared_approval(Decision("allow", None, "none", "no policy configured"),
                                     call.labels)
        tenant = None
        # A policy that cannot say which counters it reads may read any.
        reads = getattr(policy, "reads_counters", None)
        if reads is None or reads(t.name, "tenant."):
            tenant = await self.tenant_usage(store, s.tenant_id, _day_start(now))
        purposes = getattr(policy, "consent_purposes", None)
        wanted = list(purposes(t.name)) if purposes is not None else []
        consents: Mapping[str, Consent] = {}
        if wanted and s.subject is not None:
            consents = await run_io(store, store.current_consents, s.tenant_id, s.subject,
                                    wanted)
        ctx = PolicyContext(
            tenant_id=s.tenant_id, principal=s.principal, roles=frozenset(s.roles),
            environment=self.environment, flow=s.flow, tool=t.name, mutating=t.mutating,
            irreversible=t.irreversible, permissions=frozenset(t.permissions),
            args=call.policy_args, labels=call.labels, amount=None,
            counters=Counters(s, tenant), subject=s.subject, purpose=s.purpose,
            consents=consents,
        )
        return decide_with_money(policy, ctx, money)

    async def decide_finish(
        self, flow: Governed, store: EngineStore, s: RunState, args: Mapping[str, Any],
        labels: frozenset[str], now: float,
    ) -> tuple[Policy, Decision] | None:
        """The policy's decision on the run's finish.

        These are the rules of :attr:`~underway.guard.policy.Policy.at_finish`, as on a read-only
        call of :data:`~underway.guard.policy.FINISH`.

        Args:
            flow: The run's flow, whose policy applies.
            store: Where the tenant's usage and the subject's consent are read.
            s: The run's state.
            args: The run's result, and where the untrusted content that shaped it came from.
            labels: The finish's data labels.
            now: The time of the decision.

        Returns:
            The policy and its decision; None when no rule names the finish.
        """
        policy = self.policy_for(flow)
        # A policy that cannot say which rules name the finish names none.
        finish = getattr(policy, "at_finish", None)
        if policy is None or finish is None:
            return None
        tenant = None
        if finish.reads_counters(FINISH, "tenant."):
            tenant = await self.tenant_usage(store, s.tenant_id, _day_start(now))
        consents: Mapping[str, Consent] = {}
        wanted = list(finish.consent_purposes(FINISH))
        if wanted and s.subject is not None:
            consents = await run_io(store, store.current_consents, s.tenant_id, s.subject,
                                    wanted)
        ctx = PolicyContext(
            tenant_id=s.tenant_id, principal=s.principal, roles=frozenset(s.roles),
            environment=self.environment, flow=s.flow, tool=FINISH, mutating=False,
            irreversible=False, permissions=frozenset(), args=args, labels=labels,
            amount=None, counters=Counters(s, tenant), subject=s.subject, purpose=s.purpose,
            consents=consents,
        )
        return policy, finish.evaluate(ctx)

    async def over_budget(
        self, flow: Governed, store: EngineStore, s: RunState, key: str, pending: Usage,
        now: float, *, unpriced: Mapping[str, str] | None = None,
        in_flight: Usage | None = None,
    ) -> tuple[Budget, Exceeded] | None:
        """The first budget (run, then tenant) call ``key`` would cross, if any; otherwise
        the call's ``pending`` usage is reserved against the tenant's budget.

        The run's budget is checked against its folded journal plus ``in_flight``, what the
        calls its activation admitted and not yet settled may spend: a run has one
        activation at a time, and calls a step runs at once count before any ends. The
        tenant's is a conditional write to the store's budget ledger
        (:meth:`~underway.store.budgets.BudgetStore.reserve_budget`), atomic across every
        worker, so no interleaving crosses it. ``unpriced`` says, per metric (``tokens``,
        ``cost_usd``), why the call cannot bound it: a budget limiting that metric refuses it.

        Args:
            flow: The run's flow (its budget overrides the engine's).
            store: Where the tenant's ledger is.
            s: The run's folded state.
            key: The call's idempotency key, which names its hold.
            pending: What the call adds, at most.
            now: The guard's time (the tenant's day is the UTC day of it).
            unpriced: Why each metric the call cannot bound has no bound.
            in_flight: What the run's unsettled calls may still spend.
        """
        budget = flow.budget if flow.budget is not None else self.budget
        if budget is not None:
            spent = run_usage(s) if in_flight is None else run_usage(s).add(in_flight)
            found = _unpriced(budget, "run", unpriced) or check(
                budget, spent, now=now, scope="run", pending=pending)
            if found:
                return budget, found[0]
        tenant_budget = self.budget_of_tenant(s.tenant_id)
        if tenant_budget is None:
            return None
        found = _unpriced(tenant_budget, "tenant", unpriced)
        if found:
            return tenant_budget, found[0]
        since = _day_start(now)
        amounts, limits = ledger_terms(tenant_budget, pending)
        outcome = await run_io(store, store.reserve_budget, s.tenant_id, since, key,
                               amounts, limits)
        if outcome == UNSEEDED:
            # The tenant's first call today: the day starts from what the journal holds.
            seen = TenantUsage(s.tenant_id, since=since, codec=self.codec)
            baseline, _ = ledger_terms(None, await run_io(store, seen.refresh, store))
            outcome = await run_io(store, functools.partial(
                store.reserve_budget, baseline=baseline), s.tenant_id, since, key,
                amounts, limits)
        if isinstance(outcome, Refused):
            return tenant_budget, Exceeded(outcome.metric, outcome.limit, outcome.used,
                                           "tenant")
        return None

    async def settle(
        self, store: EngineStore, tenant_id: str, key: str, spent: Usage | None
    ) -> None:
        """Settle call ``key``'s hold on the tenant's budget to what it ``spent`` (None:
        release it: the journal says the call did not take effect). Called only once the
        outcome is committed; a call whose outcome is unknown keeps its hold.

        Args:
            store: Where the tenant's ledger is.
            tenant_id: The run's tenant.
            key: The call's idempotency key.
            spent: What the call spent (None: nothing).
        """
        if self.tenant_budget is None or self.budget_of_tenant(tenant_id) is None:
            return
        amounts = {} if spent is None else ledger_terms(None, spent)[0]
        await run_io(store, store.settle_budget, tenant_id, key, amounts)

    async def tenant_usage(self, store: CoreStore, tenant_id: str, since: float) -> Usage:
        """The tenant's usage since ``since``, derived from the journal and cached briefly.

        At most every ``tenant_usage_ttl`` seconds the runs are listed again, and only the events
        appended since are read (:class:`~underway.guard.budgets.TenantUsage`). The reads run on
        the store's I/O threads.

        Args:
            store: The store holding the tenant's journals.
            tenant_id: The tenant.
            since: The start of the tenant's day (epoch seconds, 00:00 UTC).
        """
        kept = self._usage_cache.get(tenant_id)
        if kept is None or kept.tracker.since != since:
            # A new day: the previous day's counts are of no more use.
            kept = _Kept(TenantUsage(tenant_id, since=since, codec=self.codec))
            self._usage_cache[tenant_id] = kept
        usage = kept.usage
        if usage is None or time.monotonic() - kept.checked >= self.tenant_usage_ttl:
            usage = await run_io(store, kept.refresh, store, self.tenant_usage_ttl)
        return usage


@dataclass(slots=True)
class _Kept:
    """A tenant's usage as last read, and the tracker that reads only what is new."""

    tracker: TenantUsage
    checked: float = float("-inf")
    """When the last read began (monotonic seconds)."""
    usage: Usage | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    """One read at a time: activations of the tenant that ask at once share one."""

    def refresh(self, store: CoreStore, ttl: float) -> Usage:
        """The usage, read again unless a read that began less than ``ttl`` seconds ago
        (while this one waited for it) has it."""
        with self.lock:
            began = time.monotonic()
            if self.usage is not None and began - self.checked < ttl:
                return self.usage
            self.usage = self.tracker.refresh(store)
            self.checked = began
            return self.usage


def _unpriced(budget: Budget, scope: Scope, why: Mapping[str, str] | None) -> list[Exceeded]:
    """A refusal when ``budget`` limits a metric (cost or tokens) the call cannot bound."""
    for metric, reason in (why or {}).items():
        cap = getattr(budget, metric)
        if cap is not None:
            return [Exceeded(metric, float(cap), float(cap), scope, reason=reason)]
    return []


def decide_with_money(
    policy: Policy, ctx: PolicyContext, money: Money | Unreadable | None
) -> Decision:
    """``policy``'s decision on the call ``ctx`` describes, which moves ``money``.

    The worker and ``underway policy explain`` both decide here.

    Args:
        policy: The policy.
        ctx: The call, as the policy sees it.
        money: The money the call moves (None: none).

    Returns:
        A deny naming the argument when the money cannot be read. Otherwise the policy's
        decision, with ``ctx.amount`` set to the money's exposure in its currency (the size
        of the amount, whichever way it moves).
    """
    if isinstance(money, Unreadable):
        return Decision("deny", None, policy.version, str(money))
    amount = None if money is None else Amount(money.exposure, money.currency)
    return declared_approval(policy.evaluate(dataclasses.replace(ctx, amount=amount)),
                             ctx.labels)


class Counters(Mapping[str, float]):
    """Counters a policy may match on: ``run.*`` from the run's journal, computed on first
    use, and ``tenant.*.today`` from ``tenant``, the tenant's usage since 00:00 UTC, read
    beforehand for a decision that may match on them (reading them without it fails the
    decision closed: a policy's evaluation does no I/O)."""

    _RUN = ("tool_calls", "model_calls", "tokens", "cost_usd", "messages")

    def __init__(self, s: RunState, tenant: Usage | None) -> None:
        self._s, self._usage = s, tenant
        self._values: dict[str, float] | None = None
        self._tenant: dict[str, float] | None = None

    def _run(self) -> dict[str, float]:
        if self._values is None:
            self._values = _usage_counters("run", run_usage(self._s), "")
        return self._values

    def _tenant_counters(self) -> dict[str, float]:
        if self._tenant is None:
            if self._usage is None:
                raise RuntimeError("the tenant's usage was not read for this decision")
            self._tenant = _usage_counters("tenant", self._usage, ".today")
        return self._tenant

    def __getitem__(self, name: str) -> float:
        table = self._tenant_counters() if name.startswith("tenant.") else self._run()
        return table[name]

    def __iter__(self) -> Iterator[str]:
        yield from self._run()
        yield from self._tenant_counters()

    def __len__(self) -> int:
        return len(self._run()) + len(self._tenant_counters())


def _usage_counters(scope: str, u: Usage, suffix: str) -> dict[str, float]:
    out = {
        f"{scope}.tool_calls{suffix}": float(u.tool_calls),
        f"{scope}.model_calls{suffix}": float(u.model_calls),
        f"{scope}.tokens{suffix}": float(u.tokens_in + u.tokens_out),
        f"{scope}.cost_usd{suffix}": float(u.cost_usd),
        f"{scope}.messages{suffix}": float(u.messages),
    }
    for cur, value in u.money.items():
        out[f"{scope}.money.{cur}{suffix}"] = float(value)
    return out


def _day_start(now: float) -> float:
    d = datetime.fromtimestamp(now, UTC)
    return datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()
