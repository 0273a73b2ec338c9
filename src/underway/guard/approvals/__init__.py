"""Signed human approvals: approvers' keys, their registry, and verifying decisions.

An approver holds an Ed25519 private key; the tenant's registry holds the public half
(:class:`ApproverRecord`) with the approver's roles. A decision on an approval request is a
:class:`SignedDecision`, made with :func:`sign_decision` where the private key lives, and
checked by :func:`verify_decision` against the journaled request (:class:`ApprovalCheck`).
It is checked again right before the tool runs
(:func:`~underway.guard.approvals.check.check_approval`). Notices to approvers are in
:mod:`underway.guard.approvals.notify`.
"""

from __future__ import annotations

from ...store.base import ApproverRecord
from .decision import ApprovalCheck, SignedDecision, sign_decision, verify_decision
from .keys import generate_keypair, load_private_key, public_key_of, write_private_key
from .registry import register_approver

__all__ = [
    "ApprovalCheck",
    "ApproverRecord",
    "SignedDecision",
    "generate_keypair",
    "load_private_key",
    "public_key_of",
    "register_approver",
    "sign_decision",
    "verify_decision",
    "write_private_key",
]
