"""Auditing journals, and anchoring their heads outside the database.

The hash chain of a run proves its events were not changed by anyone who did not
recompute the hashes. Someone who can write the database can recompute them, so the heads
of every run are **anchored**: signed with a key the database does not hold and appended
to a log kept elsewhere (:func:`anchor`). :func:`verify` checks every run's chain and row,
and with the anchor log (:func:`read_anchors`) proves that today's journal still extends
every anchored head. docs/audit.md states what is detected with and without anchors.

Verifying returns a :class:`Report` of :class:`Finding` s (tenant, run, seq, reason);
nothing stored in the database makes it raise.
"""

from __future__ import annotations

from ._anchor_log import FileAnchorLog
from ._anchors import (
    Anchoring,
    AnchorRecord,
    AnchorSink,
    MalformedRecord,
    anchor,
    key_id,
    load_public_key,
)
from ._findings import Finding, Report
from ._merkle import inclusion_proof, merkle_root, verify_inclusion
from ._verify import (
    RUN_CHECKS,
    Anchors,
    AuditedRun,
    RunCheck,
    check_anchored,
    check_chain,
    read_anchors,
    verify,
)

__all__ = [
    "RUN_CHECKS",
    "AnchorRecord",
    "AnchorSink",
    "Anchoring",
    "Anchors",
    "AuditedRun",
    "FileAnchorLog",
    "Finding",
    "MalformedRecord",
    "Report",
    "RunCheck",
    "anchor",
    "check_anchored",
    "check_chain",
    "inclusion_proof",
    "key_id",
    "load_public_key",
    "merkle_root",
    "read_anchors",
    "verify",
    "verify_inclusion",
]
