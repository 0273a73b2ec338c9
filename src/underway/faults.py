"""Named fault-injection points for crash tests.

Set ``UNDERWAY_CRASH_AFTER=N`` and the process kills itself with SIGKILL on the N-th time
it passes any fault point (or only points named in ``UNDERWAY_CRASH_POINTS``, comma
separated). Unset, :func:`point` costs one attribute check.
"""

from __future__ import annotations

import os
import signal

__all__ = ["POINTS", "hits", "point"]

POINTS = (
    "append.before_commit",
    "append.after_commit",
    "group.before_commit",
    "group.uncommitted",
    "group.after_commit",
    "effect.before_run",
    "effect.after_run",
    "step.before_run",
    "child.before_create",
    "child.after_create",
    "start.eager_after_commit",
    "signals.after_commit",
    "reseal.after_batch",
    "retention.before_purge",
    "retention.purge_uncommitted",
    "retention.after_purge",
    "retention.before_collect",
    "retention.before_forget",
    "retention.forget_uncommitted",
    "erasure.before_purge",
    "erasure.before_vault",
    "erasure.before_log",
    "intake.before_commit",
    "intake.after_commit",
    "intake.after_dead_letter",
    "bulk.before_action",
    "bulk.after_action",
    "spans.before_send",
    "spans.after_send",
    "blob.after_chunk",
)
"""Every fault point the engine, the retention sweep, an erasure and the queue and mail
consumers pass (``group.uncommitted`` inside a group commit's transaction, before it
commits; ``retention.purge_uncommitted`` inside a purge's transaction, before it commits;
``retention.forget_uncommitted`` likewise inside a forget's;
``start.eager_after_commit`` after an eager start committed a run with its lease, before
anything activates it; ``intake.after_commit`` after a message's intake committed, before
it is acknowledged or filed as seen; ``bulk.before_action`` and ``bulk.after_action``
around each run's action in a bulk operation; ``spans.before_send`` and
``spans.after_send`` around the sending of a batch of spans, before its runs' span cursors
move; ``blob.after_chunk`` after each chunk of a large value is written, before the event
that refers to it)."""

_remaining = int(os.environ.get("UNDERWAY_CRASH_AFTER", "0") or 0)
_only = frozenset(p for p in os.environ.get("UNDERWAY_CRASH_POINTS", "").split(",") if p)
_hits = 0


def point(name: str) -> None:
    """Pass fault point ``name``; may SIGKILL the process when crash injection is on."""
    global _hits
    if not _remaining or (_only and name not in _only):
        return
    _hits += 1
    if _hits >= _remaining:
        os.kill(os.getpid(), signal.SIGKILL)


def hits() -> int:
    """How many armed fault points this process has passed."""
    return _hits
