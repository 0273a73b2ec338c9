"""Moved to :mod:`underway.store.regional.keys`; this path goes in the next release."""

from __future__ import annotations

from ._moved import moved
from .regional.keys import RegionalKeys

__all__ = ["RegionalKeys"]
__moved_to__ = "underway.store.regional.keys"

moved(__name__, __moved_to__)
