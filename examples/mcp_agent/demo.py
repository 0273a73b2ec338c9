"""The MCP agent example in one command: its tools come from two MCP servers, and a
SIGKILL in the middle of booking a courier books nothing twice.

    python examples/mcp_agent/demo.py [--data DIR] [--db URL]

1. It starts the shipping company's MCP server (Streamable HTTP, a free local port).
   The warehouse's MCP server is started by each worker, inside the sandbox (stdio).
2. Worker 1 runs the order agent and is killed with SIGKILL right after the courier was
   booked and before the journal recorded it (``UNDERWAY_CRASH_AFTER`` at the
   ``effect.after_run`` fault point): the booking's outcome is unknown.
3. Worker 2, a fresh process, takes the run over. The booking tool is not idempotent, so
   it is never sent again: its reconcile hook asks the shipper (``find_booking``) what the
   key did, and the run goes on with the booking that was made.
4. It counts the servers' own records and verifies the journal. It exits non-zero if a
   reservation or a booking was made twice, the run did not complete, or the audit failed.

Everything lives in one directory: a fresh temporary one unless ``--data`` is given. The
journal is SQLite there unless ``--db`` names another (a PostgreSQL URL).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from underway import Client
from underway import events as ev

HERE = Path(__file__).resolve().parent
# Effects before the kill: stock (1), reserve (2), quote (3), book_courier (4): the
# process dies right after the shipper booked the courier.
CRASH_AT_EFFECT = 4
START_TIMEOUT_S = 60.0
"""Against a hang only: how long the shipping server may take to listen."""


def say(text: str = "") -> None:
    """Print at once (the output interleaves with child processes)."""
    print(text, flush=True)


def start_shipping(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the shipping MCP server on a free port; return it once it listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(HERE / "shipping.py"), str(data), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            continue
    proc.kill()
    raise SystemExit("the shipping server did not start")


def spawn(db: str, data: Path, url: str, *, crash_at: int | None = None
          ) -> tuple[int, dict[str, Any] | None]:
    """Run a worker in a fresh process; its exit status and what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
    if crash_at is not None:
        env |= {"UNDERWAY_CRASH_AFTER": str(crash_at), "UNDERWAY_CRASH_POINTS": "effect.after_run"}
    done = subprocess.run([sys.executable, str(HERE / "worker.py"), "--db", db, "--data",
                           str(data), "--shipping", url], env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0 and done.returncode != -signal.SIGKILL:
        say(done.stderr)
    lines = done.stdout.strip().splitlines()
    return done.returncode, json.loads(lines[-1]) if lines else None


def records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a server keeps."""
    return [json.loads(line) for line in path.read_text().splitlines()] \
        if path.exists() else []


def demo(data: Path, db: str) -> int:
    """Run the whole demonstration; return the process exit status."""
    say("underway demo: an agent whose tools come from two MCP servers")
    say(f"data in {data}, journal at {db.split('@')[-1]}")
    shipper, url = start_shipping(data)
    try:
        say(f"[1] shipping MCP server at {url}; the warehouse runs inside the sandbox")
        status, _ = spawn(db, data, url, crash_at=CRASH_AT_EFFECT)
        if status != -signal.SIGKILL:
            say(f"FAIL: worker 1 was expected to die by SIGKILL, not exit with {status}")
            return 1
        booked = records(data / "bookings")
        say(f"[2] worker 1 killed (SIGKILL) after the shipper booked {booked[-1]['awb']}"
            if booked else "FAIL: worker 1 died before booking")
        if not booked:
            return 1
        status, out = spawn(db, data, url)
        say(f"[3] worker 2 took the run over and exited with status {status}: {out}")
    finally:
        shipper.kill()
        shipper.wait()
    if out is None:
        return 1
    with Client.connect(db) as client:
        history = [r.event for r in client.history(out["run_id"])]
        audit = client.verify(out["run_id"])
    reservations = records(data / "warehouse" / "reservations")
    bookings = records(data / "bookings")
    calls = Counter(e.tool for e in history if isinstance(e, ev.ToolSucceeded))
    reconciled = [e for e in history if isinstance(e, ev.ToolSucceeded) and e.reconciled]
    say(f"    tools journaled: {dict(calls)}")
    say(f"    the booking settled by asking the shipper: {[e.result for e in reconciled]}")
    say(f"    reservations: {len(reservations)}, bookings: {len(bookings)}, "
        f"audit: {'ok' if audit.ok else 'FAILED'}")
    ok = (out["status"] == "completed" and len(reservations) == 1 and len(bookings) == 1
          and len(reconciled) == 1 and audit.ok)
    say("OK: nothing was done twice" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    """Parse the command line and run the demo."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, help="where the journal and the servers' records go")
    p.add_argument("--db", help="the journal's database URL (default: SQLite in --data)")
    a = p.parse_args()
    data = a.data or Path(tempfile.mkdtemp(prefix="underway-mcp-"))
    data.mkdir(parents=True, exist_ok=True)
    os.chmod(data, 0o755)
    return demo(data, a.db or f"sqlite:///{data / 'underway.db'}")


if __name__ == "__main__":
    sys.exit(main())
