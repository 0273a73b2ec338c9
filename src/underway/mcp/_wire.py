"""What a transport tells its connection: the calls it could not send, and its end.

A lost answer is an unknown outcome, but a request that never left is not: nothing
happened, and the call may simply fail. Each ``tools/call`` carries its idempotency key
in its ``_meta`` (:data:`KEY_META`). A transport records the key in :attr:`Wire.sent`
just before the request's first byte may leave: HTTP once it is connected and starts the
request, stdio before it writes the line. A call whose key is not there when its answer
is lost never left (the connection was refused, or had ended before it was tried), and
fails as an ordinary error.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

KEY_META = "io.underway/idempotency-key"
"""The ``_meta`` field of every ``tools/call`` holding the call's idempotency key: a server
that records it can tell a repeat from a new call."""
FENCE_META = "io.underway/fence"
"""The ``_meta`` field holding the call's lease fence (:attr:`CallInfo.fence`)."""


@dataclass
class Wire:
    """One connection's record of what its transport could not do."""

    sent: set[str] = field(default_factory=set)
    """Keys of calls whose request may have left."""
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the transport can carry nothing more (a stdio server exited)."""

    def leaving(self, body: bytes | str) -> None:
        """The JSON-RPC message ``body`` may leave now."""
        key = _key(body)
        if key is not None:
            self.sent.add(key)

    def not_sent(self, body: bytes | str) -> None:
        """The message ``body`` did not leave after all (its reader was already gone)."""
        key = _key(body)
        if key is not None:
            self.sent.discard(key)


def _key(body: bytes | str) -> str | None:
    """The idempotency key of the call in a JSON-RPC message, if it is one."""
    try:
        key = json.loads(body)["params"]["_meta"][KEY_META]
    except (ValueError, TypeError, KeyError):
        return None
    return key if isinstance(key, str) else None
