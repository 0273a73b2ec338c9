"""A long-lived process in the sandbox, talked to over its stdin and stdout: how a stdio
server (an MCP server, for one) runs under a profile.

It is one call of the sandbox that lasts: admitted by the worker's budget for as long as
it runs, in the call's own directories, behind the egress proxy when the profile lists
hosts, and killed with its whole PID namespace when it ends. The profile's time limit
bounds its life; whoever uses it starts it again when it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

from ._budget import worker_budget
from ._proxy import EgressProxy, proxy_env, relay_argv
from ._workspace import CallDirs, Workspace
from .backends import select
from .errors import SandboxUnavailable
from .profile import SandboxProfile
from .run import _kill, _spawn

log = logging.getLogger("underway.sandbox")

STDERR_KEPT = 8192
"""Bytes of the process's stderr kept to explain why it ended."""
EXIT_GRACE_S = 2.0
"""How long the process may take to exit once its stdin is closed, before it is killed."""


@dataclass
class SandboxedProcess:
    """A running sandboxed process: its pipes, and the tail of what it wrote to stderr."""

    process: asyncio.subprocess.Process
    backend: str
    profile_digest: str
    stderr_tail: bytearray = field(default_factory=bytearray)
    refused: list[str] = field(default_factory=list)
    """Destinations the egress proxy refused so far (``host:port``)."""

    @property
    def stdin(self) -> asyncio.StreamWriter:
        """The process's standard input."""
        assert self.process.stdin is not None
        return self.process.stdin

    @property
    def stdout(self) -> asyncio.StreamReader:
        """The process's standard output."""
        assert self.process.stdout is not None
        return self.process.stdout

    def stderr_text(self) -> str:
        """The last :data:`STDERR_KEPT` bytes of its stderr, decoded."""
        return self.stderr_tail.decode("utf-8", errors="replace")


@asynccontextmanager
async def sandboxed_process(
    argv: Sequence[str], *, profile: SandboxProfile,
    env: Mapping[str, str] | None = None, workspace: Workspace = None,
) -> AsyncIterator[SandboxedProcess]:
    """Start ``argv`` under ``profile`` with piped stdin and stdout; on exit, close its
    stdin, give it :data:`EXIT_GRACE_S` to end, then kill what is left.

    Only an isolating backend runs it (``backend="none"`` and a missing bubblewrap raise
    :class:`SandboxUnavailable`); a profile with ``hosts`` needs bubblewrap.

    Args:
        argv: The exact argv.
        profile: The sandbox profile.
        env: Variables set on top of the sandbox's base environment and ``env_allow``.
        workspace: A host directory shown at the profile's ``workspace_dir``; by default
            a fresh one, removed afterwards.
    """
    impl = select(profile)
    if not impl.isolated:
        raise SandboxUnavailable(
            f"a sandboxed server must run isolated; the profile chose backend {impl.name!r}")
    if profile.hosts and impl.name != "bwrap":
        raise SandboxUnavailable(
            f"the profile's hosts are enforced by bubblewrap only and the server would run "
            f"under {impl.name}, so it was not started")
    owner = (profile.uid, profile.gid) if os.geteuid() == 0 else None
    budget = worker_budget()
    with budget.admit(profile) as admission:
        dirs = CallDirs(workspace, owner)
        try:
            async with AsyncExitStack() as stack:
                command, extra = list(argv), dict(env or {})
                proxy = None
                if profile.hosts:
                    proxy = await stack.enter_async_context(EgressProxy(
                        dirs.egress_socket, profile.hosts,
                        connections=admission.share.egress_connections,
                        budget=admission.budget))
                    command, extra = relay_argv(command), {**extra, **proxy_env()}
                launch = impl.plan(profile, command, dirs, extra,
                                   ceiling=admission.budget.limits.processes)
                stack.callback(launch.release)
                proc = await _spawn(launch, True)
                running = SandboxedProcess(proc, launch.backend, profile.digest(),
                                           refused=proxy.refused if proxy else [])
                drain = asyncio.create_task(_keep_tail(proc, running.stderr_tail))
                try:
                    yield running
                finally:
                    await asyncio.shield(_stop(proc, lambda: _kill(proc, launch)))
                    drain.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await drain
        finally:
            await asyncio.shield(budget.chore(dirs.close))


async def _keep_tail(proc: asyncio.subprocess.Process, tail: bytearray) -> None:
    assert proc.stderr is not None
    while chunk := await proc.stderr.read(65_536):
        tail += chunk
        del tail[:-STDERR_KEPT]


async def _stop(proc: asyncio.subprocess.Process, kill: Callable[[], None]) -> None:
    if proc.stdin is not None:
        with contextlib.suppress(OSError, RuntimeError):
            proc.stdin.close()
    if proc.returncode is None:
        try:
            async with asyncio.timeout(EXIT_GRACE_S):
                await proc.wait()
        except TimeoutError:
            pass
    if proc.returncode is None:
        kill()
        await proc.wait()
