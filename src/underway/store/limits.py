"""The limits role: queues' concurrency and rate limits, and shared circuit breakers.

:class:`LimitStore` stores them; the rest of this module is how a claim applies a queue's
limits (which of the due runs it may take), which every backend does the same way.

Every backend claims the same way, inside one transaction (which, for a limited queue,
holds the queue's row, so what it counts is current): it reads the limited queues, how
many of their runs are leased and their rate buckets into a :class:`ClaimPlan`; then, pass
by pass, it reads due runs in tenant-fair order — leaving out the queues the plan reports
full and the first activations whose bucket it reports empty — lets the plan admit them,
and leases what was admitted; finally it stores the buckets the plan spent from. The
arithmetic of limits and token buckets lives here once.

A pass can turn candidates down (a queue with one free slot is shown five of its runs);
each pass that does so fills a queue or empties a bucket, which the next pass leaves out,
so a few passes take everything the limits allow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from .records import QueueConfig

__all__ = ["LimitStore"]


class LimitStore(Protocol):
    """Stores queue limits (applied by :meth:`LeaseStore.claim
    <underway.store.leases.LeaseStore.claim>`) and the state of circuit breakers."""

    def set_queue(self, config: QueueConfig) -> None:
        """Create or replace a queue's limits (its rate buckets start full again)."""
        ...

    def list_queues(self) -> list[QueueConfig]:
        """Every configured queue, by name."""
        ...

    def delete_queue(self, name: str) -> bool:
        """Remove a queue's limits; False when it had none."""
        ...

    def circuit_admit(self, tenant_id: str, name: str, *, now: float, cooldown: float) -> str:
        """May a call through circuit ``name`` proceed?

        Args:
            tenant_id: The circuit's tenant; ``*`` for a shared circuit.
            name: The circuit.
            now: The time of the call.
            cooldown: How long a trial admitted holds the circuit, in seconds.

        Returns:
            ``closed``: yes. ``open``: no, fail fast. ``trial``: yes, as the one half-open
            trial; others see ``open`` until it is recorded or ``cooldown`` passes.
        """
        ...

    def circuit_record(
        self, tenant_id: str, name: str, *, ok: bool, now: float, threshold: int,
        cooldown: float,
    ) -> None:
        """Record a call's outcome.

        A success closes the circuit. The ``threshold``-th consecutive failure, or a failed
        trial, opens it for ``cooldown`` seconds.

        Args:
            tenant_id: The circuit's tenant; ``*`` for a shared circuit.
            name: The circuit.
            ok: Whether the call succeeded.
            now: The time of the outcome.
            threshold: The consecutive failures that open the circuit.
            cooldown: How long the circuit stays open, in seconds.
        """
        ...


SHARED = "*"
"""The tenant column of a queue's one shared rate bucket (``per_tenant`` off)."""

MAX_PASSES = 4
"""A claim stops after this many passes; whatever it left is taken by the next claim."""

WINDOW = 2
"""A claim for n runs reads at most ``WINDOW * n`` due runs of each (queue, tenant): it can
take at most n of one tenant, and the rest is slack for rows other claimers hold."""

BucketKey = tuple[str, str]
"""(queue, tenant or :data:`SHARED`)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A due run a claim could take; ``first`` when it was never leased (claiming it
    starts the run, which a rate limit counts)."""

    tenant_id: str
    run_id: str
    queue: str
    first: bool


@dataclass(frozen=True, slots=True)
class Bucket:
    """A rate bucket as stored: its tokens as of ``updated_at``."""

    tokens: float
    updated_at: float


def limited(configs: Iterable[QueueConfig]) -> dict[str, QueueConfig]:
    """The configs that limit anything, by queue name."""
    return {
        c.name: c for c in configs
        if c.max_concurrency is not None or c.rate_limit is not None
    }


def window(limit: int) -> int:
    """How many due runs of each (queue, tenant) a claim for ``limit`` runs reads."""
    return WINDOW * limit


def tokens_at(config: QueueConfig, bucket: Bucket | None, now: float) -> float:
    """The bucket's tokens at ``now``: full when never used, refilled at ``rate_limit``
    per ``rate_period_s`` since its last use, never above ``rate_limit``."""
    cap = float(config.rate_limit or 0)
    if bucket is None:
        return cap
    elapsed = max(0.0, now - bucket.updated_at)
    return min(cap, bucket.tokens + elapsed * cap / config.rate_period_s)


class ClaimPlan:
    """One claim's view of its queues' limits, updated as it admits runs.

    ``leased`` counts the unexpired leases per limited queue; ``buckets`` holds the stored
    rate buckets of the limited queues.
    """

    def __init__(
        self,
        configs: Mapping[str, QueueConfig],
        leased: Mapping[str, int],
        buckets: Mapping[BucketKey, Bucket],
        *,
        now: float,
        limit: int,
    ) -> None:
        self.configs = dict(configs)
        self.now = now
        self.limit = limit
        self.taken = 0
        self.passes = 0
        self.turned_down = False
        self.room = {
            name: c.max_concurrency - leased.get(name, 0)
            for name, c in self.configs.items() if c.max_concurrency is not None
        }
        self.tokens: dict[BucketKey, float] = {}
        for key, bucket in buckets.items():
            c = self.configs.get(key[0])
            # A bucket of the other kind is left over from before per_tenant changed.
            if c is not None and c.rate_limit is not None and (key[1] == SHARED) != c.per_tenant:
                self.tokens[key] = tokens_at(c, bucket, now)
        self.spent: dict[BucketKey, float] = {}
        """Tokens left (as of ``now``) in every bucket this claim took from."""

    def wants_more(self) -> bool:
        """Whether another pass may take more: the first always does; a later one only
        when the previous pass turned runs down and the claim is not yet full."""
        if self.taken >= self.limit or self.passes >= MAX_PASSES:
            return False
        return self.passes == 0 or self.turned_down

    def wanted(self) -> int:
        """How many more runs the claim may take."""
        return self.limit - self.taken

    def full(self) -> list[str]:
        """Queues without a free concurrency slot."""
        return sorted(name for name, room in self.room.items() if room <= 0)

    def empty(self) -> list[BucketKey]:
        """Buckets without a whole token: their queue may start none of those runs.

        A bucket never used is full, so only a stored or spent one can be empty — or any
        bucket of a queue whose ``rate_limit`` is 0.
        """
        empty = {(name, SHARED) for name, c in self.configs.items() if c.rate_limit == 0}
        empty.update(key for key, tokens in self.tokens.items() if tokens < 1)
        return sorted(empty)

    def admit(self, candidates: Iterable[Candidate]) -> list[Candidate]:
        """Walk one pass's candidates in their (fair) order, taking each one its queue has
        room for — a free concurrency slot, and for a first activation a token from its
        rate bucket — until the claim is full."""
        self.passes += 1
        self.turned_down = False
        chosen: list[Candidate] = []
        for cand in candidates:
            if self.taken >= self.limit:
                break
            c = self.configs.get(cand.queue)
            if c is not None and not self._take(c, cand):
                self.turned_down = True
                continue
            self.taken += 1
            chosen.append(cand)
        return chosen

    def _take(self, c: QueueConfig, cand: Candidate) -> bool:
        if c.name in self.room and self.room[c.name] <= 0:
            return False
        if cand.first and c.rate_limit is not None:
            key = (c.name, cand.tenant_id if c.per_tenant else SHARED)
            have = self.tokens.get(key, float(c.rate_limit))
            if have < 1:
                self.tokens[key] = have
                return False
            self.tokens[key] = self.spent[key] = have - 1
        if c.name in self.room:
            self.room[c.name] -= 1
        return True
