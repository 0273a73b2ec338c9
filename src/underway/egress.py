"""Egress allow-lists: which hosts a tool may reach.

A tool declares them (``@tool(hosts=["api.example.com", "*.bank.in"])``); a tool that
declares none is not restricted. :mod:`underway.http` checks every request of a call
against its tool's list before anything is sent, and the sandbox's proxy checks every
connection of a sandboxed command against its profile's (see ``docs/sandbox.md``).

A pattern is a host name (``api.example.com``), an IP address (``127.0.0.1``, ``::1``),
or ``*.`` and a domain (``*.bank.in``), which matches every name below that domain at any
depth (``api.bank.in``, ``eu.api.bank.in``) but not the domain itself: list ``bank.in``
as well to allow it. Names are compared case-insensitively, without a trailing dot. A
pattern says nothing of ports: a host allowed is allowed on every port.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .errors import ConfigurationError, EgressDenied

_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)\Z")


def _normal(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_patterns(patterns: Iterable[str], *, owner: str) -> tuple[str, ...]:
    """``patterns`` checked and normalized (lower case, no trailing dot); a pattern that
    is not a host name, an IP address or ``*.domain`` is a :class:`ConfigurationError`
    naming ``owner`` (``tool 'pay'``, ``sandbox profile``)."""
    if isinstance(patterns, str):
        raise ConfigurationError(
            f"{owner}: hosts is a list of host names, not the string {patterns!r}")
    out: list[str] = []
    for raw in patterns:
        if not isinstance(raw, str):
            raise ConfigurationError(f"{owner}: host {raw!r} is not a string")
        host = _normal(raw)
        name = host[2:] if host.startswith("*.") else host
        if "://" in raw or "/" in host or (":" in name and not _is_ip(name)):
            raise ConfigurationError(
                f"{owner}: host {raw!r} must be a bare host name such as api.example.com "
                "(no scheme, port or path)")
        wildcard, labels = host.startswith("*."), name.split(".")
        if _is_ip(name) and wildcard:
            raise ConfigurationError(f"{owner}: host {raw!r}: a wildcard takes a domain, "
                                     "not an IP address")
        if not _is_ip(name) and not all(_LABEL.match(label) for label in labels):
            raise ConfigurationError(
                f"{owner}: host {raw!r} is not a host name, an IP address or *.domain "
                "(a wildcard only as the whole first label)")
        if wildcard and len(labels) < 2:
            raise ConfigurationError(
                f"{owner}: host {raw!r} would allow a whole top-level domain; name the "
                "domain (*.example.com)")
        out.append(host)
    return tuple(dict.fromkeys(out))


def host_allowed(host: str, patterns: Iterable[str]) -> bool:
    """True when ``host`` matches one of ``patterns`` (already normalized)."""
    host = _normal(host)
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                return True
        elif host == pattern:
            return True
    return False


@dataclass(slots=True)
class Egress:
    """One call's egress: the hosts its tool may reach, and what was refused.

    The engine gives each call of a tool that declares hosts one of these in
    :attr:`~underway.effects.CallInfo.egress`; :mod:`underway.http` calls :meth:`check`
    before each request. The engine journals every refusal, even one the tool caught.
    """

    tool: str
    hosts: tuple[str, ...]
    refused: list[str] = field(default_factory=list)
    """The URLs refused so far, in order."""

    def check(self, url: str) -> None:
        """Raise :class:`~underway.errors.EgressDenied` (and remember the refusal) unless
        ``url``'s host is allowed."""
        try:
            host = urlsplit(url).hostname or ""
        except ValueError:
            host = ""
        if host and host_allowed(host, self.hosts):
            return
        shown = _without_secrets(url)
        self.refused.append(shown)
        raise EgressDenied(self.tool, host, shown, self.hosts)


def _without_secrets(url: str) -> str:
    """``url`` without user information or query string: what a refusal may record."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an unreadable URL)"
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else url.split("?")[0]


__all__ = ["Egress", "host_allowed", "host_patterns"]
