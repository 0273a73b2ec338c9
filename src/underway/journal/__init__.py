"""The journal: the truth of every run, and how it is read.

==================  ==========================================================
module              holds
==================  ==========================================================
``_journal``        :class:`Journal`: encoding, recovery, verifying a chain
``checks``          the checks that verify one run's journal
``state``           :class:`RunState` and the fold of events into it
``attempts``        why a step runs again: a continuation or an interruption
``checkpoint``      checkpoints bound to the journal
``blobs``           the blobs a payload refers to, followed to the end
``patch``           state patches (JSON Patch)
``projection``      the runs row the journal implies, and how a row disagrees
==================  ==========================================================

Names load on first use, so ``import underway`` stays quick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._journal import KNOWN_FOR, Journal, Verification
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "Journal": "._journal", "KNOWN_FOR": "._journal", "Verification": "._journal",
    }, globals())

__all__ = ["KNOWN_FOR", "Journal", "Verification"]
