"""Budgets: limits on what a run or a tenant may spend, and usage derived from the journal.

A :class:`Budget` holds limits (``None``: unlimited); :class:`TenantBudgets` gives each
tenant its own, with a default for the others; a :class:`Usage` is what was spent;
:func:`check` says which limits a pending action would cross. Usage is never kept
anywhere but the journal: a run's usage is its folded state (:meth:`Usage.from_state`) and
a tenant's is :func:`tenant_usage`, so both survive restarts and can be recomputed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from math import fsum
from typing import Literal

from .. import events as ev
from ..codec import Codec
from ..errors import ConfigurationError, KeyUnavailable
from ..events import JSON
from ..journal import Journal
from ..journal.state import RunState
from ..models.routing import BudgetBreach, ModelRouter, RouteUsage, budget_breaches
from ..store.base import FINAL, CoreStore
from ..store.budgets import over as _over

__all__ = [
    "Budget", "Exceeded", "TenantBudgets", "TenantUsage", "Usage", "check", "ledger_terms",
    "route_breach", "run_usage", "tenant_usage", "usage_of",
]

Scope = Literal["run", "tenant"]

_ALL_RUNS = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits on what a run (or a tenant) may spend; ``None`` means unlimited.

    ``tokens`` counts input and output tokens together; ``wall_clock_s`` is the time since
    the run started; ``money`` limits the amounts moved per currency (``{"INR": 50000}``,
    counted whichever way the money moves), and a currency it does not name may not be
    moved at all (give it ``Decimal("Infinity")`` to leave it unlimited); without
    ``money`` no currency is limited. ``on_exceed`` says what
    the engine does when a call would cross a limit: ``escalate`` to a person or ``fail``
    the run.
    """

    tokens: int | None = None
    cost_usd: float | None = None
    model_calls: int | None = None
    tool_calls: int | None = None
    wall_clock_s: float | None = None
    messages: int | None = None
    money: Mapping[str, Decimal | float] | None = None
    on_exceed: Literal["escalate", "fail"] = "escalate"

    def __post_init__(self) -> None:
        for name in ("tokens", "cost_usd", "model_calls", "tool_calls", "wall_clock_s",
                     "messages"):
            _check_limit(getattr(self, name), name)
        if self.on_exceed not in ("escalate", "fail"):
            raise ConfigurationError(
                f"budget on_exceed must be 'escalate' or 'fail', not {self.on_exceed!r}"
            )
        if self.money is not None:
            if not isinstance(self.money, Mapping):
                raise ConfigurationError(
                    f"budget money must map currency codes to limits, not {self.money!r}"
                )
            money: dict[str, Decimal | float] = {}
            for cur, limit in self.money.items():
                if not isinstance(cur, str) or not cur.strip():
                    raise ConfigurationError(f"budget money: {cur!r} is not a currency code")
                _check_limit(limit, f"money.{cur}")
                money[cur.strip().upper()] = limit
            object.__setattr__(self, "money", money)


@dataclass(frozen=True, slots=True)
class TenantBudgets:
    """A budget per tenant (``Engine(tenant_budget=TenantBudgets(...))``): a tenant named
    in ``tenants`` has exactly that budget, not the default's limits merged with it; every
    other tenant has ``default`` (``None``: no limit). Each limits what all of the tenant's
    runs spend since 00:00 UTC, like a single :class:`Budget` given for every tenant."""

    default: Budget | None = None
    tenants: Mapping[str, Budget] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default is not None and not isinstance(self.default, Budget):
            raise ConfigurationError(f"the default tenant budget must be a Budget, not "
                                     f"{self.default!r}")
        for tenant, budget in self.tenants.items():
            if not isinstance(tenant, str) or not tenant:
                raise ConfigurationError(f"tenant budgets: {tenant!r} is not a tenant id")
            if not isinstance(budget, Budget):
                raise ConfigurationError(
                    f"the budget of tenant {tenant!r} must be a Budget, not {budget!r}")
        object.__setattr__(self, "tenants", dict(self.tenants))

    def for_tenant(self, tenant_id: str) -> Budget | None:
        """The budget of ``tenant_id``: its own, else the default."""
        return self.tenants.get(tenant_id, self.default)


def _check_limit(value: object, name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal) or not (
        value >= 0
    ):
        raise ConfigurationError(
            f"budget {name} must be a number of 0 or more (or None for no limit), not {value!r}"
        )


@dataclass(slots=True)
class Usage:
    """What a run or a tenant spent. ``money`` maps currency codes to amounts moved;
    ``started_at`` (epoch seconds) is when the run started, for the wall-clock limit."""

    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0
    tool_calls: int = 0
    messages: int = 0
    money: dict[str, float] = field(default_factory=dict)
    started_at: float | None = None

    @property
    def tokens(self) -> int:
        """Input and output tokens together."""
        return self.tokens_in + self.tokens_out

    def add(self, other: Usage) -> Usage:
        """A new usage: this one plus ``other`` (the earlier ``started_at`` is kept)."""
        money = dict(self.money)
        for cur, amount in other.money.items():
            money[cur] = money.get(cur, 0.0) + amount
        starts = [t for t in (self.started_at, other.started_at) if t is not None]
        return Usage(
            tokens_in=self.tokens_in + other.tokens_in,
            tokens_out=self.tokens_out + other.tokens_out,
            cost_usd=self.cost_usd + other.cost_usd,
            model_calls=self.model_calls + other.model_calls,
            tool_calls=self.tool_calls + other.tool_calls,
            messages=self.messages + other.messages,
            money=money,
            started_at=min(starts) if starts else None,
        )

    @classmethod
    def from_state(cls, state: RunState) -> Usage:
        """What a run spent, read from its folded state (``tool_calls`` counts mutating
        intents and read-only calls alike)."""
        created = float(getattr(state, "created_at", 0.0) or 0.0)
        return cls(
            tokens_in=int(getattr(state, "tokens_in", 0)),
            tokens_out=int(getattr(state, "tokens_out", 0)),
            cost_usd=float(getattr(state, "cost_usd", 0.0)),
            model_calls=int(getattr(state, "model_calls", 0)),
            tool_calls=int(getattr(state, "tool_calls", 0)) + int(getattr(state, "read_calls", 0)),
            messages=int(getattr(state, "messages", 0)),
            money={str(k): float(v) for k, v in (getattr(state, "money", None) or {}).items()},
            started_at=created or None,
        )


@dataclass(frozen=True, slots=True)
class Exceeded:
    """One limit that is, or would be, crossed: ``used`` includes the pending action.
    ``reason`` says why an action that cannot be measured is refused (its price unknown)."""

    metric: str
    limit: float
    used: float
    scope: Scope
    reason: str | None = None

    def __str__(self) -> str:
        if self.reason is not None:
            return f"{self.scope} budget {self.metric}: {self.reason}"
        return (
            f"{self.scope} budget {self.metric}: {self.used:g} would exceed "
            f"the limit {self.limit:g}"
        )


def check(
    budget: Budget,
    usage: Usage,
    *,
    now: float,
    scope: Scope = "run",
    pending: Usage | None = None,
) -> list[Exceeded]:
    """The limits of ``budget`` that ``usage`` plus ``pending`` would cross.

    An action that would cross a limit is stopped before it runs. Reaching a limit exactly is
    allowed; only going past it is reported.

    Args:
        budget: The limits.
        usage: What was spent so far.
        now: The time now. Wall-clock time is ``now - usage.started_at``; it is not checked
            when ``started_at`` is None.
        scope: Whose budget it is, the run's or the tenant's; each limit crossed says so.
        pending: What the action about to be taken adds: one tool call, one message, the
            amount it moves.
    """
    total = usage if pending is None else usage.add(pending)
    found: list[Exceeded] = []

    def limit(metric: str, cap: float | Decimal | None, used: float) -> None:
        if cap is not None and _over(float(used), float(cap)):
            found.append(Exceeded(metric, float(cap), float(used), scope))

    limit("tokens", budget.tokens, total.tokens)
    limit("cost_usd", budget.cost_usd, total.cost_usd)
    limit("model_calls", budget.model_calls, total.model_calls)
    limit("tool_calls", budget.tool_calls, total.tool_calls)
    limit("messages", budget.messages, total.messages)
    if budget.money is not None:
        for cur, cap in budget.money.items():
            limit(f"money.{cur}", cap, total.money.get(cur, 0.0))
        for cur, amount in (pending.money if pending is not None else {}).items():
            # A money budget names every currency it allows: one it does not name has
            # no room, so a call cannot slip past the limits by paying in another.
            if cur not in budget.money and amount:
                limit(f"money.{cur}", 0.0, total.money.get(cur, 0.0))
    if budget.wall_clock_s is not None and usage.started_at is not None:
        limit("wall_clock_s", budget.wall_clock_s, now - usage.started_at)
    return found


def ledger_terms(
    budget: Budget | None, usage: Usage
) -> tuple[dict[str, float], dict[str, float]]:
    """``usage`` and ``budget`` as the ledger's metrics: (amounts, limits).

    Amounts name only what ``usage`` spends. Limits name what ``budget`` caps; with
    ``money`` set, a currency ``usage`` moves that the budget does not name is capped at 0.

    Args:
        budget: The budget whose limits apply (None: no limits).
        usage: What is spent or about to be.
    """
    amounts = {
        "tokens": float(usage.tokens), "cost_usd": usage.cost_usd,
        "model_calls": float(usage.model_calls), "tool_calls": float(usage.tool_calls),
        "messages": float(usage.messages),
        **{f"money.{cur}": float(v) for cur, v in usage.money.items()},
    }
    amounts = {k: v for k, v in amounts.items() if v}
    limits: dict[str, float] = {}
    if budget is not None:
        for metric in ("tokens", "cost_usd", "model_calls", "tool_calls", "messages"):
            cap = getattr(budget, metric)
            if cap is not None:
                limits[metric] = float(cap)
        if budget.money is not None:
            limits.update({f"money.{cur}": float(cap) for cur, cap in budget.money.items()})
            for cur in usage.money:
                limits.setdefault(f"money.{cur}", 0.0)
    return amounts, limits


def run_usage(s: RunState) -> Usage:
    """What run ``s`` has spent, from its folded journal."""
    return Usage(
        tokens_in=s.tokens_in, tokens_out=s.tokens_out, cost_usd=s.cost_usd,
        model_calls=s.model_calls, tool_calls=s.tool_calls + s.read_calls,
        messages=s.messages, money=dict(s.money), started_at=s.created_at,
    )


def usage_of(events: Iterable[ev.RunEvent]) -> Usage:
    """What ``events`` (a run's uncommitted ones) add to a budget."""
    u = Usage()
    for e in events:
        if isinstance(e, ev.ModelResponded):
            u = u.add(Usage(tokens_in=e.tokens_in, tokens_out=e.tokens_out,
                            cost_usd=e.cost_usd, model_calls=1))
        elif isinstance(e, ev.ToolSucceeded | ev.ToolFailed | ev.ToolTimedOut):
            counts = getattr(e, "counts", None) or {}
            u = u.add(Usage(
                tool_calls=1, messages=int(counts.get("messages", 0)),
                money={k[6:]: v for k, v in counts.items() if k.startswith("money.")},
            ))
    return u


def route_breach(
    router: ModelRouter, request: JSON, s: RunState
) -> tuple[str, BudgetBreach] | None:
    """The route a model ``request`` takes and the first limit it has reached.

    The limit is one of the route's :class:`~underway.models.RouteBudget`. Usage is folded
    from the journal.

    Args:
        router: The model router.
        request: The model request.
        s: The run's state.

    Returns:
        The route and the breach, or None when the request may go ahead.
    """
    kind = request.get("kind", "default") if isinstance(request, dict) else "default"
    route = router.route(str(kind))
    if route not in router.budgets:
        return None
    used = RouteUsage()
    for k, u in s.model_usage.items():
        if router.route(k) == route:
            used = RouteUsage(
                used.calls + int(u["calls"]), used.tokens_in + int(u["tokens_in"]),
                used.tokens_out + int(u["tokens_out"]), used.cost_usd + float(u["cost_usd"]),
            )
    found = budget_breaches({route: used}, {route: router.budgets[route]})
    return (route, found[0]) if found else None


def tenant_usage(
    store: CoreStore, tenant_id: str, *, since: float, codec: Codec | None = None
) -> Usage:
    """What the tenant's runs spent at or after ``since``, from the journal.

    It counts events stamped at or after ``since``:

    - model calls with their tokens and cost (``ModelResponded``);
    - tool calls, once per call key at its first ``ToolStarted`` or ``ToolSucceeded`` (retries
      of one call count once);
    - the ``messages`` and ``money.<CUR>`` counts journaled with successful calls.

    ``started_at`` is None: wall-clock limits are per run.

    Cost is O(runs of the tenant) to list them. Add the events of each run that may hold
    events since ``since``. Finished runs last updated before it are skipped. A run whose
    checkpoint predates ``since`` is read from its checkpoint on. To ask again and again,
    keep a :class:`TenantUsage`: it reads only what is new.

    Args:
        store: The store.
        tenant_id: The tenant.
        since: The instant (epoch seconds).
        codec: Decodes the journal; None means the store's.
    """
    return TenantUsage(tenant_id, since=since, codec=codec).refresh(store)


@dataclass(slots=True)
class _Mark:
    """How far a run's journal has been counted."""

    seq: int
    token: int | None
    """The lease token of the run's row when it was read unleased; None: read it again."""
    seen: set[str]
    """Call keys already counted (a call's retries count once)."""


class TenantUsage:
    """A tenant's usage since a fixed instant, kept up to date by :meth:`refresh`.

    The first refresh reads what :func:`tenant_usage` reads. Later ones list the runs and
    read only events appended since. A run whose row is unleased with the lease token it had
    when its events were last read cannot have new events: every append needs a new lease.
    So its journal is not touched. Not thread-safe: one per thread.

    Args:
        tenant_id: The tenant.
        since: The instant (epoch seconds).
        codec: Decodes the journal; None means the store's.
    """

    def __init__(self, tenant_id: str, *, since: float, codec: Codec | None = None) -> None:
        self.tenant_id = tenant_id
        self.since = since
        self.codec = codec
        self._tally = _Tally()
        self._marks: dict[str, _Mark] = {}
        self.events_read = 0
        """Events decoded so far, over every refresh (for tests and benchmarks)."""
        self.encrypted: set[str] = set()
        """Runs whose journals are encrypted and cannot be opened here (no key, or their
        key was destroyed): not counted."""

    def refresh(self, store: CoreStore) -> Usage:
        """Count what was appended since the last refresh; the usage so far."""
        journal = Journal(store, self.codec)
        for row in store.list_runs(self.tenant_id, limit=_ALL_RUNS):
            idle = row.lease_owner is None
            mark = self._marks.get(row.run_id)
            if mark is not None and idle and mark.token == row.lease_token:
                continue
            if mark is None and row.status in FINAL and row.updated_at < self.since:
                # A finished run's row is written with its last event, so it bounds every
                # event: nothing of it counts, now or later (a finished run never resumes).
                self._marks[row.run_id] = _Mark(row.last_seq, row.lease_token, set())
                continue
            try:
                if mark is None:
                    mark = self._start(journal, row.run_id)
                    self._marks[row.run_id] = mark
                self._count(journal, row.run_id, mark)
            except KeyUnavailable:
                self.encrypted.add(row.run_id)
                continue
            self.encrypted.discard(row.run_id)
            mark.token = row.lease_token if idle else None
            if idle and row.status in FINAL:
                mark.seen = set()  # no call of a finished run comes again
        return self._tally.usage()

    def _start(self, journal: Journal, run_id: str) -> _Mark:
        """Where to begin reading a run: its checkpoint, when that predates ``since``."""
        # Only a checkpoint the journal vouches for: an edited one could hide spending.
        snapshot = journal.trusted_checkpoint(self.tenant_id, run_id)
        if snapshot is not None and snapshot.updated_at < self.since:
            # Every event up to the checkpoint predates ``since``; the current step's
            # calls were already counted then, whichever of their events follow.
            return _Mark(snapshot.seq, None, {c.key for c in snapshot.calls if c.key})
        return _Mark(0, None, set())

    def _count(self, journal: Journal, run_id: str, mark: _Mark) -> None:
        t, since = self._tally, self.since
        stored = journal.store.load_events(self.tenant_id, run_id, after_seq=mark.seq)
        for rec in journal.decode(self.tenant_id, run_id, stored):
            self.events_read += 1
            mark.seq = rec.seq
            e, counts = rec.event, rec.at >= since
            if isinstance(e, ev.PayloadPurged):
                self._count_purged(e, mark, counts)
                continue
            if isinstance(e, ev.ToolStarted | ev.ToolSucceeded) and e.key not in mark.seen:
                mark.seen.add(e.key)
                if counts:
                    t.tool_calls += 1
            if not counts:
                continue
            if isinstance(e, ev.ModelResponded):
                t.model_calls += 1
                t.tokens_in += e.tokens_in
                t.tokens_out += e.tokens_out
                t.cost.append(e.cost_usd)
            elif isinstance(e, ev.ToolSucceeded):
                for name, n in (getattr(e, "counts", None) or {}).items():
                    if name == "messages":
                        t.messages += n
                    elif name.startswith("money."):
                        t.money.setdefault(name[6:], []).append(float(n))


    def _count_purged(self, e: ev.PayloadPurged, mark: _Mark, counts: bool) -> None:
        """Count what the skeleton of a purged call or model response still says (its key,
        tokens, cost and what it counted against budgets), as :meth:`_count` counts the
        event itself."""
        t, kept = self._tally, e.kept
        key = kept.get("key")
        if e.event_type in ("ToolStarted", "ToolSucceeded") and isinstance(key, str) \
                and key not in mark.seen:
            mark.seen.add(key)
            if counts:
                t.tool_calls += 1
        if not counts:
            return
        if e.event_type == "ModelResponded":
            t.model_calls += 1
            t.tokens_in += int(_number(kept.get("tokens_in")))
            t.tokens_out += int(_number(kept.get("tokens_out")))
            t.cost.append(_number(kept.get("cost_usd")))
        elif e.event_type == "ToolSucceeded" and isinstance(kept.get("counts"), dict):
            for name, n in kept["counts"].items():
                if name == "messages":
                    t.messages += n
                elif name.startswith("money."):
                    t.money.setdefault(name[6:], []).append(float(n))


def _number(value: object) -> float:
    """A kept number (0 when it is none)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value)


@dataclass(slots=True)
class _Tally:
    tokens_in: int = 0
    tokens_out: int = 0
    cost: list[float] = field(default_factory=list)
    model_calls: int = 0
    tool_calls: int = 0
    messages: float = 0.0
    money: dict[str, list[float]] = field(default_factory=dict)

    def usage(self) -> Usage:
        return Usage(
            tokens_in=self.tokens_in, tokens_out=self.tokens_out, cost_usd=fsum(self.cost),
            model_calls=self.model_calls, tool_calls=self.tool_calls,
            messages=int(self.messages),
            money={cur: fsum(amounts) for cur, amounts in sorted(self.money.items())},
        )
