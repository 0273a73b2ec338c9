"""API keys of ``underway serve``: roles, what each role may do, issuing a key and checking
a token.

A key belongs to one tenant and holds one role. Its token (``uwk_<key id>_<secret>``, 256
random bits of secret) is shown once, when the key is issued; the store keeps only the
SHA-256 of the token, which is enough for a token this random, and a presented token is
compared with it in constant time.

=========  =========================================================================
role       may
=========  =========================================================================
viewer     read: runs, their events, pending approvals, usage, audits, schedules, queues
operator   read; start, signal, cancel, resume and resolve runs
approver   read; submit signed decisions
intake     post outside events to ``/v1/intake/{source}`` (and nothing else)
admin      read; steer like an operator; manage API keys, approvers, webhook secrets;
           read the access log
=========  =========================================================================

Roles are sets of permissions (:data:`PERMISSIONS`), not a ladder: operator and approver
each include what a viewer may do, admin includes operator's, and no role but approver
delivers decisions (they are signed by an approver's own key in any case).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Literal, get_args

from .errors import ConfigurationError
from .store.base import ApiKeyRecord, ApiKeyStore

__all__ = [
    "PERMISSIONS",
    "ROLES",
    "IssuedKey",
    "Permission",
    "Role",
    "authenticate",
    "hash_token",
    "issue_key",
    "roles_with",
]

Role = Literal["viewer", "operator", "approver", "intake", "admin"]
"""What an API key may do, as a name (see the module docstring)."""

Permission = Literal["read", "steer", "decide", "intake", "admin"]
"""One kind of request: reading, steering runs, deciding, posting intake events, admin."""

ROLES: tuple[Role, ...] = get_args(Role)
"""Every role, least to most powerful (intake aside)."""

PERMISSIONS: dict[Role, frozenset[Permission]] = {
    "viewer": frozenset({"read"}),
    "operator": frozenset({"read", "steer"}),
    "approver": frozenset({"read", "decide"}),
    "intake": frozenset({"intake"}),
    "admin": frozenset({"read", "steer", "admin"}),
}
"""What each role may do."""

TOKEN_PREFIX = "uwk_"
_ID_HEX = 16
_TOKEN = re.compile(rf"{TOKEN_PREFIX}[0-9a-f]{{{_ID_HEX}}}_[A-Za-z0-9_\-]+")
"""What every token looks like: anything else is no key's, and never reaches the store."""


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A key just issued: its stored ``record`` and the ``token``, which nothing keeps."""

    record: ApiKeyRecord
    token: str


def roles_with(permission: Permission) -> tuple[Role, ...]:
    """The roles that hold ``permission``, in :data:`ROLES` order."""
    return tuple(role for role in ROLES if permission in PERMISSIONS[role])


def hash_token(token: str) -> str:
    """The SHA-256 hex of a token: all the store keeps of it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def issue_key(
    store: ApiKeyStore, *, tenant_id: str, role: str, now: float, name: str = ""
) -> IssuedKey:
    """Make a key for ``tenant_id`` with ``role``, and store its hash.

    Show the token once: it cannot be recovered.

    Args:
        store: Where its hash is stored.
        tenant_id: The key's tenant.
        role: The key's role.
        now: The time now.
        name: Names the key for people.

    Returns:
        The key, with its token.

    Raises:
        ConfigurationError: An unknown role or an empty tenant.
    """
    if role not in ROLES:
        raise ConfigurationError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    if not tenant_id or tenant_id != tenant_id.strip():
        raise ConfigurationError(f"tenant {tenant_id!r} must be non-empty, without spaces "
                                 "around it")
    key_id = secrets.token_hex(_ID_HEX // 2)
    token = f"{TOKEN_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    record = ApiKeyRecord(key_id=key_id, tenant_id=tenant_id, role=role, name=name,
                          token_hash=hash_token(token), created_at=now)
    store.put_api_key(record)
    return IssuedKey(record, token)


def authenticate(store: ApiKeyStore, token: str) -> ApiKeyRecord | None:
    """The unrevoked key ``token`` belongs to, or None (a malformed token, an unknown or
    revoked key, a wrong secret: the caller cannot tell which)."""
    if not _TOKEN.fullmatch(token):
        return None
    key_id = token[len(TOKEN_PREFIX):len(TOKEN_PREFIX) + _ID_HEX]
    record = store.get_api_key(key_id)
    if record is None or record.revoked_at is not None or record.role not in ROLES:
        return None
    if not hmac.compare_digest(record.token_hash, hash_token(token)):
        return None
    return record
