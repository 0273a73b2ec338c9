"""Patch markers: ``ctx.version(change_id)``, decided once per run and journaled, so a run
parked mid-step under old code keeps the calls it journaled while new runs take the new
code path (docs/versioning.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import events as ev

if TYPE_CHECKING:
    from ._activation import Activation


def decide_version(act: Activation, change_id: str, step: str, *, calls: int,
                   values: int) -> bool:
    """The run's answer to ``ctx.version(change_id)``, asked after the step made ``calls``
    calls and used ``values`` journaled values.

    A run that answered before gets the same answer. Otherwise the answer is new (True)
    unless the step's journal already goes past this point — more calls or values than
    this execution has made — without the marker: old code made those, so the run keeps
    the old path (False) and its journaled calls still match. The answer is journaled
    (``VersionMarked``) with whatever the step commits next.
    """
    s = act.state
    known = s.versions.get(change_id)
    if known is not None:
        return known
    behind = len(s.calls) > calls or len(s.values) > values
    patched = not behind
    act.buffer(ev.VersionMarked(change_id=change_id, patched=patched, step=step))
    return patched
