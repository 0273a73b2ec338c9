"""Intake from a maildir: each new mail is acted on once, then filed as seen.

Every mail in ``DIR/new`` is read as an event (:mod:`._mail`), acted on through intake
and, after the intake committed, moved to ``DIR/cur`` with the seen flag (``:2,S``) by one
rename. A crash between the commit and the rename leaves the mail in ``new``: the next
pass acts on it again, intake answers ``duplicate`` (its key is the ``Message-ID``) and
the mail is moved. A malformed mail (no ``Message-ID``, no sender, no route, refused by
its route) is filed in the maildir folder ``DIR/.dead`` (Maildir++), its bytes unchanged
below a first header that says why (``Underway-Dead-Letter-Reason``). When the store
fails, the mail stays in ``new`` and the watcher waits (a backoff) before its next pass.
"""

from __future__ import annotations

import contextlib
import logging
import mailbox
import os
import random
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ... import faults
from ...client import Client
from ...errors import ConfigurationError
from ...retry import RetryPolicy
from ..intake import IntakeError, IntakeEvent, IntakeResult, Routes, intake
from ._handling import (
    AFTER_COMMIT,
    AFTER_DEAD_LETTER,
    BEFORE_COMMIT,
    DEFAULT_BACKOFF,
    IntakeCounts,
    Outcome,
    error_text,
    transient,
)
from ._mail import MailOptions, event_from_mail
from ._messages import REASON_HEADER, MalformedMessage, header_reason

log = logging.getLogger("underway.intake")

DEAD_FOLDER = "dead"
"""The maildir folder (``DIR/.dead``) malformed mails are filed in."""


@dataclass
class MaildirIntake:
    """Take in the mails delivered to maildir ``directory`` (see the module's docstring).

    :meth:`process_new` makes one pass over ``new``; :meth:`watch` makes one every
    ``interval`` seconds until stopped. Mails are read in the order they were delivered
    (their files' modification times, then their names)."""

    client: Client
    routes: Routes
    directory: Path
    options: MailOptions = field(default_factory=MailOptions)
    backoff: RetryPolicy = DEFAULT_BACKOFF
    counts: IntakeCounts = field(default_factory=IntakeCounts)
    _failures: int = 0

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        missing = [d for d in ("new", "cur", "tmp") if not (self.directory / d).is_dir()]
        if missing:
            raise ConfigurationError(
                f"{self.directory} is not a maildir: it has no {', '.join(missing)} "
                "folder")
        if not isinstance(self.routes, Routes):
            self.routes = Routes(self.routes)
        self._box = mailbox.Maildir(self.directory, create=False)

    def process_new(self) -> list[Outcome]:
        """Act on every mail now in ``new``, oldest first. Stops at the first store
        failure (that mail stays in ``new``, its outcome ``retry``)."""
        outcomes: list[Outcome] = []
        for path in self._arrived():
            outcome = self._one(path)
            if outcome is None:
                continue
            outcomes.append(outcome)
            if outcome.action == "retry":
                break
        return outcomes

    def watch(self, stop: threading.Event, *, interval: float = 1.0) -> IntakeCounts:
        """Pass over ``new`` every ``interval`` seconds until ``stop`` is set (a mail
        being acted on is finished first); after a store failure, wait the backoff
        instead."""
        if not interval > 0:
            raise ConfigurationError(f"interval must be positive, not {interval}")
        while not stop.is_set():
            outcomes = self.process_new()
            if outcomes and outcomes[-1].action == "retry":
                self._failures += 1
                wait = self.backoff.delay(self._failures + 1, random.random())
            else:
                wait = interval
            stop.wait(wait)
        return self.counts

    def _arrived(self) -> list[Path]:
        """The mails in ``new``, in the order they were written (then by name)."""
        found = []
        for entry in os.scandir(self.directory / "new"):
            if entry.name.startswith("."):
                continue
            try:
                found.append((entry.stat().st_mtime_ns, entry.name, Path(entry.path)))
            except FileNotFoundError:
                continue  # filed by another watcher meanwhile
        return [path for _, _, path in sorted(found)]

    def _one(self, path: Path) -> Outcome | None:
        try:
            raw = path.read_bytes()
            received = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        except FileNotFoundError:
            return None  # another watcher filed it
        try:
            event = event_from_mail(raw, self.options, received)
        except MalformedMessage as exc:
            return self._dead(path, raw, None, str(exc))
        faults.point(BEFORE_COMMIT)
        try:
            result = self._act(event)
        except IntakeError as exc:
            return self._dead(path, raw, event.idempotency_key, str(exc))
        except Exception as exc:
            if not transient(exc):
                log.exception("mail %s failed unexpectedly", path.name)
                return self._dead(path, raw, event.idempotency_key,
                                  f"unexpected error: {error_text(exc)}")
            return self._stays(path, event.idempotency_key, f"the store failed ({error_text(exc)})")
        if result.action == "ignored":
            return self._dead(path, raw, event.idempotency_key, result.reason)
        faults.point(AFTER_COMMIT)
        try:
            self._file_as_seen(path)
        except OSError as exc:
            # Acted on: the next pass finds the key done, and tries the rename again.
            return self._stays(path, event.idempotency_key,
                               f"it could not be moved to cur ({error_text(exc)})")
        self._failures = 0
        self.counts.acted += 1
        self.counts.duplicates += result.action == "duplicate"
        log.info("mail %s key %r: %s run %s", path.name, event.idempotency_key,
                 result.action, result.run_id)
        return Outcome("acted", event.idempotency_key, result)

    def _stays(self, path: Path, key: str | None, reason: str) -> Outcome:
        log.warning("mail %s key %r: %s; it stays in new", path.name, key, reason)
        self.counts.retried += 1
        return Outcome("retry", key, reason=reason)

    def _act(self, event: IntakeEvent) -> IntakeResult:
        return intake(self.client, event, self.routes)

    def _file_as_seen(self, path: Path) -> None:
        unique = path.name.split(self._box.colon, 1)[0]
        with contextlib.suppress(FileNotFoundError):  # another watcher filed it
            os.rename(path, self.directory / "cur" / f"{unique}{self._box.colon}2,S")

    def _dead(self, path: Path, raw: bytes, key: str | None, reason: str) -> Outcome:
        try:
            folder = self._file_dead(path, raw, reason)
        except OSError as exc:
            return self._stays(path, key, f"it could not be filed in .{DEAD_FOLDER} "
                               f"({error_text(exc)}); it was: {reason}")
        log.warning("mail %s key %r filed in %s: %s", path.name, key, folder, reason)
        self.counts.dead += 1
        return Outcome("dead", key, reason=reason)

    def _file_dead(self, path: Path, raw: bytes, reason: str) -> Path:
        """File the mail at ``path`` in the dead folder, the reason its first header."""
        folder = self._dead_folder()
        eol = b"\r\n" if b"\r\n" in raw[:raw.find(b"\n") + 1 or len(raw)] else b"\n"
        # One line of ASCII, within a mail header line's 998 characters.
        letter = f"{REASON_HEADER}: {header_reason(reason, 900)}".encode("ascii") + eol + raw
        # Same name in tmp, then in new: filing it again after a crash replaces the first.
        tmp, final = folder / "tmp" / path.name, folder / "new" / path.name
        with open(tmp, "wb") as out:
            out.write(letter)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, final)
        faults.point(AFTER_DEAD_LETTER)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return folder

    def _dead_folder(self) -> Path:
        folder = self.directory / f".{DEAD_FOLDER}"
        if not (folder / "new").is_dir():
            self._box.add_folder(DEAD_FOLDER)
        return folder
