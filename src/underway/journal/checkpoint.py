"""Checkpoints the journal vouches for.

A checkpoint caches a run's folded state at some seq N, so that recovery folds only the
events after N. It is only a cache: a worker acts on it only when the journal itself says it
is the checkpoint that was written, so an edit of the checkpoints table alone can never change
what a run does.

The binding, written in the same commit as the events it follows:

* the checkpoint's bytes are the codec encoding of ``RunState.to_json()`` — which names the
  tenant, the run and the seq N — plus ``"binding": {"v": 1, "prev": <chain hash at N-1>}``;
* the envelope of the event at seq N carries ``"checkpoint": sha256(checkpoint bytes)``, so
  the event's chain hash, and every hash after it, commits to the checkpoint's exact bytes.

A checkpoint is *trusted* when its row names seq N, its content names the same tenant, run
and seq, the event at N commits to its digest, that event chains from the hash the binding
names, and no later event commits to a newer checkpoint (the row is the latest one written).
Anything else is ignored — the state is folded from the whole journal — and, unless it is
explainable without an intruder (:attr:`Finding.benign`), reported.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..codec import Codec, Where
from ..errors import KeyUnavailable
from ..events import JSON, link_hash
from ..store.base import StoredEvent
from .state import RunState

__all__ = ["Finding", "check", "commitment", "digest", "encode"]

DIGEST_KEY = "checkpoint"
"""The envelope key through which an event commits to the checkpoint taken at its seq."""
BINDING_KEY = "binding"
"""The key in a checkpoint's content that binds it to its place in the chain."""
BINDING_VERSION = 1


def digest(stored: bytes) -> str:
    """The digest of a checkpoint's stored bytes that the journal records."""
    return hashlib.sha256(stored).hexdigest()


def encode(
    codec: Codec, state: RunState, prev_hash: str, blobs: dict[str, bytes], where: Where
) -> bytes:
    """Stored bytes of a checkpoint of ``state``, sealed when the codec seals.

    Args:
        codec: The codec.
        state: The run's state.
        prev_hash: The hash its event at ``state.seq`` chains from.
        blobs: Receives the blobs made, by address.
        where: Where it is kept.
    """
    data = state.to_json(shared=True)  # encoded right away, never kept
    data[BINDING_KEY] = {"v": BINDING_VERSION, "prev": prev_hash}
    return codec.encode(data, blobs, where)


def commitment(envelope: JSON) -> str | None:
    """The checkpoint digest an event's envelope commits to, if any."""
    value = envelope.get(DIGEST_KEY) if isinstance(envelope, dict) else None
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Finding:
    """Why a run's checkpoint row is not trusted.

    ``seq`` is the row's seq (or, for a missing row, the seq the journal committed a
    checkpoint at). ``benign`` marks what needs no intruder to explain: no row and no
    checkpoint ever committed, or a row without a binding (written before checkpoints were
    bound, or by an older worker during a rolling deploy) after the last committed one.
    """

    seq: int | None
    reason: str
    benign: bool = False


def check(
    tenant_id: str,
    run_id: str,
    row: tuple[int, bytes] | None,
    content: JSON | Exception,
    event: StoredEvent | None,
    committed: str | None,
    latest: int,
) -> Finding | None:
    """Check a run's checkpoint row against its journal; None when it can be trusted.

    A sealed checkpoint whose key is not here is checked by its digest alone. That is an
    audit without keys, or after the key was destroyed. The journal's commitment to its
    exact bytes is what makes it the checkpoint that was written. Its seal binds it to its
    tenant, run and seq for whoever opens it.

    Args:
        tenant_id: The run's tenant.
        run_id: The run.
        row: The checkpoint row, as (seq, stored bytes), if any.
        content: The row's decoded content, or why it could not be decoded.
        event: The stored event at the row's seq.
        committed: The digest that event commits to.
        latest: The highest seq known to commit to a checkpoint (0: none).
    """
    if row is None:
        if latest == 0:
            return Finding(None, "no checkpoint", benign=True)
        return Finding(latest, f"the checkpoint committed at seq {latest} is missing")
    seq, stored = row
    if isinstance(content, KeyUnavailable):
        return _check_digest(seq, stored, event, committed, latest)
    if isinstance(content, Exception):
        return Finding(seq, f"checkpoint cannot be read ({content})")
    if not isinstance(content, dict):
        return Finding(seq, "checkpoint content is not a state")
    binding = content.get(BINDING_KEY)
    if not isinstance(binding, dict):
        return Finding(
            seq, "checkpoint is not bound to the journal", benign=seq > latest
        )
    if content.get("tenant_id") != tenant_id:
        return Finding(seq, f"checkpoint belongs to tenant {content.get('tenant_id')!r}")
    if content.get("run_id") != run_id:
        return Finding(seq, f"checkpoint belongs to run {content.get('run_id')!r}")
    if content.get("seq") != seq:
        return Finding(seq, f"checkpoint holds the state at seq {content.get('seq')}, "
                            f"its row says seq {seq}")
    if event is None:
        return Finding(seq, f"the journal has no event at seq {seq}")
    if committed is None:
        return Finding(seq, f"the journal commits to no checkpoint at seq {seq}")
    if committed != digest(stored):
        return Finding(seq, f"checkpoint differs from the one the journal committed to at "
                            f"seq {seq}")
    if not _chains(binding.get("prev"), event):
        return Finding(seq, f"checkpoint is bound to another chain than the event at seq {seq}")
    if latest > seq:
        return Finding(seq, f"checkpoint is stale: the journal committed a newer one at "
                            f"seq {latest}")
    return None


def _check_digest(
    seq: int, stored: bytes, event: StoredEvent | None, committed: str | None, latest: int
) -> Finding | None:
    """What is wrong with a checkpoint row by the journal's commitment to its bytes."""
    if event is None:
        return Finding(seq, f"the journal has no event at seq {seq}")
    if committed is None:
        return Finding(seq, f"the journal commits to no checkpoint at seq {seq}")
    if committed != digest(stored):
        return Finding(seq, f"checkpoint differs from the one the journal committed to at "
                            f"seq {seq}")
    if latest > seq:
        return Finding(seq, f"checkpoint is stale: the journal committed a newer one at "
                            f"seq {latest}")
    return None


def _chains(prev: JSON, event: StoredEvent) -> bool:
    """True when ``event`` chains from ``prev``."""
    try:
        return isinstance(prev, str) and \
            link_hash(prev, event.seq, event.type, event.payload) == event.hash
    except ValueError:  # not a hex hash
        return False
