"""Moved to :mod:`underway.store.regional.retention`; this path goes in the next release."""

from __future__ import annotations

from ._moved import moved
from .regional.retention import RegionalRetention

__all__ = ["RegionalRetention"]
__moved_to__ = "underway.store.regional.retention"

moved(__name__, __moved_to__)
