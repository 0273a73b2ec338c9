"""Moved to :mod:`underway.store.memory.keys`; this path goes in the next release."""

from __future__ import annotations

from ._moved import moved
from .memory.keys import MemoryKeys

__all__ = ["MemoryKeys"]
__moved_to__ = "underway.store.memory.keys"

moved(__name__, __moved_to__)
