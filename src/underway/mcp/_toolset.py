"""The tools of one MCP server as underway tools: :class:`Toolset`.

A toolset lists the server's tools once when it is loaded and makes an underway
:class:`~underway.Tool` of each: the tool's JSON Schema is its argument schema, its
annotations set its effect flags (:func:`~underway.mcp.flags`), and a call goes through
``ctx.call`` like any other, so the guard and the journal see every one.

The connection is the worker's: opened by the first call on the worker's event loop and
kept. The server's tool list is watched (``notifications/tools/list_changed``, or a
``subscriptions/listen`` stream on a 2026 connection): a tool the server no longer lists
is refused, a new one joins :attr:`Toolset.tools`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..effects import CallInfo, Tool, ToolOptions
from ..effects._mcp_hints import FLAG_OPTIONS, flags
from ..errors import ConfigurationError, OutcomeUnknown
from ..events import JSON
from ._errors import ToolError, ToolVanished
from ._schema import MCPArguments, arguments_model, error_text, result_json
from ._servers import Server
from ._wire import FENCE_META, KEY_META, Wire

log = logging.getLogger("underway.mcp")

LIST_PAGES = 100
"""Pages of ``tools/list`` read at most (a server that pages without end is cut off)."""
_LOST = (MCPError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream,
         ConnectionError, OSError, httpx2.TransportError)
_LOST_CODES = (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT)


class Toolset:
    """The tools of one MCP server.

    >>> files = uw_mcp.Toolset(uw_mcp.Stdio(command=["files-server"], profile=profile),
    ...                        overrides={"delete": {"idempotent": True}})
    >>> files.load_sync()
    >>> flow = uw.Flow("tidy", state=S, tools=files.tools)

    Args:
        server: The server (:class:`~underway.mcp.Stdio` or :class:`~underway.mcp.HTTP`).
        prefix: Put before each tool's name (``"files_"``), to keep servers apart.
        include: Only these tools of the server (by the server's names); None: all.
        overrides: Per tool (the server's name), options of :func:`underway.tool` that win
            over what the annotations say: the flags (``read_only``, ``idempotent``...),
            ``reconcile``, ``timeout``, ``permissions``, ``amount``, and
            ``untrusted_args`` (the arguments that may carry untrusted content, such as a
            message's ``body``; an annotation never says so)...
        mode: How to agree on the protocol: ``"auto"`` (the SDK probes, and falls back to
            the 2025 handshake), ``"legacy"`` (the handshake only), or a 2026 protocol
            version to adopt at once.
    """

    def __init__(self, server: Server, *, prefix: str = "", include: Iterable[str] | None = None,
                 overrides: Mapping[str, ToolOptions] | None = None,
                 mode: str = "auto") -> None:
        if mode not in ("auto", "legacy") and mode not in MODERN_PROTOCOL_VERSIONS:
            raise ConfigurationError(
                f"Toolset mode must be 'auto', 'legacy' or one of "
                f"{list(MODERN_PROTOCOL_VERSIONS)}, not {mode!r}")
        self.server = server
        self.prefix = prefix
        self.include = None if include is None else frozenset(include)
        self.overrides: dict[str, ToolOptions] = dict(overrides or {})
        self.mode = mode
        self.generation = 0
        """How many times the tool list was read; grows with every change the server
        announces."""
        self._built: dict[str, Tool] = {}
        self._listed: dict[str, types.Tool] = {}
        self._connection: _Connection | None = None
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def tools(self) -> list[Tool]:
        """The underway tools of what the server lists now."""
        return [self._built[n] for n in self._listed if n in self._built]

    def tool(self, name: str) -> Tool:
        """The underway tool of the server's tool ``name``."""
        if name not in self._built:
            raise ConfigurationError(
                f"MCP server {self.server.name} lists no tool {name!r}; it lists "
                f"{sorted(self._listed)}")
        return self._built[name]

    def listed(self, name: str) -> bool:
        """Whether the server lists ``name`` now."""
        return name in self._listed

    async def load(self) -> Toolset:
        """Connect (on this event loop) and read the server's tools; returns itself.

        Raises:
            EgressDenied: An HTTP server's host is not among its ``hosts``; nothing was
                sent.
            ConnectionError: The server could not be started or reached, or would not
                list its tools.
        """
        self.server.check_egress(f"MCP server {self.server.name}")
        try:
            await self._connect()
        except Exception as exc:
            first = _first(exc)
            if isinstance(first, ConfigurationError):
                raise first from None
            raise ConnectionError(f"MCP server {self.server.name}: could not connect and "
                                  f"list its tools ({_said(exc)})") from exc
        return self

    def load_sync(self) -> Toolset:
        """:meth:`load` for code without a running event loop (a module's top level): it
        connects on a loop of its own, reads the tools and disconnects."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            async def once() -> None:
                await self.load()
                await self.aclose()
            asyncio.run(once())
            return self
        raise ConfigurationError("Toolset.load_sync() was called inside a running event "
                                 "loop; await toolset.load() instead")

    async def query(self, name: str, args: Mapping[str, JSON] | None = None) -> JSON:
        """Call the server's read-only tool ``name`` directly, outside any run.

        It is for a ``reconcile`` hook asking the server what became of a key: such a
        call is not journaled, so only a tool that changes nothing may be called so.

        Args:
            name: The tool's name on the server.
            args: Its arguments, checked against its schema.

        Raises:
            ConfigurationError: The tool is not read-only, or the server lists no such tool.
            ToolError: The server answered with an error.
        """
        tool = self.tool(name)
        if tool.mutating:
            raise ConfigurationError(
                f"MCP server {self.server.name}: query() calls read-only tools only, and "
                f"{name!r} is mutating; call it with ctx.call so it is journaled")
        assert tool.args_model is not None
        checked = tool.args_model.model_validate(dict(args or {}))
        assert isinstance(checked, MCPArguments)
        self.server.check_egress(f"MCP server {self.server.name}")
        client = await self._connect()
        result = await client.call_tool(name, checked.arguments())
        if result.is_error:
            raise ToolError(self.server.name, name, error_text(result))
        return result_json(result)

    async def aclose(self) -> None:
        """Close the connection (a stdio server is stopped)."""
        conn, self._connection = self._connection, None
        if conn is not None:
            await conn.close()

    async def changed(self, after: int) -> None:
        """Wait until the tool list was read again after :attr:`generation` ``after``."""
        while self.generation <= after:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    async def _connect(self) -> Client:
        return (await self._open())[1]

    async def _open(self) -> tuple[_Connection, Client]:
        """The connection of this event loop and its client, opened when needed."""
        conn = self._connection
        loop = asyncio.get_running_loop()
        if conn is None or conn.finished or conn.loop is not loop:
            if conn is not None and conn.loop is loop:
                await conn.close()
            conn = self._connection = _Connection(self, loop)
        return conn, await conn.ready()

    def _absorb(self, listing: list[types.Tool]) -> None:
        tools = {t.name: t for t in listing if self.include is None or t.name in self.include}
        if not self.generation:
            # A name the server does not list is a typo until proven otherwise: an
            # override meant for a dangerous tool must not be lost quietly.
            missing = sorted((set(self.overrides) | (self.include or set())) - set(tools))
            if missing:
                raise ConfigurationError(
                    f"MCP server {self.server.name} lists no tool {missing} (include= or "
                    f"overrides= name it); it lists {sorted(t.name for t in listing)}")
        for name, listed in list(tools.items()):
            if name in self._built:
                continue
            try:
                self._built[name] = self._make(listed)
            except ConfigurationError:
                if not self.generation:
                    raise
                log.warning("MCP server %s: new tool %r left out", self.server.name, name,
                            exc_info=True)
                del tools[name]
        gone = sorted(set(self._listed) - set(tools))
        new = sorted(set(tools) - set(self._listed))
        if self.generation and (gone or new):
            log.info("MCP server %s: tools added %s, removed %s", self.server.name, new, gone)
        self._listed = tools
        self.generation += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _make(self, listed: types.Tool) -> Tool:
        options: dict[str, Any] = dict(self.overrides.get(listed.name, {}))
        unknown = sorted(set(options) - set(ToolOptions.__annotations__))
        fixed = sorted({"name", "hosts"} & set(options))
        if unknown or fixed:
            raise ConfigurationError(
                f"MCP server {self.server.name}: overrides of tool {listed.name!r} name "
                + (f"options a tool does not take: {unknown}" if unknown else
                   f"{fixed}, which the toolset sets (prefix=, the server's hosts)"))
        hosts = None if self.server.hosts is None else tuple(self.server.hosts)
        for key in FLAG_OPTIONS:
            options.pop(key, None)
        names = options.get("untrusted_args")
        if names is not None and not isinstance(names, str):
            # The arguments that may carry untrusted content, checked against the schema.
            options["untrusted_args"] = tuple(names)
        decided = flags(listed.annotations, self.overrides.get(listed.name))
        model = arguments_model(self.server.name, listed)
        name = listed.name

        async def call(args: MCPArguments, info: CallInfo) -> JSON:
            return await self._call(name, args, info)

        description = options.pop("description", None) or listed.description or \
            (listed.annotations.title if listed.annotations else None) or ""
        # A stdio server's profile is journaled with every intent (ToolStarted), as a
        # shell tool's is: an audit tells which rules each call ran under.
        return Tool(name=f"{self.prefix}{name}", fn=call, args_model=model,
                    wants_call_info=True, description=description, hosts=hosts,
                    sandbox=getattr(self.server, "profile", None),
                    **decided.options(), **options)

    async def _call(self, name: str, args: MCPArguments, info: CallInfo) -> JSON:
        tool = self._built[name]
        if info.egress is not None:
            info.egress.check(getattr(self.server, "url", ""))
        try:
            conn, client = await self._open()
        except Exception as exc:
            # Nothing was sent: the outcome is known.
            raise ToolError(self.server.name, name, f"could not connect ({_said(exc)})",
                            retryable=True) from None
        if name not in self._listed:
            raise ToolVanished(self.server.name, name, sorted(self._listed))
        meta: Any = {KEY_META: info.key, FENCE_META: info.fence}
        try:
            result = await client.call_tool(name, args.arguments(), meta=meta)
        except _LOST as exc:
            if isinstance(exc, MCPError) and exc.code not in _LOST_CODES:
                raise ToolError(self.server.name, name, exc.message) from None
            # Broken: the next call opens a new connection.
            conn.stop.set()
            if info.key not in conn.wire.sent:
                raise ToolError(self.server.name, name, f"the call could not be sent ({exc})",
                                retryable=True) from None
            if tool.mutating:
                raise OutcomeUnknown(f"MCP server {self.server.name}: the call of {name!r} "
                                     f"was sent and its answer lost ({exc})") from None
            raise ToolError(self.server.name, name, f"the connection was lost ({exc})",
                            retryable=True) from None
        if result.is_error:
            raise ToolError(self.server.name, name, error_text(result))
        return result_json(result)


def _first(exc: BaseException) -> BaseException:
    """The error inside the exception groups the SDK's task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _said(exc: BaseException) -> str:
    """What an error says, through the exception groups the SDK's task groups raise."""
    first = _first(exc)
    return f"{type(first).__name__}: {first}"


class _Connection:
    """One open connection to the server, held by a task of its own (the SDK's client
    must be entered and left by the same task)."""

    def __init__(self, toolset: Toolset, loop: asyncio.AbstractEventLoop) -> None:
        self.toolset = toolset
        self.loop = loop
        self.stop = asyncio.Event()
        self.relist = asyncio.Event()
        self.wire = Wire()
        self._ready: asyncio.Future[Client] = loop.create_future()
        self.task = loop.create_task(self._hold(), name=f"mcp:{toolset.server.name}")

    @property
    def finished(self) -> bool:
        """The connection ended (closed, broken, or never made)."""
        return self.task.done() or self.stop.is_set() or self.wire.ended.is_set()

    async def ready(self) -> Client:
        """The connected client, once the tools were listed."""
        return await asyncio.shield(self._ready)

    async def close(self) -> None:
        """End the connection and wait for it to be gone."""
        self.stop.set()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await self.task

    async def _hold(self) -> None:
        server = self.toolset.server
        try:
            async with Client(server.connect(self.wire), mode=self.toolset.mode, cache=None,
                              message_handler=self._on_message) as client:
                await self._list(client)
                self._ready.set_result(client)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._relister, client)
                    if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                        tg.start_soon(self._listen, client)
                    await self.stop.wait()
                    tg.cancel_scope.cancel()
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            else:
                log.warning("MCP server %s: the connection ended: %s", server.name, exc)
        finally:
            self.stop.set()
            if not self._ready.done():
                self._ready.set_exception(ConnectionError(
                    f"MCP server {server.name}: the connection was closed"))

    async def _list(self, client: Client) -> None:
        listing: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            listing += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        self.toolset._absorb(listing)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.relist.set()

    async def _relister(self, client: Client) -> None:
        while True:
            await self.relist.wait()
            self.relist.clear()
            try:
                await self._list(client)
            except Exception as exc:
                log.warning("MCP server %s: could not list its tools again: %s",
                            self.toolset.server.name, exc)
                self.stop.set()
                return

    async def _listen(self, client: Client) -> None:
        try:
            async with client.listen(tools_list_changed=True) as sub:
                async for _ in sub:
                    self.relist.set()
        except (ListenNotSupportedError, MCPError, SubscriptionLost) as exc:
            log.info("MCP server %s: not watching its tool list: %s",
                     self.toolset.server.name, exc)
