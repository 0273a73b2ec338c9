"""The last check of an approved call, made right before its tool runs.

A run that waited for an approval journals the signed decision it got. Each time the
call is about to run, the decision is verified again, against exactly this call: the
approver's key as registered now, the tool, the hash of the arguments, the role and the
expiry. A changed argument, a revoked approver or a lapsed approval stops the call.
"""

from __future__ import annotations

from pydantic import ValidationError

from ...journal.state import RunState, request_id_for
from ...store._offload import run_io
from ...store.registry import RegistryStore
from .decision import ApprovalCheck, SignedDecision, verify_decision

__all__ = ["check_approval"]


async def check_approval(
    store: RegistryStore, s: RunState, key: str, tool: str, args_hash: str, *, now: float,
) -> str | None:
    """Whether the approval journaled for call ``key`` still holds for exactly this call.

    The approver's key is read on the store's I/O threads, in one trip.

    Args:
        store: Where the tenant's approvers are registered.
        s: The run's folded state, which holds the journaled approval.
        key: The call's idempotency key.
        tool: The tool about to run (``run.finish`` for a held result).
        args_hash: The hash of the arguments it is about to run with.
        now: The time the approval must hold at.

    Returns:
        None when the approval holds; otherwise the reason it does not.
    """
    held = s.approvals.get(key)
    if held is None:
        return "no approval is journaled for this call"
    try:
        d = SignedDecision.model_validate(held.decision)
    except ValidationError:
        return "malformed decision"
    if d.decision != "approve":
        return "decision is not an approval"
    expires = held.expires_at
    check = ApprovalCheck(
        request_id=held.request_id or request_id_for(key), run_id=s.run_id,
        tenant_id=s.tenant_id, tool=tool, args_hash=args_hash,
        required_role=held.required_role,
        expires_at=float(expires) if expires is not None else d.expires_at,
    )

    def judge() -> str | None:
        approver = store.get_approver(s.tenant_id, d.approver_id)
        return verify_decision(d, check=check, approver=approver, now=now)

    return await run_io(store, judge)
