"""Route each model request to an adapter by its task kind, and budget each route.

A :class:`ModelRouter` is itself a model: hand it to ``ctx.model`` and it sends each request
to the adapter its ``kind`` names (``"classify"`` to a small model, ``"plan"`` to a large
one, anything else to the default). The reply names the concrete model that answered, and
the engine journals it.

Budgets are not counted in the router, which forgets everything when the process ends.
They are computed from the run's journal: :func:`route_usage` totals the ``ModelResponded``
events by route (read from each journaled request's ``kind``), and :func:`budget_breaches`
compares the totals with each route's :class:`RouteBudget`. Both are pure functions, so the
answer is the same in every worker and after every restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..effects import Emit, Model, ModelQuote, ModelReply
from ..errors import ConfigurationError, UnderwayError
from ..events import JSON

__all__ = [
    "DEFAULT_ROUTE",
    "BudgetBreach",
    "ModelRouter",
    "RouteBudget",
    "RouteBudgetExceeded",
    "RouteUsage",
    "budget_breaches",
    "route_usage",
]

DEFAULT_ROUTE = "default"
"""The route of every request whose kind has no route of its own."""

_TOLERANCE = 1e-9
"""Relative slack so that float sums such as 0.1 + 0.2 reach a limit of 0.3."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteBudget:
    """Limits for one route over one run: model calls, tokens (in + out) and USD.
    ``None`` means no limit."""

    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_tokens", "max_cost_usd"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigurationError(f"RouteBudget {name} must not be negative, not {value}")


@dataclass(frozen=True, slots=True)
class RouteUsage:
    """What one route has used so far."""

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        """Input and output tokens together."""
        return self.tokens_in + self.tokens_out

    def plus(self, tokens_in: int, tokens_out: int, cost_usd: float) -> RouteUsage:
        """This usage and one more call.

        Args:
            tokens_in: The call's input tokens.
            tokens_out: The call's output tokens.
            cost_usd: The call's cost.
        """
        return RouteUsage(
            self.calls + 1, self.tokens_in + tokens_in, self.tokens_out + tokens_out,
            self.cost_usd + cost_usd,
        )


@dataclass(frozen=True, slots=True)
class BudgetBreach:
    """A route that has reached one of its limits: it may take no further calls."""

    route: str
    limit: Literal["calls", "tokens", "cost_usd"]
    allowed: float
    used: float

    def __str__(self) -> str:
        return f"route {self.route!r} used {self.used:g} of {self.allowed:g} {self.limit}"


class RouteBudgetExceeded(UnderwayError):
    """A model call was refused because its route's budget is spent.

    ``breaches`` lists each limit reached.
    """

    def __init__(self, breaches: list[BudgetBreach]) -> None:
        super().__init__(
            "model budget spent: " + "; ".join(str(b) for b in breaches)
            + " (raise the RouteBudget or route the task elsewhere)"
        )
        self.breaches = breaches


def route_usage(
    events: Iterable[Any], route_of: Callable[[str], str] = lambda kind: kind
) -> dict[str, RouteUsage]:
    """Usage per route from a run's journaled ``ModelResponded`` events.

    ``events`` may be the whole journal: event objects or their JSON (dicts); other event
    types are skipped. A dict may name its ``route`` outright; otherwise the route is
    ``route_of(kind)``, with ``kind`` read from the journaled request (``"default"`` when
    absent).
    """
    usage: dict[str, RouteUsage] = {}
    for raw in events:
        e = raw.model_dump(mode="json") if hasattr(raw, "model_dump") else raw
        if not isinstance(e, Mapping) or e.get("type", "ModelResponded") != "ModelResponded":
            continue
        route = e.get("route")
        if not isinstance(route, str):
            request = e.get("request")
            kind = request.get("kind") if isinstance(request, Mapping) else None
            route = route_of(kind if isinstance(kind, str) else DEFAULT_ROUTE)
        usage[route] = usage.get(route, RouteUsage()).plus(
            int(e.get("tokens_in", 0)), int(e.get("tokens_out", 0)),
            float(e.get("cost_usd", 0.0)),
        )
    return usage


def budget_breaches(
    usage: Mapping[str, RouteUsage], budgets: Mapping[str, RouteBudget]
) -> list[BudgetBreach]:
    """Every limit of ``budgets`` that ``usage`` has reached (used >= allowed).

    A reached limit refuses the next call: a route with ``max_calls=3`` takes three calls,
    and one whose tokens or cost have reached the limit takes no more, since what a call
    will spend is known only after it ran.
    """
    out: list[BudgetBreach] = []
    for route, budget in budgets.items():
        used = usage.get(route, RouteUsage())
        checks: list[tuple[Literal["calls", "tokens", "cost_usd"], float | None, float]] = [
            ("calls", budget.max_calls, used.calls),
            ("tokens", budget.max_tokens, used.tokens),
            ("cost_usd", budget.max_cost_usd, used.cost_usd),
        ]
        out.extend(
            BudgetBreach(route, limit, allowed, spent)
            for limit, allowed, spent in checks
            if allowed is not None and spent >= allowed - _TOLERANCE * max(1.0, allowed)
        )
    return out


class ModelRouter:
    """A model that sends each request to the adapter its ``kind`` routes to.

    Check the budgets with :meth:`breaches` against the run's journal.

    Args:
        adapters: The models to choose from, each known by its ``name``.
        routes: Maps a task kind to an adapter name.
        default: Names the adapter for every other kind.
        budgets: Maps a route (a kind in ``routes``, or ``"default"``) to its
            :class:`RouteBudget`.
        name: The router's name.
    """

    def __init__(
        self,
        adapters: Iterable[Model],
        routes: Mapping[str, str],
        *,
        default: str,
        budgets: Mapping[str, RouteBudget] | None = None,
        name: str = "router",
    ) -> None:
        self.name = name
        self.adapters: dict[str, Model] = {}
        for adapter in adapters:
            if adapter.name in self.adapters:
                raise ConfigurationError(f"two adapters are named {adapter.name!r}")
            self.adapters[adapter.name] = adapter
        known = ", ".join(sorted(self.adapters)) or "none"
        if DEFAULT_ROUTE in routes:
            raise ConfigurationError(
                f"routes must not contain {DEFAULT_ROUTE!r}: name its adapter with default="
            )
        for kind, target in {**routes, DEFAULT_ROUTE: default}.items():
            if target not in self.adapters:
                raise ConfigurationError(
                    f"route {kind!r} names adapter {target!r}, which is not one of: {known}"
                )
        self.routes = dict(routes)
        self.default = default
        self.budgets = dict(budgets or {})
        unknown = sorted(set(self.budgets) - set(self.routes) - {DEFAULT_ROUTE})
        if unknown:
            raise ConfigurationError(
                f"budgets for unknown routes {', '.join(map(repr, unknown))}; routes are: "
                + ", ".join(sorted([*self.routes, DEFAULT_ROUTE]))
            )

    def route(self, kind: str) -> str:
        """The route a request of this kind takes."""
        return kind if kind in self.routes else DEFAULT_ROUTE

    def adapter_for(self, kind: str) -> Model:
        """The adapter that answers requests of this kind."""
        return self.adapters[self.routes.get(kind, self.default)]

    def quote(self, request: JSON) -> ModelQuote | None:
        """The quote of the adapter ``request``'s kind routes to (None: it gives none)."""
        kind = request.get("kind", "default") if isinstance(request, dict) else "default"
        quote = getattr(self.adapter_for(str(kind)), "quote", None)
        return None if quote is None else quote(request)

    async def complete(self, request: JSON) -> ModelReply:
        """Send ``request`` to the adapter its ``kind`` routes to; the reply names the
        concrete model that answered."""
        return await self._routed(request).complete(request)

    async def stream(self, request: JSON, emit: Emit) -> ModelReply:
        """:meth:`complete`, streamed by the adapter its ``kind`` routes to (whole, with
        no deltas, when that adapter cannot stream)."""
        adapter = self._routed(request)
        streams = getattr(adapter, "stream", None)
        return await (streams(request, emit) if streams is not None
                      else adapter.complete(request))

    def _routed(self, request: JSON) -> Model:
        kind = request.get("kind", DEFAULT_ROUTE) if isinstance(request, dict) else DEFAULT_ROUTE
        if not isinstance(kind, str):
            raise ConfigurationError(f"request kind must be a string, not {kind!r}")
        return self.adapter_for(kind)

    def usage(self, events: Iterable[Any]) -> dict[str, RouteUsage]:
        """Usage per route from a run's journal (see :func:`route_usage`)."""
        return route_usage(events, self.route)

    def breaches(self, events: Iterable[Any], kind: str | None = None) -> list[BudgetBreach]:
        """The budget limits a run's journal shows reached: for the route of ``kind``, or for
        every route when ``kind`` is ``None``. Empty when another call may go ahead."""
        budgets = self.budgets if kind is None else {
            r: b for r, b in self.budgets.items() if r == self.route(kind)
        }
        return budget_breaches(self.usage(events), budgets)

    def ensure_within_budget(self, events: Iterable[Any], kind: str) -> None:
        """Raise :class:`RouteBudgetExceeded` if a request of ``kind`` may not be sent."""
        found = self.breaches(events, kind)
        if found:
            raise RouteBudgetExceeded(found)

    def __repr__(self) -> str:
        return f"ModelRouter(name={self.name!r}, routes={self.routes!r}, default={self.default!r})"
