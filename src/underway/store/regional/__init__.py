"""Residency: one database per region, and a store that sends each tenant's reads and
writes to its region's database only.

:class:`RegionalStore` is a :class:`~underway.store.base.Store` over several stores, one
per region (``in``, ``eu``...), and a map of tenant to region (with an optional default
region for tenants not listed). Every call that names a tenant — directly, or through the
run, batch, signal, lease or record it is given — goes to that tenant's region and no
other; a tenant with no region is refused with :class:`~underway.errors.ResidencyError`
before anything is read or written. So a client, ``underway serve`` and the CLI work on a
``RegionalStore`` as on one database, and every row of a tenant lands in its region.

Calls that name no tenant serve every region: a worker's claim takes due runs from each
region in turn (the leases it returns name their tenants, so renewing, appending and
releasing go back to the right region), listings of tenants, counts, heads and leases are
the union of the regions', due times are the earliest of them, wake-ups are heard from
every region, and a queue's limits are set in every region (each region enforces them on
its own runs). An API key lives in its tenant's region like everything else of the
tenant: a token is looked up in each region until one knows its key id (ids are random).
A circuit shared by all tenants (tenant ``*``) is kept in the default region, else the
first region by name.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from ...codec import Codec
from ...errors import ConfigurationError, ResidencyError
from ..base import Dialect, Store
from ..limits import SHARED
from ..wakeups import AnyOf, Wakeups
from ._access import RegionalAccess
from ._journal import RegionalJournal
from ._keys import RegionalKeys
from ._leases import RegionalLeases
from ._retention import RegionalRetention
from ._schedules import RegionalSchedules
from ._streams import RegionalStreams

__all__ = ["RegionalStore"]


class RegionalStore(RegionalJournal, RegionalLeases, RegionalSchedules, RegionalAccess,
                    RegionalRetention, RegionalKeys, RegionalStreams):
    """A :class:`~underway.store.base.Store` that keeps each tenant in its region's database.

    See the module docstring. Holds and retention are in :class:`RegionalRetention`;
    encryption's data keys in :class:`RegionalKeys`. Its ``codec`` is how payloads read and
    written through it are encoded, sealed and opened. ``underway.crypto.encrypt`` on the
    regional store seals them all, each tenant's data keys in its region.

    Args:
        regions: The store of each region, by region name. The caller opens and migrates
            them; the regional store closes them.
        tenants: The region of each tenant, by tenant id.
        default: The region of tenants not listed (None: such tenants are refused).

    Raises:
        ConfigurationError: A tenant or the default names a region that is not given.
    """

    def __init__(
        self, regions: Mapping[str, Store], *, tenants: Mapping[str, str],
        default: str | None = None,
    ) -> None:
        if not regions:
            raise ConfigurationError("residency needs at least one region")
        for tenant, region in tenants.items():
            if region not in regions:
                raise ConfigurationError(
                    f"tenant {tenant!r} is in region {region!r}, which is not one of the "
                    f"regions ({', '.join(sorted(regions))})")
        if default is not None and default not in regions:
            raise ConfigurationError(f"the default region {default!r} is not one of the "
                                     f"regions ({', '.join(sorted(regions))})")
        self.regions: dict[str, Store] = dict(sorted(regions.items()))
        """The store of each region, by region name."""
        self.tenant_regions: dict[str, str] = dict(tenants)
        """The region of each listed tenant."""
        self.default = default
        """The region of tenants not listed (None: they are refused)."""
        self._turn = itertools.count()
        self.codec = Codec()
        """How payloads are encoded, sealed and opened (``Database.codec``)."""

    def region_of(self, tenant_id: str) -> str:
        """The region ``tenant_id``'s data lives in; :class:`ResidencyError` when none."""
        region = self.tenant_regions.get(tenant_id, self.default)
        if region is None:
            raise ResidencyError(tenant_id, list(self.regions))
        return region

    def store_of(self, tenant_id: str) -> Store:
        """The store of ``tenant_id``'s region."""
        return self.regions[self.region_of(tenant_id)]

    def _shared(self) -> Store:
        return self.regions[self.default or next(iter(self.regions))]

    def _of(self, tenant_id: str) -> Store:
        return self._shared() if tenant_id == SHARED else self.store_of(tenant_id)

    def _all(self) -> Iterable[Store]:
        return self.regions.values()

    @property
    def dialect(self) -> Dialect:
        """The first region's dialect (regions may differ; each uses its own SQL)."""
        return next(iter(self.regions.values())).dialect

    def migrate(self) -> int:
        """Migrate every region's database; the lowest version now in place."""
        return min(s.migrate() for s in self._all())

    def schema_version(self) -> int:
        """The lowest schema version of the regions' databases."""
        return min(s.schema_version() for s in self._all())

    def wakeups(self, *, name: str) -> Wakeups:
        """Wake-ups from every region."""
        return AnyOf([s.wakeups(name=f"{name} {region}")
                          for region, s in self.regions.items()])

    def close(self) -> None:
        """Close every region's store."""
        for s in self._all():
            s.close()


def _check(store: RegionalStore) -> Store:
    return store  # mypy: a RegionalStore is a Store, every role of it
