"""Key rotation: a KEK rotation re-wraps data keys (cheap); a data-key rotation makes a new
key the tenant's active one at once and then, in the background, seals again under it every
stored payload the journal does not commit to — blobs (the bulk: conversations, documents),
unconsumed signals, schedules' input — as a run of the built-in flow :data:`ROTATION_FLOW`:
journaled (its events say what was done and when), resumable by any worker after a crash
(each batch is an idempotent call), and visible like any run (``underway keys ls``,
``underway runs show``).

Journal events and checkpoints are not sealed again: the hash chain and the anchors outside
the database cover events' stored bytes, and the event that commits a checkpoint commits to
its stored bytes. They stay under the key that sealed them, which a rotation retires but
keeps (re-wrapped under the current KEK) to open them; a run's next checkpoint is sealed
under the new key.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .. import faults
from .._chunked import is_manifest
from ..codec import (
    Codec,
    Where,
    blob_where,
    box_of,
    is_sealed,
    schedule_where,
    signal_where,
)
from ..effects import CallInfo, tool
from ..errors import ConfigurationError
from ..flow import Flow, Next, RunContext
from ..store.base import Store
from ..store.records import SEALED_KINDS, SealedRow
from ._box import box_key_id, seal_box
from .envelope import Envelope

__all__ = ["ROTATION_FLOW", "RotationInput", "RotationState", "reseal", "rotation_flow"]

ROTATION_FLOW = "underway.keys.rotate"
"""The flow whose runs re-seal a tenant's payloads after a data-key rotation."""

BATCH = 200
"""Rows read and sealed again per call."""

_LINK = b'{"p":"'
_NODE = 72


class RotationInput(BaseModel):
    """What a rotation run does: seal again under ``key_id`` (the tenant's active key
    since the rotation began) what ``by`` asked to rotate."""

    key_id: str
    by: str = "operator"
    kinds: list[str] = list(SEALED_KINDS)


class RotationState(BaseModel):
    """How far a rotation run has come: the kind of row being swept, the position of the
    last row done, and how many rows of each kind were sealed again."""

    kind: int = 0
    after: list[str] = []
    resealed: dict[str, int] = {}


def envelope_of(store: Store) -> Envelope:
    """The store's :class:`Envelope`; a clear error when encryption is not on for it."""
    sealer = store.codec.sealer
    if not isinstance(sealer, Envelope):
        raise ConfigurationError(
            "encryption is not on for this store: give it keys first (underway.crypto."
            "encrypt, [encryption] in underway.toml, or --keyring)"
        )
    return sealer


def _where(row: SealedRow) -> Where:
    p = row.position
    if row.kind == "blob":
        return blob_where(row.tenant_id, p[0])
    if row.kind == "signal":
        return signal_where(row.tenant_id, p[1], str(row.name))
    return schedule_where(row.tenant_id, p[0])


def _plain_link(data: bytes) -> bytes:
    """The link in front of a plaintext chain node (``{"p":"<64 hex>",``), else nothing."""
    if data[:6] == _LINK and data[70:76] == b'","x":' and all(
            c in b"0123456789abcdef" for c in data[6:70]):
        return data[:_NODE]
    return b""


def reseal(
    store: Store, tenant_id: str, kind: str, *, after: tuple[str, ...] = (),
    limit: int = BATCH,
) -> tuple[tuple[str, ...] | None, int]:
    """Seal one batch of the tenant's rows again under its active key.

    The rows were sealed under another key, or stored in plaintext before encryption was
    turned on. They are stored where nobody changed them meanwhile. A row sealed under a data
    subject's key stays as it is: erasing the subject must still reach it. Safe to repeat: a
    row already under the active key is left alone.

    Args:
        store: The store.
        tenant_id: The tenant.
        kind: The kind of rows.
        after: The position to start after.
        limit: The most rows in the batch.

    Returns:
        The position to go on after (None: the kind is done), and how many rows were sealed
        again.
    """
    envelope = envelope_of(store)
    codec: Codec = store.codec
    # Read afresh: this process may know the key the rotation retired as active still.
    active = envelope.keys.current(tenant_id)
    rows = store.sealed_rows(tenant_id, kind, after=after, limit=limit)
    changed: list[tuple[SealedRow, bytes]] = []
    scopes: dict[str, str] = {}
    for row in rows:
        where = _where(row)
        if kind == "blob" and is_manifest(row.data):
            continue  # a chunked blob's row: its chunks stay under the keys that sealed them
        if is_sealed(row.data):
            box = box_of(row.data)
            key_id = box_key_id(box)
            if key_id == active.key_id:
                continue
            if key_id not in scopes:
                rec = store.get_data_key(tenant_id, key_id)
                scopes[key_id] = "" if rec is None else rec.scope
            if scopes[key_id]:
                continue  # a data subject's: it stays under the subject's key

            link = row.data[:len(row.data) - len(box)]
            raw = codec.open(box, where)
        else:
            link = _plain_link(row.data) if kind == "blob" else b""
            raw = codec.open_blob(row.data, row.position[0], tenant_id) if kind == "blob" \
                else row.data
        changed.append((row, link + seal_box(active.aead, active.key_id, raw, where.aad())))
    done = store.replace_sealed(changed) if changed else 0
    faults.point("reseal.after_batch")
    return (rows[-1].position if len(rows) == limit else None), done


def rotation_flow(store: Store) -> Flow[RotationState, RotationInput]:
    """The flow of rotation runs on ``store`` (register it with every worker of an
    encrypted database: ``underway worker`` does)."""
    flow = Flow(ROTATION_FLOW, state=RotationState, input=RotationInput)

    @tool(name="underway.keys.reseal", idempotent=True, timeout=300.0)
    def reseal_batch(args: dict[str, Any], call: CallInfo) -> dict[str, Any]:
        """Seal one batch of a tenant's rows again under its active key."""
        after, done = reseal(store, call.tenant_id, str(args["kind"]),
                             after=tuple(args["after"]), limit=int(args["limit"]))
        return {"after": None if after is None else list(after), "resealed": done}

    @flow.step(start=True)
    async def sweep(ctx: RunContext[RotationState, RotationInput]) -> Next:
        kinds = ctx.input.kinds
        if ctx.state.kind >= len(kinds):
            return ctx.done({"key_id": ctx.input.key_id, "resealed": ctx.state.resealed})
        kind = kinds[ctx.state.kind]
        result = await ctx.call(reseal_batch, {"kind": kind, "after": ctx.state.after,
                                               "limit": BATCH})
        ctx.state.resealed[kind] = ctx.state.resealed.get(kind, 0) + int(result["resealed"])
        if result["after"] is None:
            ctx.state.kind += 1
            ctx.state.after = []
        else:
            ctx.state.after = list(result["after"])
        return ctx.goto(sweep)

    return flow
