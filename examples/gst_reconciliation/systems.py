"""The outside world of the example, simulated on disk.

* :class:`Erp` reads the purchase register of a return period from ``register.json``
  (read-only) and keeps the input tax credit ledger, one entry per idempotency key: a post
  retried with the same key is answered with the first entry, never booked twice.
* :class:`Gsp` is a GST Suvidha Provider's API over the GST portal: it answers GSTR-2B of a
  period in the portal's JSON layout (``docdata.b2b[].inv[]``: ``ctin``, ``inum``, ``dt``,
  ``txval``, ``igst``, ``cgst``, ``sgst``, ``cess``, ``itcavl``, ``rsn``), from
  ``gstr2b.json``.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from .matching import HEADS, Purchase, Reported, Taxes

HERE = Path(__file__).parent
REGISTER = HERE / "register.json"
GSTR2B = HERE / "gstr2b.json"
PAISA = Decimal("0.01")


class Erp:
    """The books: a purchase register per period, and the ITC ledger kept in ``data``."""

    def __init__(self, data: Path, register: Path = REGISTER) -> None:
        self._register = json.loads(register.read_text(encoding="utf-8"))
        self.ledger = data / "itc_ledger.jsonl"
        self._lock = threading.Lock()

    def purchases(self, period: str) -> list[Purchase]:
        """The purchases booked in ``period`` (``YYYY-MM``)."""
        lines = self._register.get(period)
        if lines is None:
            raise LookupError(f"no purchase register for period {period!r}")
        return [Purchase.model_validate(line) for line in lines]

    def post(self, key: str, entry: dict[str, Any]) -> dict[str, Any]:
        """Book ``entry`` in the ITC ledger once per ``key``; return what is booked."""
        with self._lock:
            for existing in self.entries():
                if existing["key"] == key:
                    return existing
            booked = {"key": key, **entry}
            with self.ledger.open("a", encoding="utf-8") as f:
                f.write(json.dumps(booked, sort_keys=True, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
            return booked

    def entries(self) -> list[dict[str, Any]]:
        """Every ledger entry, in order."""
        if not self.ledger.exists():
            return []
        with self.ledger.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


class Gsp:
    """GSTR-2B as a GSP's API answers it, for the recipient GSTIN of ``gstr2b.json``."""

    def __init__(self, source: Path = GSTR2B) -> None:
        self._returns = json.loads(source.read_text(encoding="utf-8"))

    def gstr2b(self, period: str) -> dict[str, Any]:
        """The portal's GSTR-2B document of ``period`` (``YYYY-MM``; the portal says
        ``MMYYYY``)."""
        year, month = period.split("-")
        for document in self._returns:
            if document["data"]["rtnprd"] == f"{month}{year}":
                return dict(document)
        raise LookupError(f"GSTR-2B of {period} is not generated yet")


def _inr(value: Any) -> Decimal:
    return Decimal(str(value)).quantize(PAISA)


def reported_lines(document: dict[str, Any]) -> list[Reported]:
    """The invoices of a GSTR-2B document, one line each (items summed)."""
    lines = []
    for supplier in document["data"]["docdata"].get("b2b", []):
        for inv in supplier["inv"]:
            items = inv["items"]
            lines.append(Reported(
                supplier_gstin=supplier["ctin"], supplier=supplier["trdnm"],
                invoice_no=inv["inum"],
                invoice_date=datetime.strptime(inv["dt"], "%d-%m-%Y").date(),
                taxable_value=sum((_inr(i["txval"]) for i in items), Decimal(0)),
                taxes=Taxes(**{h: sum((_inr(i.get(h, 0)) for i in items), Decimal(0))
                               for h in HEADS}),
                itc_available=inv.get("itcavl", "Y") == "Y", reason=inv.get("rsn", ""),
            ))
    return lines
