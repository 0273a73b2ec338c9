"""Data subjects, purposes and consent references: what a run is about, what it is for,
and on what consent it acts (see docs/data-protection.md).

A run may name its **data subject** — the person its personal data is about — as an
opaque id (a customer number, never the personal data itself: the id is stored in the
clear on the run's row so that runs can be found, held and erased by subject). Every run
has a **purpose** (``operations`` unless given), and may carry the **reference** of the
consent it acts on (a consent manager's artefact id, a form's id). Each is checked here,
with an error naming the field, before anything is stored.

While the engine runs a run's code — its steps, and the tools and hooks they call — the
run is the **acting run** (:func:`acting_run`). Stores kept beside the journal (the
knowledge base) read it to tag what the run writes with the run's subject, so that
erasing the subject reaches it.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from .errors import ConfigurationError

__all__ = [
    "CONSENT_STATES",
    "DEFAULT_PURPOSE",
    "ActingRun",
    "ConsentState",
    "acting_for",
    "acting_run",
    "check_purpose",
    "check_reference",
    "check_subject",
    "subject_of_write",
]

DEFAULT_PURPOSE = "operations"
"""The purpose of a run that names none."""

ConsentState = Literal["granted", "withdrawn"]
"""Where a subject's consent for one purpose stands."""

CONSENT_STATES: tuple[ConsentState, ...] = ("granted", "withdrawn")
"""Every consent state."""

MAX_ID = 200
"""The longest a subject id or a consent reference may be."""

_PURPOSE = re.compile(r"[a-z][a-z0-9_.\-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_subject(subject: object, *, field: str = "subject") -> str:
    """``subject`` when it is a usable data subject id: a string of 1 to 200 characters
    without whitespace or control characters. Otherwise :class:`ConfigurationError`
    naming ``field`` and the problem."""
    if not isinstance(subject, str):
        raise ConfigurationError(f"{field} must be a string (an opaque id), not "
                                 f"{type(subject).__name__}")
    if not subject:
        raise ConfigurationError(f"{field} must not be empty")
    if len(subject) > MAX_ID:
        raise ConfigurationError(f"{field} is {len(subject)} characters long; at most "
                                 f"{MAX_ID}")
    if any(c.isspace() for c in subject) or _CONTROL.search(subject):
        raise ConfigurationError(
            f"{field} {subject!r} holds whitespace or control characters; use an opaque "
            "id such as a customer number (never the personal data itself)")
    return subject


def check_purpose(purpose: object, *, field: str = "purpose") -> str:
    """``purpose`` when it is a purpose name: a lowercase letter, then up to 63 lowercase
    letters, digits, ``_``, ``.`` or ``-`` (``operations``, ``marketing``,
    ``collections.reminders``). Otherwise :class:`ConfigurationError` naming ``field``."""
    if not isinstance(purpose, str) or not _PURPOSE.fullmatch(purpose):
        raise ConfigurationError(
            f"{field} must be a purpose name (a lowercase letter, then up to 63 lowercase "
            f"letters, digits, '_', '.' or '-', e.g. 'marketing'), not {purpose!r}")
    return purpose


def check_reference(reference: object, *, field: str = "consent") -> str:
    """``reference`` when it is a usable consent reference: a string of 1 to 200
    characters, without control characters or whitespace at either end. Otherwise
    :class:`ConfigurationError` naming ``field``."""
    if not isinstance(reference, str):
        raise ConfigurationError(f"{field} must be a string (a consent reference), not "
                                 f"{type(reference).__name__}")
    if not reference or reference != reference.strip():
        raise ConfigurationError(f"{field} {reference!r} must be non-empty, without spaces "
                                 "around it")
    if len(reference) > MAX_ID:
        raise ConfigurationError(f"{field} is {len(reference)} characters long; at most "
                                 f"{MAX_ID}")
    if _CONTROL.search(reference):
        raise ConfigurationError(f"{field} {reference!r} holds control characters")
    return reference


@dataclass(frozen=True, slots=True)
class ActingRun:
    """The run whose code is running: its tenant, id and data subject (None: it names
    none)."""

    tenant_id: str
    run_id: str
    subject: str | None


_ACTING: contextvars.ContextVar[ActingRun | None] = contextvars.ContextVar(
    "underway_acting_run", default=None)


def acting_run() -> ActingRun | None:
    """The run whose code is running here, or None outside the engine's activations.

    It follows the code into the tools it calls, ``asyncio.to_thread`` and the stores'
    I/O threads (``run_io``); not into a thread the code starts itself."""
    return _ACTING.get()


@contextmanager
def acting_for(tenant_id: str, run_id: str, subject: str | None) -> Iterator[ActingRun]:
    """Make a run the acting one for the code inside (the engine does, around an
    activation).

    Args:
        tenant_id: The run's tenant.
        run_id: The run's id.
        subject: The run's data subject, or None.
    """
    run = ActingRun(tenant_id, run_id, subject)
    token = _ACTING.set(run)
    try:
        yield run
    finally:
        _ACTING.reset(token)


def subject_of_write(tenant_id: str, subject: str | None, *, what: str) -> str | None:
    """The data subject a write of ``what`` must carry: the acting run's, when it names one.

    A run about a subject writes only about that subject, and only in its tenant: data
    written from it is its subject's, and erasing the subject must reach it. Outside a
    run, or in a run without a subject, ``subject`` is kept as given.

    Args:
        tenant_id: The tenant the write is for.
        subject: The subject the writer named, or None.
        what: What is written, for the error (``knowledge record 'r-1'``).

    Raises:
        ConfigurationError: The acting run is about a subject, and the write names another
            subject or another tenant.
    """
    run = acting_run()
    if run is None or run.subject is None:
        return subject
    if tenant_id != run.tenant_id:
        raise ConfigurationError(
            f"run {run.run_id} of tenant {run.tenant_id!r} is about data subject "
            f"{run.subject!r} and may not write {what} for tenant {tenant_id!r}: what it "
            "writes is about its subject, and erasing the subject must reach it")
    if subject is not None and subject != run.subject:
        raise ConfigurationError(
            f"run {run.run_id} is about data subject {run.subject!r} and may not write "
            f"{what} about data subject {subject!r}: what it writes holds its own "
            "subject's data. Leave the subject out (it is the run's), or write it from a "
            "run about that subject")
    return run.subject
