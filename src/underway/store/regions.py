"""Moved to :mod:`underway.store.regional`; this path goes in the next release."""

from __future__ import annotations

from ._moved import moved
from .regional import RegionalStore

__all__ = ["RegionalStore"]
__moved_to__ = "underway.store.regional"

moved(__name__, __moved_to__)
