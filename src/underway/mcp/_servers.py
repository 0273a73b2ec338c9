"""Where an MCP server is and how it is reached: :class:`Stdio` (a command run inside the
sandbox) and :class:`HTTP` (a Streamable HTTP endpoint behind the egress allow-list)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.message import SessionMessage

from ..egress import Egress, host_patterns
from ..errors import ConfigurationError
from ..sandbox import SandboxProfile
from ..sandbox._process import sandboxed_process
from ._wire import Wire

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The longest message (one line) a stdio server may send; a longer one ends the
connection rather than the worker's memory."""
READ_CHUNK = 65_536


@dataclass(frozen=True, kw_only=True)
class Stdio:
    """An MCP server the worker starts as a command, inside the sandbox.

    The command runs under ``profile`` (bubblewrap; docs/sandbox.md): a read-only root, a
    private workspace, no network except the hosts the profile lists, through its egress
    proxy. It is started on the first call and kept for the calls after; the profile's
    time limit bounds its life, and the next call starts it again.

    Args:
        command: The exact argv of the server, as the sandbox sees it.
        profile: The sandbox profile it runs under.
        env: Variables set in its environment (never shown in its repr).
        workspace: A host directory shown as its workspace (None: a fresh one each start).
        name: What errors call it (default: the program's file name).
    """

    command: Sequence[str]
    profile: SandboxProfile
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    workspace: str | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.command, str) or not self.command:
            raise ConfigurationError(
                f"an MCP stdio server's command is a non-empty list of strings, not "
                f"{self.command!r}")
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        if not self.name:
            object.__setattr__(self, "name", self.command[0].rsplit("/", 1)[-1])

    @property
    def hosts(self) -> tuple[str, ...] | None:
        """What the tools declare as their hosts: None, the sandbox holds the server to
        its profile's ``hosts``."""
        return None

    def check_egress(self, tool: str) -> Egress | None:
        """Nothing to check in the worker: the sandbox's proxy holds the server."""
        return None

    def connect(self, wire: Wire) -> Any:
        """The transport: the server started in the sandbox, messages over its pipes."""
        return _stdio(self, wire)


@dataclass(frozen=True, kw_only=True)
class HTTP:
    """An MCP server reached over Streamable HTTP, only at a host of ``hosts``.

    ``hosts`` is the egress allow-list (:mod:`underway.egress`): the tools declare it, so a
    URL whose host is not in it is refused before anything is sent, and the refusal is
    journaled (``ToolRefused``, cause ``egress_denied``).

    Args:
        url: The server's endpoint (``https://tools.example.com/mcp``).
        hosts: The hosts the connection may reach.
        headers: Headers sent with every request (an ``Authorization``, say; never shown
            in its repr).
        name: What errors call it (default: the URL's host).
    """

    url: str
    hosts: Sequence[str]
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    name: str = ""

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ConfigurationError(f"an MCP server's URL starts with http:// or https://, "
                                     f"not {self.url!r}")
        hosts: Iterable[str] = self.hosts
        object.__setattr__(self, "hosts", host_patterns(hosts, owner=f"MCP server {self.url}"))
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))
        if not self.name:
            object.__setattr__(self, "name", httpx2.URL(self.url).host)

    def check_egress(self, tool: str) -> Egress:
        """Check the server's URL against ``hosts``: :class:`~underway.errors.EgressDenied`
        when its host is not allowed."""
        egress = Egress(tool, tuple(self.hosts))
        egress.check(self.url)
        return egress

    def connect(self, wire: Wire) -> Any:
        """The transport: Streamable HTTP, every request's host checked."""
        return _http(self, wire)


Server = Stdio | HTTP
"""Either kind of MCP server."""


class _Sending(httpx2.AsyncBaseTransport):
    """HTTP that records a call as sent once its request's first byte is about to leave
    (the transport's trace says so); a request refused or cancelled before that never
    left."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = request.content

        async def trace(event: str, info: Any) -> None:
            if event.endswith("send_request_headers.started"):
                self.wire.leaving(body)

        request.extensions = {**request.extensions, "trace": trace}
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def _http(server: HTTP, wire: Wire) -> AsyncIterator[TransportStreams]:
    egress = Egress(f"MCP server {server.name}", tuple(server.hosts))

    async def check(request: httpx2.Request) -> None:
        # Every request, redirects included: nothing leaves for a host not allowed.
        egress.check(str(request.url))

    client = httpx2.AsyncClient(
        headers=dict(server.headers), transport=_Sending(wire),
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        event_hooks={"request": [check]})
    async with client, streamable_http_client(server.url, http_client=client) as streams:
        yield streams


@asynccontextmanager
async def _stdio(server: Stdio, wire: Wire) -> AsyncIterator[TransportStreams]:
    async with sandboxed_process(server.command, profile=server.profile, env=server.env,
                                 workspace=server.workspace) as proc:
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

        async def from_server() -> None:
            buffer = b""
            async with read_send:
                while chunk := await proc.stdout.read(READ_CHUNK):
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    if len(buffer) > MAX_MESSAGE_BYTES:
                        await read_send.send(ConnectionError(
                            f"MCP server {server.name} sent a message longer than "
                            f"{MAX_MESSAGE_BYTES} bytes"))
                        return
                    for line in lines:
                        if line.strip():
                            await read_send.send(_parse(line))
                wire.ended.set()
                tail = proc.stderr_text().strip()
                if tail:
                    await read_send.send(ConnectionError(
                        f"MCP server {server.name} ended; its last words: {tail[-500:]}"))

        async def reading() -> None:
            # The session stops reading when it closes: what the server says after is
            # nobody's.
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await from_server()

        async def to_server() -> None:
            async with write_recv:
                async for message in write_recv:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    if wire.ended.is_set():
                        continue
                    wire.leaving(data)
                    try:
                        proc.stdin.write(data.encode() + b"\n")
                        await proc.stdin.drain()
                    except (ConnectionError, OSError):
                        # A pipe that takes nothing more passes no line: none of it is read.
                        wire.not_sent(data)
                        wire.ended.set()
                        await read_send.aclose()
                        return

        async with anyio.create_task_group() as tg:
            tg.start_soon(reading)
            tg.start_soon(to_server)
            try:
                yield read_recv, write_send
            finally:
                tg.cancel_scope.cancel()
                for stream in (read_recv, write_send):
                    await stream.aclose()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc

