"""Moved to :mod:`underway.store.memory.consent`; this path goes in the next release."""

from __future__ import annotations

from ._moved import moved
from .memory.consent import MemoryConsent

__all__ = ["MemoryConsent"]
__moved_to__ = "underway.store.memory.consent"

moved(__name__, __moved_to__)
