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

    def actionable_signals(
        self, tenant_id: str, run_id: str, *, waiting: str | None
    ) -> list[SignalRecord]:
        """The unconsumed signals an activation acts on, oldest first.

        They are every control signal (a name starting ``underway.``) and the oldest
        signal named ``waiting``. The rest of the inbox is not read, so the cost does not
        grow with the signals the run consumed or leaves unread.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            waiting: The signal the run waits for (None: none but control signals).
        """
        ...

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """Record a decision's nonce as used.

        It is atomic: of concurrent callers for different requests, exactly one gets True.

        Args:
            tenant_id: The decision's tenant.
            nonce: The decision's nonce.
            run_id: The run the decision is for.
            request_id: The request the decision answers.
            at: When the nonce is used.

        Returns:
            True the first time the nonce is seen in the tenant, False ever after. The same
            ``run_id`` and ``request_id`` get True again: a decision redelivered after a crash
            (nonce recorded, grant not yet journaled) is not mistaken for a replay.
        """
        ...
