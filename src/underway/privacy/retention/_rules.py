"""Retention rules: how long a finished run's payloads are kept, per final status, for every
tenant and flow, with overrides per flow, per tenant and per flow of a tenant.

A period is looked up, for a run of ``flow`` in ``tenant`` that ended ``status``, in the
first of these that names one: the tenant's rule for the flow, the tenant's rule, the
flow's rule, the default. None found: the run is never purged — no rule means no purge.
A period of ``math.inf`` (``"never"`` in ``underway.toml``) keeps the runs it covers and
stops the lookup there, so a tenant can keep what the default would purge.

Only ``completed``, ``failed`` and ``cancelled`` runs are ever purged: a ``dead`` run
waits for an operator to resume it, so it is not finished (and neither is a waiting or
escalated run). What a purge keeps of a run (its skeleton) is kept until a second, optional
period, ``forget_after``, is over: then the run is forgotten (its skeleton deleted, a
line in the forget log kept). ``forget_after`` is looked up like the periods (tenant's
flow, tenant, flow, default), counts from when the run ended too, and only ever applies
to runs a purge left a skeleton of. None said: skeletons are kept for good.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...errors import ConfigurationError

STATUSES = ("completed", "failed", "cancelled")
"""The final statuses, each of which may have its own period."""

DAY = 86_400.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY, "y": 365 * DAY}
_PERIOD = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdwy])")


def parse_period(text: str) -> float:
    """Seconds in a period written as a number and a unit — ``45s``, ``30m``, ``12h``,
    ``90d``, ``4w``, ``7y`` (a year is 365 days) — or ``never`` (``math.inf``)."""
    found = _PERIOD.fullmatch(text.strip().lower())
    if text.strip().lower() == "never":
        return math.inf
    if found is None:
        raise ConfigurationError(
            f"{text!r} is not a period: write a number and a unit (s, m, h, d, w or y), "
            "such as \"90d\" or \"7y\", or \"never\"")
    seconds = float(found[1]) * _UNITS[found[2]]
    if not seconds > 0:
        raise ConfigurationError(f"{text!r} is no period: it must be longer than nothing")
    return seconds


def format_period(seconds: float) -> str:
    """A period as :func:`parse_period` reads it (the largest unit that divides it)."""
    if math.isinf(seconds):
        return "never"
    for unit in ("y", "w", "d", "h", "m"):
        n = seconds / _UNITS[unit]
        if n >= 1 and n == int(n):
            return f"{int(n)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True, slots=True, kw_only=True)
class Periods:
    """How long finished runs are kept, per final status, in seconds from the time they
    ended (None: not said here, look further; ``math.inf``: kept)."""

    completed: float | None = None
    failed: float | None = None
    cancelled: float | None = None
    forget_after: float | None = None
    """When a purged run's skeleton is deleted, in seconds from the time it ended (None:
    not said here; ``math.inf``: kept)."""

    def __post_init__(self) -> None:
        for status in (*STATUSES, "forget_after"):
            value = getattr(self, status)
            if value is not None and not value > 0:
                raise ConfigurationError(
                    f"a retention period must be positive, not {value!r} ({status})")

    def of(self, status: str) -> float | None:
        """The period for runs that ended ``status``, if this says one."""
        return getattr(self, status) if status in STATUSES else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Rules(Periods):
    """Periods, and the periods of named flows (which override them)."""

    flows: Mapping[str, Periods] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rule:
    """The period that applies to a run, and where it was said (``retention.failed``,
    ``retention.tenants.acme.flows.kyc.completed``)."""

    period: float
    source: str

    def describe(self) -> str:
        """``source = period``, as the sweep log and the CLI show it."""
        return f"{self.source} = {format_period(self.period)}"


DEFAULT_EVERY = 3600.0
"""Seconds between a worker's sweeps unless told otherwise."""

BLOB_GRACE = 2 * DAY + 3600.0
"""The shortest time since a blob was last written before the collector may delete it:
longer than a journal takes a blob it wrote to be stored without sending it again
(:data:`~underway.journal.KNOWN_FOR`, a day) plus the time an append that sends a blob
again leaves its mark unchanged (:data:`~underway.store.retention.BLOB_REFRESH`, a day),
plus an hour."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention(Rules):
    """Retention rules for every tenant (the periods, ``flows``) and each named tenant's
    own (``tenants``), looked up as the module says; ``every``: seconds between a worker's
    sweeps; ``blob_grace``: how long a blob must have gone unwritten before the collector
    may delete it (see :data:`BLOB_GRACE`; shorten it only where no worker runs).

    ``Retention()`` purges nothing."""

    tenants: Mapping[str, Rules] = field(default_factory=dict)
    every: float = DEFAULT_EVERY
    blob_grace: float = BLOB_GRACE

    def __post_init__(self) -> None:
        Periods.__post_init__(self)
        if not self.every > 0:
            raise ConfigurationError(f"retention every must be positive seconds, not "
                                     f"{self.every!r}")
        if self.blob_grace < 0:
            raise ConfigurationError(f"blob_grace must be 0 or more seconds, not "
                                     f"{self.blob_grace!r}")

    def rule(self, tenant_id: str, flow: str, status: str) -> Rule | None:
        """The period for a run, and where it is said.

        Args:
            tenant_id: The run's tenant.
            flow: The run's flow.
            status: How the run ended.

        Returns:
            The rule, or None when nothing says one (the run is kept).
        """
        for periods, where in self._places(tenant_id, flow):
            period = None if periods is None else periods.of(status)
            if period is not None:
                return None if math.isinf(period) else Rule(period, f"{where}.{status}")
        return None

    def _places(self, tenant_id: str, flow: str) -> list[tuple[Periods | None, str]]:
        """Where a run's periods may be said, the most specific first, with their names."""
        tenant = self.tenants.get(tenant_id)
        places: list[tuple[Periods | None, str]] = []
        if tenant is not None:
            places.append((tenant.flows.get(flow), f"retention.tenants.{tenant_id}.flows.{flow}"))
            places.append((tenant, f"retention.tenants.{tenant_id}"))
        places.append((self.flows.get(flow), f"retention.flows.{flow}"))
        places.append((self, "retention"))
        return places

    def named_flows(self, tenant_id: str) -> set[str]:
        """The flows that have rules of their own for ``tenant_id``."""
        tenant = self.tenants.get(tenant_id)
        return set(self.flows) | (set(tenant.flows) if tenant is not None else set())

    def forget_rule(self, tenant_id: str, flow: str) -> Rule | None:
        """When a purged run of ``flow`` in ``tenant_id`` is forgotten, and where that is
        said; None when nothing says it (the skeleton is kept)."""
        for periods, where in self._places(tenant_id, flow):
            period = None if periods is None else periods.forget_after
            if period is not None:
                return None if math.isinf(period) else Rule(period, f"{where}.forget_after")
        return None

    @property
    def forgets(self) -> bool:
        """True when some rule says a ``forget_after`` period."""
        said: list[Periods] = [self, *self.flows.values()]
        for tenant in self.tenants.values():
            said += [tenant, *tenant.flows.values()]
        return any(p.forget_after is not None and not math.isinf(p.forget_after)
                   for p in said)

    @property
    def empty(self) -> bool:
        """True when no rule says any period: nothing is ever purged."""
        said: list[Periods] = [self, *self.flows.values()]
        for tenant in self.tenants.values():
            said += [tenant, *tenant.flows.values()]
        return all(p.of(s) is None for p in said for s in STATUSES)
