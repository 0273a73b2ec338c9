"""Moved to :mod:`underway.store.memory.rows`; this path goes in the next release."""

from __future__ import annotations

from ._moved import moved
from .memory.rows import MemoryRows

__all__ = ["MemoryRows"]
__moved_to__ = "underway.store.memory.rows"

moved(__name__, __moved_to__)
