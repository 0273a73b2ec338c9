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
    """Register ``approver_id`` in the tenant with ``public_key`` (base64 of the raw 32-byte
    Ed25519 key) and ``roles``, replacing any earlier registration (and lifting its
    revocation). Returns the stored record.

    Raises :class:`~underway.errors.ConfigurationError` for an empty or spaced id or role,
    or a public key that is not a base64 Ed25519 key.
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
