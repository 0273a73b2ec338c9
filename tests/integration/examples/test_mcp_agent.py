"""The MCP agent example end to end, on SQLite and on PostgreSQL: the demo's one command
starts the shipping MCP server (Streamable HTTP), runs worker processes whose warehouse MCP
server runs inside the sandbox (stdio), kills the first with SIGKILL right after the
courier was booked, and lets a second take the run over. The checks read the servers' own
records and the journal."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from underway import Client
from underway import events as ev

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "mcp_agent" / "demo.py"
TIMEOUT_S = 300.0
"""Against a hang only."""


@pytest.mark.crash
def test_the_agent_books_once_across_a_sigkill(db: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = subprocess.run([sys.executable, str(DEMO), "--data", str(data), "--db", db],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "worker 1 killed (SIGKILL) after the shipper booked AWB-101" in done.stdout
    assert done.stdout.rstrip().endswith("OK: nothing was done twice")

    bookings = [json.loads(x) for x in (data / "bookings").read_text().splitlines()]
    reservations = [json.loads(x) for x in
                    (data / "warehouse" / "reservations").read_text().splitlines()]
    assert [b["awb"] for b in bookings] == ["AWB-101"]
    assert [r["reservation"] for r in reservations] == ["R-1"]

    with Client.connect(db) as client:
        (row,) = client.list_runs().runs
        history = [r.event for r in client.history(row.run_id)]
        assert client.state(row.run_id).status == "completed"
        assert client.verify(row.run_id).ok
    succeeded = [e for e in history if isinstance(e, ev.ToolSucceeded)]
    assert Counter(e.tool for e in succeeded) == {
        "warehouse_stock": 1, "warehouse_reserve": 1, "shipping_quote": 1,
        "shipping_book_courier": 1}
    (booked,) = [e for e in succeeded if e.tool == "shipping_book_courier"]
    # Settled by asking the shipper under the call's key, never sent again.
    assert booked.reconciled and booked.key == bookings[0]["key"]
    assert booked.result == bookings[0]
    (reserved,) = [e for e in succeeded if e.tool == "warehouse_reserve"]
    assert reserved.key == reservations[0]["key"]
    started = [e.tool for e in history if isinstance(e, ev.ToolStarted)]
    assert started == ["warehouse_reserve", "shipping_book_courier"]
