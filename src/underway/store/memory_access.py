"""Moved to :mod:`underway.store.memory.access`; this path goes in the next release."""

from __future__ import annotations

from ._moved import moved
from .memory.access import MemoryAccess

__all__ = ["MemoryAccess"]
__moved_to__ = "underway.store.memory.access"

moved(__name__, __moved_to__)
