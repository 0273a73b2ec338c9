"""Whether an error means a request left and its answer was lost: the one place that reads
an error by its nature, whichever client raised it.

The effect of a mutating call that lost track of its request may have happened, so the
engine treats it as an unknown outcome (:func:`lost_track`), and
:func:`underway.http.request` raises :class:`~underway.errors.OutcomeUnknown` for it.
Recognised, through an error's causes:

- an error marked ``outcome_unknown`` (:class:`~underway.errors.OutcomeUnknown`, the
  answers of :mod:`underway.http`);
- a connection reset, aborted or broken pipe, an answer cut short
  (``http.client.IncompleteRead``);
- the HTTP clients' errors after sending — a read or write timeout, a read or write
  error, a malformed answer (``ReadTimeout``, ``WriteTimeout``, ``ReadError``,
  ``WriteError``, ``RemoteProtocolError``) — of ``httpx``, of the newer major the
  provider SDKs import as ``httpx2``, and of their ``httpcore`` transports;
- a provider SDK's ``APIConnectionError`` or ``APITimeoutError`` (``openai``,
  ``anthropic``), unless its cause shows nothing was sent.

Nothing was sent when the connection was never made: a connect error or timeout, a pool
timeout, a refused connection, an unresolvable name, an unsupported URL.
"""

from __future__ import annotations

import http.client
import re
import socket
from collections.abc import Iterator
from typing import Literal

__all__ = ["lost_track", "nature"]

_HTTP_FAMILY = re.compile(r"(httpx|httpcore)\d*")
"""The root packages of the HTTP clients read here: ``httpx``, ``httpx2``, ``httpcore``..."""
_AFTER_SENDING = frozenset({"ReadTimeout", "WriteTimeout", "ReadError", "WriteError",
                            "RemoteProtocolError"})
_BEFORE_SENDING = frozenset({"ConnectError", "ConnectTimeout", "PoolTimeout",
                             "UnsupportedProtocol", "InvalidURL", "ProxyError"})
_SDK_CONNECTION = frozenset({"APIConnectionError", "APITimeoutError"})

Nature = Literal["lost", "unsent", "sdk", None]


def lost_track(exc: BaseException) -> bool:
    """True when ``exc`` means the request may have reached the outside world and its
    answer was lost (see the module docstring); False for any other error, and for one
    raised before anything was sent.

    Args:
        exc: What a call raised.
    """
    sdk = False
    for e in _chain(exc):
        found = nature(e)
        if found == "lost":
            return True
        if found == "unsent":
            return False
        sdk = sdk or found == "sdk"
    # A provider SDK's connection error whose causes say nothing: it may have left.
    return sdk


def nature(exc: BaseException) -> Nature:
    """What ``exc`` alone (not its causes) says: ``lost`` (sent, answer lost),
    ``unsent`` (nothing left), ``sdk`` (a provider SDK's connection error, which its cause
    explains) or None (nothing about sending).

    Args:
        exc: One error.
    """
    if getattr(exc, "outcome_unknown", False):
        return "lost"
    if isinstance(exc, ConnectionRefusedError | socket.gaierror):
        return "unsent"
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError
                  | http.client.IncompleteRead):
        return "lost"
    sdk = False
    for cls in type(exc).__mro__:
        root = cls.__module__.partition(".")[0]
        if _HTTP_FAMILY.fullmatch(root):
            if cls.__name__ in _AFTER_SENDING:
                return "lost"
            if cls.__name__ in _BEFORE_SENDING:
                return "unsent"
        sdk = sdk or cls.__name__ in _SDK_CONNECTION
    return "sdk" if sdk else None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what caused it, and so on (each once)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__
