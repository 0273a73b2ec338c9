"""Registering approvers: checking an approver's id, roles and public key before the store
keeps them."""

from __future__ import annotations

from collections.abc import Iterable

from ...errors import ConfigurationError
from ...store.base import ApproverRecord, CoreStore
from .keys import decode_public_key

__all__ = ["register_approver"]


def register_approver(
    store: CoreStore,
    approver_id: str,
    *,
    public_key: str,
    roles: Iterable[str],
    now: float,
    tenant_id: str = "default",
) -> ApproverRecord:
    """Register ``approver_id`` in the tenant.

    It replaces any earlier registration and lifts its revocation.

    Args:
        store: The store.
        approver_id: The approver.
        public_key: Base64 of the raw 32-byte Ed25519 key.
        roles: The approver's roles.
        now: The time now.
        tenant_id: The tenant.

    Returns:
        The stored record.

    Raises:
        ConfigurationError: An empty or spaced id or role, or a public key that is not a
            base64 Ed25519 key.
    """
    _check_name("approver id", approver_id)
    wanted = list(dict.fromkeys(roles))
    for role in wanted:
        _check_name("role", role)
    key = public_key.strip()
    decode_public_key(key)
    record = ApproverRecord(
        tenant_id=tenant_id, approver_id=approver_id, public_key=key, roles=tuple(wanted),
        created_at=now,
    )
    store.put_approver(record)
    return record


def _check_name(what: str, value: str) -> None:
    if not value or value != value.strip() or any(c.isspace() for c in value):
        raise ConfigurationError(f"{what} {value!r} must be non-empty and contain no spaces")
