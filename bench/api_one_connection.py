"""``underway serve`` with every read on the store's one writer connection, as before the
API read on read-only connections: ``bench/api.py`` measures it beside the server as it is,
in the same run, on SQLite.

    python bench/api_one_connection.py serve --db DATABASE_URL ...
"""

from __future__ import annotations

import underway.store.sqlite._connection as connection
from underway.cli import main

if __name__ == "__main__":
    connection.reads_committed = lambda: False  # type: ignore[assignment]
    main()
