"""The examples' recorded journals (``tests/fixtures/journals``, written by
``tests/fixtures/record_examples.py``) loaded into a store exactly as recorded — events
with their hashes, blobs, checkpoints, each run's row — and the examples' code, built as a
replay or a deploy check needs it (its tools never run there)."""

from __future__ import annotations

import base64
import gzip
import json
import sys
from pathlib import Path
from typing import Any

from underway import Flow, Tool
from underway.store import NewRun, RunUpdate, Store, StoredEvent
from underway.store.base import AppendBatch
from underway.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
JOURNALS = ROOT / "tests" / "fixtures" / "journals"
EXAMPLES = ("invoice_followup", "collections", "support")
COLLECTIONS_DAY = 1.0
"""The day length the collections journal was recorded with (record_examples.py)."""
SUPPORT_REPLY_TIMEOUT = 6.0

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def recorded(example: str) -> dict[str, Any]:
    """The recorded journals of ``example``."""
    data: dict[str, Any] = json.loads(gzip.decompress((JOURNALS / f"{example}.json.gz")
                                                      .read_bytes()))
    return data


def load(store: Store, example: str) -> list[dict[str, Any]]:
    """Put ``example``'s recorded runs into ``store`` as they were stored; return them."""
    found = recorded(example)
    for run in found["runs"]:
        t, r = run["tenant_id"], run["run_id"]
        events = [StoredEvent(e["seq"], e["type"], _raw(e["payload"]), e["hash"])
                  for e in run["events"]]
        store.create_run(NewRun(
            tenant_id=t, run_id=r, flow=run["flow"], idempotency_key=None,
            first_event=events[0],
            blobs={k: _raw(v) for k, v in found["blobs"].get(t, {}).items()},
            step=run["step"] or "", now=run["created_at"], next_wake_at=run["created_at"],
            queue=run["queue"],
        ))
        lease = store.claim(owner="recorder", now=run["created_at"], ttl=60, run_id=r,
                            tenant_id=t)[0]
        ckpt = run["checkpoint"]
        store.append(AppendBatch(
            tenant_id=t, run_id=r, expected_seq=1, fence=lease.token, events=events[1:],
            now=run["created_at"],
            update=RunUpdate(run["status"], run["step"], run["next_wake_at"],
                             run["waiting_signal"], run["error"]),
            checkpoint=None if ckpt is None else (ckpt["seq"], _raw(ckpt["state"])),
            release=True,
        ))
    runs: list[dict[str, Any]] = found["runs"]
    return runs


def _raw(text: str) -> bytes:
    return base64.b64decode(text)


def app(example: str, data: Path) -> tuple[list[Flow[Any, Any]], list[Tool]]:
    """``example``'s flows and tools as its workers ran them, bound to nothing real (a
    replay never runs them): files and services are made up under ``data``."""
    data.mkdir(parents=True, exist_ok=True)
    if example == "invoice_followup":
        from examples.invoice_followup.flow import followup, make_tools

        return [followup], make_tools(data)
    if example == "collections":
        from examples.collections_agent.agent import build_agent

        (data / "services.json").write_text(json.dumps(
            {n: "http://127.0.0.1:9" for n in ("erp", "payments", "gateway", "finance")}))
        return [build_agent(data, day_seconds=COLLECTIONS_DAY).flow], []
    from examples.support.app import Settings, build

    knowledge = MemoryStore()
    knowledge.migrate()
    monitor = build(Settings(desk="http://127.0.0.1:9", reply_timeout_s=SUPPORT_REPLY_TIMEOUT),
                    knowledge)
    return monitor.flows, list(monitor.tools.all)
