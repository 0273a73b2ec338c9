"""The in-memory store's run index (:class:`~underway.store.runs.RunStore`): rows read,
listed and counted."""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Mapping, Sequence

from ..records import RunRecord, StoredEvent, StoredLabel


class MemoryRuns:
    """Runs' rows and journals' heads, read from the memory store's dictionaries."""

    _lock: threading.RLock
    _runs: dict[tuple[str, str], RunRecord]
    _events: dict[tuple[str, str], list[StoredEvent]]
    _labels: dict[tuple[str, str], dict[str, StoredLabel]]

    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row."""
        return self._runs.get((tenant_id, run_id))

    def list_runs(
        self, tenant_id: str, *, status: str | None = None, limit: int = 100,
        flow: str | None = None, since: float | None = None, until: float | None = None,
        after: tuple[float, str] | None = None, id_prefix: str | None = None,
        updated_since: float | None = None, updated_until: float | None = None,
        search: str | None = None, labels: Mapping[str, str] | None = None,
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first, filtered and paged."""
        with self._lock:
            found = [
                r for r in self._runs.values()
                if r.tenant_id == tenant_id and (status is None or r.status == status)
                and (flow is None or r.flow == flow)
                and (since is None or r.created_at >= since)
                and (until is None or r.created_at < until)
                and (after is None or (-r.created_at, r.run_id) > (-after[0], after[1]))
                and (id_prefix is None or r.run_id.startswith(id_prefix))
                and (updated_since is None or r.updated_at >= updated_since)
                and (updated_until is None or r.updated_at < updated_until)
                and (search is None or search in r.run_id or search in r.flow)
                and (not labels or self._labelled(r, labels))
            ]
        found.sort(key=lambda r: (-r.created_at, r.run_id))
        return found[:limit]

    def _labelled(self, r: RunRecord, labels: Mapping[str, str]) -> bool:
        have = self._labels.get((r.tenant_id, r.run_id), {})
        return all(k in have and have[k].value == v for k, v in labels.items())

    def run_labels(
        self, tenant_id: str, run_ids: Sequence[str]
    ) -> dict[str, tuple[StoredLabel, ...]]:
        """The labels of these runs, by run id."""
        with self._lock:
            return {r: tuple(sorted(found.values(), key=lambda x: x.key))
                    for r in dict.fromkeys(run_ids)
                    if (found := self._labels.get((tenant_id, r)))}

    def runs_of_subject(
        self, tenant_id: str, subject: str, *, limit: int | None = None
    ) -> list[RunRecord]:
        """The tenant's runs about a subject, oldest first."""
        with self._lock:
            found = sorted((r for r in self._runs.values()
                            if r.tenant_id == tenant_id and r.subject == subject),
                           key=lambda r: (r.created_at, r.run_id))
        return found if limit is None else found[:limit]

    def tenants(self) -> list[str]:
        """Tenants with runs."""
        return sorted({t for t, _ in self._runs})

    def run_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, status, count) of the runs."""
        with self._lock:
            found = Counter((r.tenant_id, r.status) for r in self._runs.values())
        return [(t, s, n) for (t, s), n in sorted(found.items())]

    def request_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, kind, count) of the runs that wait for a person."""
        with self._lock:
            found = Counter((r.tenant_id, r.request_kind) for r in self._runs.values()
                            if r.request_kind is not None
                            and r.status in ("waiting", "escalated"))
        return [(t, str(k), n) for (t, k), n in sorted(found.items())]

    def status_counts(
        self, tenant_id: str, statuses: Sequence[str], *, cap: int
    ) -> dict[str, int]:
        """The tenant's runs by status, each counted up to ``cap``."""
        with self._lock:
            found = Counter(r.status for r in self._runs.values() if r.tenant_id == tenant_id)
        return {s: min(found.get(s, 0), cap) for s in statuses}

    def runs_created(
        self, tenant_id: str, *, since: float, until: float, width: float
    ) -> list[tuple[int, str, int]]:
        """(bucket, status, count) of the runs created in a window."""
        with self._lock:
            found = Counter(
                (math.floor((r.created_at - since) / width), r.status)
                for r in self._runs.values()
                if r.tenant_id == tenant_id and since <= r.created_at < until
            )
        return [(b, s, n) for (b, s), n in sorted(found.items())]

    def runs_written(self, tenant_id: str, *, since: float, until: float) -> list[str]:
        """Runs whose journals may hold events of a window."""
        with self._lock:
            return sorted(
                r.run_id for r in self._runs.values()
                if r.tenant_id == tenant_id and r.created_at < until
                and (r.updated_at >= since or r.lease_owner is not None)
            )

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """Runs with a row or events."""
        with self._lock:
            keys = set(self._runs) | {k for k, v in self._events.items() if v}
        return sorted(k for k in keys if tenant_id is None or k[0] == tenant_id)

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events."""
        with self._lock:
            heads = [
                (t, r, events[-1].seq, events[-1].hash)
                for (t, r), events in self._events.items()
                if events and (tenant_id is None or t == tenant_id)
            ]
        return sorted(heads)
