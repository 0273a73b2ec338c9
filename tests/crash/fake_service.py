"""The fake outside service that crash-test workers talk to over real HTTP.

The service itself is :mod:`fakes.outside_service` (shared with the chaos suite; see there
for its routes). Crash workers send no lease fences, so no request of theirs is refused.
What this suite adds: :meth:`Ledger.snapshot` returns the recorded effects alone, and
:class:`FakeService` answers at once (no delay).
"""

from __future__ import annotations

from fakes.outside_service import Delivery, OutsideService, customer_profile
from fakes.outside_service import Ledger as _Ledger

__all__ = ["Delivery", "FakeService", "Ledger", "customer_profile"]


class Ledger(_Ledger):
    """What the service saw (see :class:`fakes.outside_service.Ledger`)."""

    def snapshot(self) -> dict[str, Delivery]:
        """A copy of every recorded effect, by key."""
        with self.lock:
            return self.copy_effects()


class FakeService(OutsideService[Ledger]):
    """The fake service on 127.0.0.1 (an ephemeral port), served from a background thread.

    >>> with FakeService() as svc:
    ...     svc.url  # http://127.0.0.1:PORT
    """

    def __init__(self) -> None:
        super().__init__(Ledger())
