"""The in-memory store's inbox (:class:`~underway.store.inbox.InboxStore`) and registry
(:class:`~underway.store.registry.RegistryStore`): signals, approvers, decision nonces."""

from __future__ import annotations

import dataclasses
import threading

from ..records import FINAL, ApproverRecord, RunRecord, SignalRecord


class MemoryInbox:
    """Signals, approvers and nonces, on the memory store's dictionaries."""

    _lock: threading.RLock
    _runs: dict[tuple[str, str], RunRecord]
    _signals: dict[tuple[str, str], dict[str, tuple[SignalRecord, bool]]]
    _approvers: dict[tuple[str, str], ApproverRecord]
    _nonces: dict[tuple[str, str], tuple[str, str]]

    def send_signal(self, signal: SignalRecord) -> bool:
        """Queue a signal once per id and wake the run if it waits for it."""
        key = (signal.tenant_id, signal.run_id)
        with self._lock:
            inbox = self._signals.setdefault(key, {})
            if signal.signal_id in inbox:
                return False
            inbox[signal.signal_id] = (signal, False)
            r = self._runs.get(key)
            control = signal.name.startswith("underway.")
            if r is not None and r.status not in FINAL and (
                r.waiting_signal == signal.name or control
            ):
                self._runs[key] = dataclasses.replace(
                    r, next_wake_at=signal.created_at, control_pending=r.control_pending or control
                )
            return True

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Unconsumed signals, oldest first."""
        with self._lock:
            inbox = self._signals.get((tenant_id, run_id), {})
            pending = [s for s, consumed in inbox.values() if not consumed]
        return sorted(pending, key=lambda s: (s.created_at, s.signal_id))

    def actionable_signals(
        self, tenant_id: str, run_id: str, *, waiting: str | None
    ) -> list[SignalRecord]:
        """Unconsumed control signals and the oldest one named ``waiting``, oldest first
        (this store for tests reads the whole inbox to find them)."""
        out, found = [], False
        for s in self.pending_signals(tenant_id, run_id):
            if s.name.startswith("underway."):
                out.append(s)
            elif s.name == waiting and not found:
                out.append(s)
                found = True
        return out

    def put_approver(self, rec: ApproverRecord) -> None:
        """Register or replace an approver."""
        with self._lock:
            self._approvers[(rec.tenant_id, rec.approver_id)] = rec

    def get_approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The approver with this id."""
        return self._approvers.get((tenant_id, approver_id))

    def list_approvers(self, tenant_id: str) -> list[ApproverRecord]:
        """A tenant's approvers by id."""
        with self._lock:
            return sorted(
                (a for a in self._approvers.values() if a.tenant_id == tenant_id),
                key=lambda a: a.approver_id,
            )

    def revoke_approver(self, tenant_id: str, approver_id: str, *, at: float) -> bool:
        """Revoke an approver that is not revoked yet."""
        with self._lock:
            rec = self._approvers.get((tenant_id, approver_id))
            if rec is None or rec.revoked_at is not None:
                return False
            self._approvers[(tenant_id, approver_id)] = dataclasses.replace(rec, revoked_at=at)
            return True

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """Record a decision's nonce as used."""
        with self._lock:
            owner = self._nonces.setdefault((tenant_id, nonce), (run_id, request_id))
            return owner == (run_id, request_id)
