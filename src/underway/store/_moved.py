"""Old import paths of store modules that moved: each warns once, on import."""

from __future__ import annotations

import warnings


def moved(old: str, new: str) -> None:
    """Warn that module ``old`` is now ``new`` (the old path goes in the next release)."""
    warnings.warn(f"{old} moved to {new}; import it from there (the old path goes in "
                  "the next release)", DeprecationWarning, stacklevel=3)
