"""Moved to :mod:`underway.store.memory.budgets`; this path goes in the next release."""

from __future__ import annotations

from ._moved import moved
from .memory.budgets import MemoryBudgets

__all__ = ["MemoryBudgets"]
__moved_to__ = "underway.store.memory.budgets"

moved(__name__, __moved_to__)
