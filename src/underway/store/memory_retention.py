"""Moved to :mod:`underway.store.memory.retention`; this path goes in the next release."""

from __future__ import annotations

from ._moved import moved
from .memory.retention import MemoryRetention

__all__ = ["MemoryRetention"]
__moved_to__ = "underway.store.memory.retention"

moved(__name__, __moved_to__)
