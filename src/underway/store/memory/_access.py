"""The in-memory store's records of who may reach runs from outside: API keys, intake
webhook secrets and the append-only access log (:class:`~underway.store.apikeys.ApiKeyStore`
and :class:`~underway.store.access.AccessLogStore`)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from ...errors import ConflictError
from ..access import genesis, link
from ..records import AccessHead, AccessRecord, ApiKeyRecord, IntakeSecretRecord


class MemoryAccess:
    """API keys, webhook secrets and the access log, held in process memory."""

    def __init__(self) -> None:
        self._access_lock = threading.RLock()
        self._api_keys: dict[str, ApiKeyRecord] = {}
        self._intake_secrets: dict[tuple[str, str], IntakeSecretRecord] = {}
        self._access_log: list[AccessRecord] = []
        self._access_heads: dict[str, AccessHead] = {}

    def put_api_key(self, rec: ApiKeyRecord) -> None:
        """Store a new key."""
        with self._access_lock:
            if rec.key_id in self._api_keys:
                raise ConflictError(f"API key id {rec.key_id!r} is taken")
            self._api_keys[rec.key_id] = rec

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id."""
        return self._api_keys.get(key_id)

    def list_api_keys(self, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        """Keys of a tenant (or all), oldest first."""
        with self._access_lock:
            found = [k for k in self._api_keys.values()
                     if tenant_id is None or k.tenant_id == tenant_id]
        return sorted(found, key=lambda k: (k.created_at, k.key_id))

    def revoke_api_key(self, tenant_id: str, key_id: str, *, at: float) -> bool:
        """Revoke a key of the tenant that is not revoked yet."""
        with self._access_lock:
            rec = self._api_keys.get(key_id)
            if rec is None or rec.tenant_id != tenant_id or rec.revoked_at is not None:
                return False
            self._api_keys[key_id] = dataclasses.replace(rec, revoked_at=at)
            return True

    def put_intake_secret(self, rec: IntakeSecretRecord) -> None:
        """Set a source's secret."""
        with self._access_lock:
            self._intake_secrets[(rec.tenant_id, rec.source)] = rec

    def get_intake_secret(self, tenant_id: str, source: str) -> IntakeSecretRecord | None:
        """A source's secret."""
        return self._intake_secrets.get((tenant_id, source))

    def list_intake_secrets(self, tenant_id: str) -> list[IntakeSecretRecord]:
        """A tenant's sources by name."""
        with self._access_lock:
            return sorted((r for r in self._intake_secrets.values() if r.tenant_id == tenant_id),
                          key=lambda r: r.source)

    def delete_intake_secret(self, tenant_id: str, source: str) -> bool:
        """Remove a source's secret."""
        with self._access_lock:
            return self._intake_secrets.pop((tenant_id, source), None) is not None

    def log_access(self, records: Sequence[AccessRecord]) -> list[AccessRecord]:
        """Append entries, numbering and chaining them."""
        stored = []
        with self._access_lock:
            for rec in records:
                head = self._access_heads.get(rec.tenant_id)
                prev = head.hash if head is not None else genesis(rec.tenant_id)
                seq = len(self._access_log) + 1
                linked = link(dataclasses.replace(rec, seq=seq), prev)
                self._access_log.append(linked)
                self._access_heads[rec.tenant_id] = AccessHead(
                    rec.tenant_id, seq, linked.hash, (head.entries if head else 0) + 1)
                stored.append(linked)
        return stored

    def list_access(
        self, tenant_id: str, *, run_id: str | None = None, key_id: str | None = None,
        since: float | None = None, until: float | None = None, before: int | None = None,
        limit: int = 100, who: str | None = None, purpose: str | None = None,
    ) -> list[AccessRecord]:
        """A tenant's entries, newest first."""
        with self._access_lock:
            found = [
                r for r in reversed(self._access_log)
                if r.tenant_id == tenant_id and (run_id is None or r.run_id == run_id)
                and (key_id is None or r.key_id == key_id)
                and (who is None or r.key_name == who)
                and (purpose is None or r.purpose == purpose)
                and (since is None or r.at >= since) and (until is None or r.at < until)
                and (before is None or r.seq < before)
            ]
        return found[:limit]

    def access_chain(self, tenant_id: str, *, after: int = 0,
                     limit: int = 1000) -> list[AccessRecord]:
        """A tenant's entries in chain order."""
        with self._access_lock:
            found = [r for r in self._access_log if r.tenant_id == tenant_id and r.seq > after]
        return found[:limit]

    def access_head(self, tenant_id: str) -> AccessHead | None:
        """The end of the tenant's chain."""
        return self._access_heads.get(tenant_id)
