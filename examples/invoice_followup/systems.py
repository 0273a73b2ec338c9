"""The outside world of the example, simulated on disk.

* :class:`Erp` reads invoices and payments from a JSON fixture (read-only) and keeps a
  collections log of follow-up outcomes, written once per idempotency key.
* :class:`Outbox` is an e-mail service that is *not* idempotent: every ``send`` delivers
  a message, even one with a key it has seen before. It records the key of each message
  it accepted, which is what lets a caller find out afterwards whether a send happened.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).with_name("erp.json")


def _append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line durably: once this returns, the record survives a crash."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class Erp:
    """A small ERP: invoices and payments from ``erp.json``, a collections log in ``data``."""

    def __init__(self, data: Path, fixture: Path = FIXTURE) -> None:
        self._book = json.loads(fixture.read_text(encoding="utf-8"))
        self.log = data / "collections.jsonl"

    def overdue(self, as_of: date) -> list[dict[str, Any]]:
        """Invoices past due on ``as_of`` with no payment received by then, oldest first."""
        return sorted(
            (
                inv for inv in self._book["invoices"]
                if date.fromisoformat(inv["due"]) < as_of and not self.paid(inv["id"], as_of)
            ),
            key=lambda inv: inv["due"],
        )

    def paid(self, invoice_id: str, on: date) -> str | None:
        """The date a payment for the invoice was received, if it was by ``on``."""
        for p in self._book["payments"]:
            if p["invoice_id"] == invoice_id and date.fromisoformat(p["received"]) <= on:
                return str(p["received"])
        return None

    def record(self, key: str, entry: dict[str, Any]) -> dict[str, Any]:
        """Write ``entry`` to the collections log once per ``key``; return what is logged."""
        for existing in _read_lines(self.log):
            if existing["key"] == key:
                return existing
        record = {"key": key, **entry}
        _append_line(self.log, record)
        return record


class Outbox:
    """An e-mail gateway that sends every message it is given, duplicates included."""

    def __init__(self, data: Path) -> None:
        self.path = data / "outbox.jsonl"

    def send(self, key: str, to: str, subject: str, body: str) -> dict[str, Any]:
        """Deliver a message; return the gateway's receipt."""
        receipt = {"message_id": f"msg-{uuid.uuid4().hex[:12]}", "key": key, "to": to}
        _append_line(self.path, {**receipt, "subject": subject, "body": body})
        return receipt

    def find(self, key: str) -> dict[str, Any] | None:
        """The receipt of the first message sent with ``key``, if any was sent."""
        for message in _read_lines(self.path):
            if message["key"] == key:
                return {k: message[k] for k in ("message_id", "key", "to")}
        return None

    def sent_per_key(self) -> Counter[str]:
        """How many messages were sent with each key."""
        return Counter(message["key"] for message in _read_lines(self.path))

    def messages(self) -> list[dict[str, Any]]:
        """Every message sent, in order."""
        return _read_lines(self.path)
