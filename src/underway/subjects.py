"""Data subjects, purposes and consent references: what a run is about, what it is for,
and on what consent it acts (see docs/data-protection.md).

A run may name its **data subject** — the person its personal data is about — as an
opaque id (a customer number, never the personal data itself: the id is stored in the
clear on the run's row so that runs can be found, held and erased by subject). Every run
has a **purpose** (``operations`` unless given), and may carry the **reference** of the
consent it acts on (a consent manager's artefact id, a form's id). Each is checked here,
with an error naming the field, before anything is stored.
"""

from __future__ import annotations

import re
from typing import Literal

from .errors import ConfigurationError

__all__ = [
    "CONSENT_STATES",
    "DEFAULT_PURPOSE",
    "ConsentState",
    "check_purpose",
    "check_reference",
    "check_subject",
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
