"""The one rule every store applies when a key is added for a data subject's scope: none
is, once the subject was erased (its erasure log names it)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import SubjectErased
from .records import ErasureRecord

__all__ = ["refuse_erased"]


def refuse_erased(tenant_id: str, erasures: Sequence[ErasureRecord]) -> None:
    """Raise :class:`~underway.errors.SubjectErased` when ``erasures`` (the log of one of
    the tenant's subjects) holds any entry."""
    if erasures:
        last = erasures[-1]
        raise SubjectErased(
            f"data subject {last.subject!r} of tenant {tenant_id!r} was erased (by "
            f"{last.by!r}: {last.reason}); nothing about it is stored again")
