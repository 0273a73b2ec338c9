"""The inbox role: signals waiting for runs, and the nonces that make a decision count once."""

from __future__ import annotations

from typing import Protocol

from .records import SignalRecord

__all__ = ["InboxStore"]


class InboxStore(Protocol):
    """Delivers signals (decisions arrive as signals) and records decisions' nonces."""

    def send_signal(self, signal: SignalRecord) -> bool:
        """Put a signal in the run's inbox (once per signal_id) and wake the run if it
        waits for it. Returns False for a duplicate signal_id. A signal is consumed by
        the append that handles it (``AppendBatch.consumed_signals``)."""
        ...

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Unconsumed signals of a run, oldest first."""
        ...

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """Record a decision's nonce as used: True the first time the nonce is seen in the
        tenant, False ever after — except for the same ``run_id`` and ``request_id``, so a
        decision redelivered after a crash (nonce recorded, grant not yet journaled) is not
        mistaken for a replay. Atomic: of concurrent callers for different requests,
        exactly one gets True."""
        ...
