"""The invariant checks the crash and chaos suites share: what a journal held before a kill
it still holds, byte for byte and in place; no effect was performed twice.

Each check appends what it finds to a list of problems (the suites report them all at the
end, with their counters) rather than failing at the first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fakes.outside_service import Delivery
from underway.store.base import Store, StoredEvent

Journals = dict[str, list[StoredEvent]]
"""Run id -> every committed event of the run, as stored."""


def journals(store: Store, tenant: str = "default") -> Journals:
    """Every committed event of every run of ``tenant``, as stored."""
    return {r.run_id: store.load_events(tenant, r.run_id)
            for r in store.list_runs(tenant, limit=1_000_000)}


def check_prefix(before: Journals, after: Journals, problems: list[str], where: str) -> None:
    """What a journal held before (a kill, a freeze), it still holds, byte for byte and in
    place: nothing committed is lost or changed."""
    for run_id, old in before.items():
        new = after.get(run_id)
        if new is None:
            problems.append(f"{where}: run {run_id} disappeared")
        elif new[: len(old)] != old:
            bad = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
                       len(new))
            problems.append(
                f"{where}: run {run_id} lost or changed committed event seq {bad + 1} "
                f"({len(old)} before, {len(new)} after)")


@dataclass
class Deliveries:
    """A run's effects as the outside service saw them, by kind, with their counts."""

    by_kind: dict[str, list[Delivery]] = field(default_factory=dict)
    duplicates: int = 0
    """Performances past the first of a key: the double effects that must never happen."""
    idempotent_redeliveries: int = 0
    """Deliveries past the first of an idempotent key (allowed: the service dedupes)."""


def check_once(label: str, effects: Iterable[tuple[str, Delivery]],
               problems: list[str]) -> Deliveries:
    """Count ``effects`` (key, delivery) of one run; every key performed more than once is
    a problem named with ``label``."""
    found = Deliveries()
    for key, d in effects:
        found.by_kind.setdefault(d.kind, []).append(d)
        if d.performed > 1:
            found.duplicates += d.performed - 1
            problems.append(f"{label}: {d.kind} {key} performed {d.performed} times")
        if d.idempotent:
            found.idempotent_redeliveries += d.deliveries - 1
    return found
