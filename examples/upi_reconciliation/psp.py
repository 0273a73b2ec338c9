"""A simulated UPI payment service provider (PSP), with scripted outcomes.

Its state is a SQLite file, so worker processes killed and started again all talk to the
same PSP. It offers what a merchant's PSP API offers for collect requests:

* ``collect``: send a collect request to a payer's VPA, under the merchant's own
  transaction reference (unique: a reference seen before is refused as a duplicate, as UPI
  refuses a reused transaction id);
* ``status``: the transaction's status by reference — ``PENDING``, ``SUCCESS``,
  ``FAILURE`` or ``DEEMED`` (the payer's bank debited, the beneficiary's bank has not
  confirmed the credit), with a response code and reason;
* ``lookup``: whether a reference is known at all, for reconciliation, without counting as
  a status check.

What each payer's transaction does is scripted (:class:`Script`): the status the n-th check
sees, and faults on the wire — a collect whose answer is lost after the PSP accepted it, a
collect that times out before reaching it, a status check that fails. A collect still
``PENDING`` when its expiry passes reads ``FAILURE`` with ``U69`` (collect expired), as UPI
expires it. Every request is logged (:meth:`Psp.requests`), which is how the tests count
collect requests.

The PSP checks the **fence** underway sends with a call and with a reconcile query
(``CallInfo.fence``): once a reconcile has asked about a reference with fence F, a collect
for it with a lower fence — an attempt delayed on the wire, arriving after the query said
"not here" — is refused, so "not happened" stays true.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from underway.errors import OutcomeUnknown

Status = Literal["PENDING", "SUCCESS", "FAILURE", "DEEMED"]
Fault = Literal["none", "lost_response", "timeout_unseen"]

CODES: dict[str, str] = {
    "00": "approved",
    "ZA": "transaction declined by the payer",
    "U30": "debit has failed",
    "U69": "collect request expired",
    "DEEMED": "deemed approved: the payer's bank debited, the beneficiary bank has not "
              "confirmed the credit",
    "REVERSED": "credit not confirmed; the debit was reversed to the payer",
}
"""Response codes the scripts use, and what they say."""


class Reply(BaseModel):
    """What one status check sees."""

    model_config = ConfigDict(frozen=True)
    status: Status
    code: str = ""


class Script(BaseModel):
    """What a payer's transaction does."""

    model_config = ConfigDict(frozen=True)
    replies: tuple[Reply, ...] = (Reply(status="SUCCESS", code="00"),)
    """What the n-th status check sees; the last one repeats."""
    collect_fault: Fault = "none"
    """``lost_response``: the PSP accepts the first collect, its answer never arrives;
    ``timeout_unseen``: the first collect times out before it reaches the PSP."""
    failing_checks: tuple[int, ...] = ()
    """Status checks (1 for the first) that fail on the wire."""
    expires: bool = True
    """False: the PSP keeps answering ``PENDING`` past the collect's expiry (a PSP out of
    step with the switch), which only a person can settle."""


def replies(*spec: str) -> tuple[Reply, ...]:
    """``replies("PENDING", "FAILURE/ZA")``: replies from ``STATUS[/CODE]`` strings."""
    out = []
    for s in spec:
        status, _, code = s.partition("/")
        out.append(Reply(status=status, code=code or ("00" if status == "SUCCESS" else "")))
    return tuple(out)


class DuplicateReference(Exception):
    """A collect reused a transaction reference: UPI refuses it (and it is a bug to send)."""


class StaleFence(Exception):
    """A collect arrived with a fence below one a reconcile query already presented."""


class UnknownReference(Exception):
    """No transaction has this reference."""


class Psp:
    """The PSP, its state in ``path`` (SQLite); ``clock`` tells it the time (expiry)."""

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()
        with closing(sqlite3.connect(self.path, timeout=30)) as db:
            db.executescript("""
                CREATE TABLE IF NOT EXISTS scripts (vpa TEXT PRIMARY KEY, script TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS collects (
                    txn_ref TEXT PRIMARY KEY, vpa TEXT NOT NULL, amount TEXT NOT NULL,
                    note TEXT NOT NULL, expires_at REAL NOT NULL, checks INTEGER NOT NULL,
                    fence INTEGER NOT NULL, rrn TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS faults_used (vpa TEXT PRIMARY KEY);
                CREATE TABLE IF NOT EXISTS fences (txn_ref TEXT PRIMARY KEY,
                                                   fence INTEGER NOT NULL);
                CREATE TABLE IF NOT EXISTS requests (
                    seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, txn_ref TEXT NOT NULL,
                    at REAL NOT NULL, outcome TEXT NOT NULL);
            """)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            try:
                db.execute("BEGIN IMMEDIATE")
                yield db
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            finally:
                db.close()

    def script(self, vpa: str, script: Script) -> None:
        """What transactions of payer ``vpa`` do from now on."""
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO scripts VALUES (?, ?)",
                       (vpa, script.model_dump_json()))

    # -- the API -----------------------------------------------------------------------------

    def collect(self, txn_ref: str, vpa: str, amount: Decimal, note: str,
                expiry_minutes: int, *, fence: int) -> dict[str, Any]:
        """Send a collect request; the answer (status ``PENDING``) or a scripted fault."""
        now = self.clock()
        fault, outcome = "none", "accepted"
        with self._db() as db:
            script = self._script(db, vpa)
            if script.collect_fault != "none" and db.execute(
                    "SELECT 1 FROM faults_used WHERE vpa = ?", (vpa,)).fetchone() is None:
                db.execute("INSERT INTO faults_used VALUES (?)", (vpa,))
                fault = script.collect_fault
            if fault == "timeout_unseen":
                outcome = "lost on the way"  # the PSP never sees it, and logs nothing
            elif db.execute("SELECT 1 FROM collects WHERE txn_ref = ?",
                            (txn_ref,)).fetchone() is not None:
                outcome = "duplicate"
            elif fence < self._fence(db, txn_ref):
                outcome = "stale_fence"
            else:
                (n,) = db.execute("SELECT count(*) FROM collects").fetchone()
                db.execute("INSERT INTO collects VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
                           (txn_ref, vpa, str(amount), note, now + 60 * expiry_minutes,
                            fence, f"{400_000_000_000 + n}"))
            if fault != "timeout_unseen":
                self._log(db, "collect", txn_ref, now, outcome)
        if outcome == "duplicate":
            raise DuplicateReference(f"transaction reference {txn_ref} was used before")
        if outcome == "stale_fence":
            raise StaleFence(f"collect {txn_ref} carries fence {fence}, below one already "
                             "presented for it")
        if fault == "lost_response":
            raise OutcomeUnknown(f"connection reset after sending collect {txn_ref}; the PSP "
                                 "may have accepted it")
        if fault == "timeout_unseen":
            raise OutcomeUnknown(f"collect {txn_ref} timed out; it may have reached the PSP")
        return {"txn_ref": txn_ref, "status": "PENDING", "expires_at": now + 60 * expiry_minutes}

    def status(self, txn_ref: str) -> dict[str, Any]:
        """The transaction's status now (one status check of its script)."""
        now = self.clock()
        reply: Reply | None = None
        with self._db() as db:
            row = db.execute("SELECT vpa, expires_at, checks, rrn FROM collects "
                             "WHERE txn_ref = ?", (txn_ref,)).fetchone()
            if row is None:
                self._log(db, "status", txn_ref, now, "unknown")
            else:
                vpa, expires_at, checks, rrn = row
                checks += 1
                db.execute("UPDATE collects SET checks = ? WHERE txn_ref = ?",
                           (checks, txn_ref))
                script = self._script(db, vpa)
                if checks in script.failing_checks:
                    self._log(db, "status", txn_ref, now, "network_error")
                else:
                    reply = script.replies[min(checks, len(script.replies)) - 1]
                    if reply.status == "PENDING" and now >= expires_at and script.expires:
                        reply = Reply(status="FAILURE", code="U69")
                    self._log(db, "status", txn_ref, now, reply.status)
        if row is None:
            raise UnknownReference(f"no transaction {txn_ref}")
        if reply is None:
            raise ConnectionError(f"status check of {txn_ref}: connection refused")
        return {"txn_ref": txn_ref, "status": reply.status, "code": reply.code,
                "reason": CODES.get(reply.code, ""),
                "rrn": rrn if reply.status in ("SUCCESS", "DEEMED") else ""}

    def lookup(self, txn_ref: str, *, fence: int) -> dict[str, Any] | None:
        """Whether a collect with this reference was accepted (what ``collect`` answered),
        remembering ``fence``; None when the PSP never saw one."""
        now = self.clock()
        with self._db() as db:
            db.execute("INSERT INTO fences VALUES (?, ?) ON CONFLICT (txn_ref) DO UPDATE "
                       "SET fence = max(fence, excluded.fence)", (txn_ref, fence))
            row = db.execute("SELECT expires_at FROM collects WHERE txn_ref = ?",
                             (txn_ref,)).fetchone()
            self._log(db, "lookup", txn_ref, now, "found" if row else "not_found")
        if row is None:
            return None
        return {"txn_ref": txn_ref, "status": "PENDING", "expires_at": row[0]}

    # -- what the tests and the demo read ----------------------------------------------------

    def requests(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every request received, in order (``kind``: only ``collect``, ``status`` or
        ``lookup``)."""
        with self._db() as db:
            rows = db.execute("SELECT kind, txn_ref, at, outcome FROM requests ORDER BY seq")
            found = [dict(zip(("kind", "txn_ref", "at", "outcome"), r, strict=True))
                     for r in rows]
        return [r for r in found if kind is None or r["kind"] == kind]

    def _script(self, db: sqlite3.Connection, vpa: str) -> Script:
        row = db.execute("SELECT script FROM scripts WHERE vpa = ?", (vpa,)).fetchone()
        return Script.model_validate(json.loads(row[0])) if row else Script()

    @staticmethod
    def _fence(db: sqlite3.Connection, txn_ref: str) -> int:
        row = db.execute("SELECT fence FROM fences WHERE txn_ref = ?", (txn_ref,)).fetchone()
        return int(row[0]) if row else -1

    @staticmethod
    def _log(db: sqlite3.Connection, kind: str, txn_ref: str, at: float, outcome: str) -> None:
        db.execute("INSERT INTO requests (kind, txn_ref, at, outcome) VALUES (?, ?, ?, ?)",
                   (kind, txn_ref, at, outcome))
