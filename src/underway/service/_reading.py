"""What a read of run data says of itself: why (``purpose``, written to the access log) and
whether it asks to see sensitive fields (``reveal``).

Both are query parameters of every endpoint that reads run data (a query parameter, not a
header, so a browser's ``EventSource`` can send them too). ``purpose`` is free text of 1
to 100 characters without control characters (default ``operations``; the console offers
:data:`~underway.store.access.PURPOSES`). ``reveal=true`` shows the fields tools declare
sensitive; it is refused (403) unless the key's role is one of the deployment's
``reveal_roles`` (``[serve]`` of ``underway.toml``; default admin) or — for the exact
arguments and evidence of a request it is asked to decide — holds ``decide``. Secrets are
never shown. See :mod:`underway.redaction`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Query

from ..apikeys import PERMISSIONS
from ..inputs import MAX_NAME
from ..store.access import DEFAULT_PURPOSE, PURPOSE_MAX, check_purpose
from ._auth import Principal, ServiceState
from ._problems import ApiProblem, invalid


@dataclass(frozen=True, slots=True)
class Reading:
    """A read's ``purpose`` and whether it asks to ``reveal`` sensitive fields."""

    purpose: str = DEFAULT_PURPOSE
    reveal: bool = False

    def allowed(self, state: ServiceState, who: Principal, *,
                deciding: bool = False) -> Reading:
        """This reading; a 403 problem when it asks to reveal and ``who`` may not
        (``deciding``: the read is of a request the key may be asked to decide)."""
        if self.reveal and not may_reveal(state, who, deciding=deciding):
            allowed = ", ".join(sorted(state.reveal_roles)) or "none"
            raise ApiProblem(
                403, "forbidden", "Forbidden",
                f"a {who.role} key may not reveal sensitive fields"
                + (" (an approver may, on the request it decides)" if not deciding else "")
                + f"; roles that may: {allowed} (reveal_roles in [serve])")
        return self


def may_reveal(state: ServiceState, who: Principal, *, deciding: bool = False) -> bool:
    """Whether ``who`` may see sensitive fields (``deciding``: of a request it may be
    asked to decide, which an approver signs over and so must see)."""
    return who.role in state.reveal_roles or (deciding and "decide" in PERMISSIONS[who.role])


PURPOSE_PATTERN = r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f\x85][^\x00-\x1f\x7f]*$"
"""A read's purpose as the document states it: no control character, not only spaces
(what :func:`~underway.store.access.check_purpose` takes, at most ``PURPOSE_MAX``)."""
# The bounds are documented, and enforced by check_purpose, whose messages say what is
# wrong in words (a pattern's would quote the pattern).
_PURPOSE = Query(json_schema_extra={"minLength": 1, "maxLength": PURPOSE_MAX,
                                    "pattern": PURPOSE_PATTERN},
                 max_length=MAX_NAME,
                 description="Why the run's data is read (1 to 100 characters, written to the "
                 "access log).")


async def purpose_of(purpose: Annotated[str, _PURPOSE] = DEFAULT_PURPOSE) -> str:
    """The read's purpose, checked (a 422 problem naming ``query.purpose``)."""
    try:
        return check_purpose(purpose)
    except ValueError as exc:
        raise invalid("query.purpose", str(exc)) from None


async def reading(
    purpose: Annotated[str, Depends(purpose_of)],
    reveal: Annotated[bool, Query(
        description="Show the fields tools declare sensitive (for roles that may; the "
        "access log says so). Secrets are never shown.")] = False,
) -> Reading:
    """The read's purpose and reveal."""
    return Reading(purpose, reveal)


# Both are async though they wait for nothing: FastAPI calls a plain function dependency on
# a worker thread, two hops per request for a few comparisons.


Purpose = Annotated[str, Depends(purpose_of)]
"""An endpoint's parameter: the read's purpose (of a read that reveals nothing)."""
Read = Annotated[Reading, Depends(reading)]
"""An endpoint's parameter: the read's purpose and reveal."""
