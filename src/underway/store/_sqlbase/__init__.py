"""The SQL base that :mod:`underway.store.sqlite` and :mod:`underway.store.postgres`
share.

One part per role (``journal``, ``leases``, ``inbox``, ``schedules``, ``access``,
``consent``, ``retention``, ``keys``, ``budgets``) holds the method bodies both dialects
run alike, written against the small interface in ``dialect``: run a named query from
``store/sql/<dialect>.sql``, and convert arrays, bytes and run rows. A dialect's part
inherits its shared part and writes only what truly differs: how a transaction locks,
how statements are batched, what is announced.
"""
