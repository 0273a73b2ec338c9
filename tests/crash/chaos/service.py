"""The outside world of the chaos tests: a fake service on real HTTP, in the test process.

The service itself is :mod:`fakes.outside_service` (shared with the crash suite; see there
for its routes). Worker processes reach it from the chaos app's tools (see :mod:`app`),
which send their lease token as a fence with every effect and every reconcile question, and
report the lease each step runs under to ``POST /witness``. What this suite adds:
:meth:`Ledger.snapshot` returns the effects and the witness reports together, and
:class:`ChaosService` takes a little time over each lookup and effect.
"""

from __future__ import annotations

from fakes.outside_service import Delivery, OutsideService, Witness, customer_profile
from fakes.outside_service import Ledger as _Ledger

__all__ = ["ChaosService", "Delivery", "Ledger", "Witness", "customer_profile"]


class Ledger(_Ledger):
    """What the service saw (see :class:`fakes.outside_service.Ledger`)."""

    def snapshot(self) -> tuple[dict[str, Delivery], list[Witness]]:
        """Copies of every recorded effect (by key) and every witness report."""
        with self.lock:
            return self.copy_effects(), list(self.witnesses)


class ChaosService(OutsideService[Ledger]):
    """The fake service on 127.0.0.1 (an ephemeral port), served from a background thread.

    ``delay``: seconds each lookup and effect takes, so that runs spend their time in
    flight the way they do against real services (and a paused worker holds some).
    """

    def __init__(self, *, delay: float = 0.02) -> None:
        super().__init__(Ledger(), delay=delay)
