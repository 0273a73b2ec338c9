"""Running one command in the sandbox: :func:`run_command_async` and :func:`run_command`.

The command starts in a new session (its own process group). Its stdout and stderr are
read as they come and kept up to the profile's cap; the rest is counted and dropped, so
a command printing without end costs no memory. At the time limit, or when the calling
task is cancelled, the whole group is killed with SIGKILL and reaped before the call
returns; under bubblewrap that kills the sandbox's PID namespace, and with it every
process the command left behind, however it detached itself. Under bubblewrap a
``timeout`` process in front keeps the time limit as well, so a worker whose loop is
held up still has the command killed on time.

Every call is first admitted by the worker's :class:`~underway.sandbox._budget.Budget`,
which reserves its share (processes, output, egress connections) or refuses it with
:class:`SandboxLimitReached`; the call's directories are removed off the event loop, so
a workspace left with a million files delays only its own call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..errors import ConfigurationError
from ._budget import Admission, Budget, worker_budget
from ._launch import Launch
from ._proxy import EgressProxy, proxy_env, relay_argv
from ._workspace import CallDirs, Workspace
from .backends import BackendImpl, select
from .errors import SandboxError, SandboxUnavailable
from .profile import SandboxProfile
from .result import CommandResult

__all__ = ["DEFAULT_PROFILE", "run_command", "run_command_async"]

log = logging.getLogger("underway.sandbox")

READ_CHUNK = 65_536
OUTPUT_GRACE_S = 2.0
"""After the command exits, how long its output may still take to arrive. Under a
sandbox every writer is gone by then; unsandboxed, a background process may keep a pipe
open and is not waited for."""

DEFAULT_PROFILE = SandboxProfile()


async def run_command_async(
    command: str | Sequence[str],
    *,
    profile: SandboxProfile = DEFAULT_PROFILE,
    workspace: Workspace = None,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    budget: Budget | None = None,
) -> CommandResult:
    """Run ``command`` under ``profile`` and return what it did.

    A command that runs and fails returns its exit code.

    Args:
        command: A string runs with ``/bin/sh -c``; a sequence is the exact argv.
        profile: The sandbox profile.
        workspace: A host directory shown writable at the profile's ``workspace_dir``. By
            default, a fresh one, removed afterwards. This call resolves it; the tools
            resolve theirs once, when made.
        stdin: Text fed to the command.
        env: Variables set on top of the sandbox's base environment and the profile's
            ``env_allow``.
        budget: The worker's budget the call is admitted by. By default, this process's
            (:func:`~underway.sandbox._budget.worker_budget`).

    Raises:
        SandboxUnavailable: No backend the profile allows is usable. The command is never
            run unsandboxed instead.
        SandboxLimitReached: The worker's limits leave no room for the call.
        SandboxError: The sandbox could not be set up. That includes a mounted path that is
            no longer the object it was resolved to (see :mod:`underway.sandbox._mounts`).
    """
    argv = _argv(command)
    impl = select(profile)
    if not impl.isolated:
        log.warning(
            "UNSANDBOXED: running %r with backend='none': it can read, write and reach "
            "everything this process can. Development only.", argv[:3],
        )
    if profile.hosts and impl.name != "bwrap":
        raise SandboxUnavailable(
            f"the profile's hosts are enforced by bubblewrap only and the call would run "
            f"under {impl.name}, so the command was not run")
    owner = (profile.uid, profile.gid) if impl.isolated and os.geteuid() == 0 else None
    budget = budget or worker_budget()
    with budget.admit(profile) as admission:
        dirs = CallDirs(workspace, owner)
        try:
            return await _in_dirs(impl, profile, argv, dirs, stdin, env, admission)
        finally:
            # Off the loop: removing what a command left may take long, and only its
            # own call should wait for it.
            await asyncio.shield(budget.chore(dirs.close))


async def _in_dirs(impl: BackendImpl, profile: SandboxProfile, argv: list[str],
                   dirs: CallDirs, stdin: str | None, env: Mapping[str, str] | None,
                   admission: Admission) -> CommandResult:
    digest = profile.digest()
    ceiling = admission.budget.limits.processes
    if not profile.hosts:
        launch = impl.plan(profile, argv, dirs, env, ceiling=ceiling)
        try:
            return await _execute(launch, profile, stdin, digest)
        finally:
            launch.release()
    async with EgressProxy(dirs.egress_socket, profile.hosts,
                           connections=admission.share.egress_connections,
                           budget=admission.budget) as proxy:
        launch = impl.plan(profile, relay_argv(argv), dirs, {**(env or {}), **proxy_env()},
                           ceiling=ceiling)
        try:
            done = await _execute(launch, profile, stdin, digest)
        finally:
            launch.release()
    return done.model_copy(update={"egress_refused": tuple(proxy.refused),
                                   "limits_reached": proxy.limits_reached})


def run_command(
    command: str | Sequence[str],
    *,
    profile: SandboxProfile = DEFAULT_PROFILE,
    workspace: Workspace = None,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    budget: Budget | None = None,
) -> CommandResult:
    """Blocking :func:`run_command_async`, for code without an event loop.

    Args:
        command: A string runs with ``/bin/sh -c``; a sequence is the exact argv.
        profile: The sandbox profile.
        workspace: A host directory shown writable; by default, a fresh one.
        stdin: Text fed to the command.
        env: Variables set on top of the sandbox's base environment.
        budget: The worker's budget the call is admitted by.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_command_async(
            command, profile=profile, workspace=workspace, stdin=stdin, env=env,
            budget=budget,
        ))
    raise ConfigurationError(
        "run_command() blocks and was called inside a running event loop; "
        "await run_command_async() instead"
    )


def _argv(command: str | Sequence[str]) -> list[str]:
    if isinstance(command, str):
        if not command.strip():
            raise ConfigurationError("sandbox command is empty")
        return ["/bin/sh", "-c", command]
    argv = list(command)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigurationError(
            f"sandbox command {command!r}: give a shell string or a non-empty list of strings"
        )
    if any("\x00" in a for a in argv):
        raise ConfigurationError("sandbox command arguments may not contain NUL bytes")
    return argv


@dataclass
class _Captured:
    """One output stream as read so far."""

    cap: int
    kept: bytearray
    dropped: int = 0

    def text(self) -> str:
        out = self.kept.decode("utf-8", errors="replace")
        return out + f"\n[... truncated {self.dropped} bytes]" if self.dropped else out


async def _capture(stream: asyncio.StreamReader, into: _Captured) -> None:
    while chunk := await stream.read(READ_CHUNK):
        room = into.cap - len(into.kept)
        if room > 0:
            into.kept += chunk[:room]
        into.dropped += max(0, len(chunk) - max(room, 0))


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data)
        await stream.drain()
        stream.close()
        await stream.wait_closed()


async def _execute(launch: Launch, profile: SandboxProfile, stdin: str | None,
                   digest: str) -> CommandResult:
    began = time.perf_counter()
    proc = await _spawn(launch, stdin is not None)
    cap = profile.limits.output_cap_bytes
    out, err = _Captured(cap, bytearray()), _Captured(cap, bytearray())
    assert proc.stdout is not None and proc.stderr is not None
    tasks = [asyncio.create_task(_capture(proc.stdout, out)),
             asyncio.create_task(_capture(proc.stderr, err))]
    if stdin is not None:
        assert proc.stdin is not None
        tasks.append(asyncio.create_task(_feed(proc.stdin, stdin.encode())))
    timed_out = False
    try:
        try:
            async with asyncio.timeout(profile.limits.timeout_s):
                await proc.wait()
        except TimeoutError:
            timed_out = True
            _kill(proc, launch)
            await proc.wait()
        # Killed on time by the launcher's own deadline, before this loop got to it.
        timed_out = timed_out or (launch.kills_at_timeout
                                  and proc.returncode == -signal.SIGKILL)
        duration_ms = (time.perf_counter() - began) * 1000
        await asyncio.wait(tasks[:2], timeout=OUTPUT_GRACE_S)
    finally:
        if proc.returncode is None:
            _kill(proc, launch)
            await proc.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    code = proc.returncode
    assert code is not None
    if not timed_out and not launch.set_up():
        raise SandboxError(f"bubblewrap could not set up the sandbox (exit status {code}): "
                           f"{err.text().strip()}")
    if launch.backend == "docker" and code == 125:
        raise SandboxError(f"docker could not start the container: {err.text().strip()}")
    return CommandResult(
        stdout=out.text(), stderr=err.text(), exit_code=code, duration_ms=duration_ms,
        timed_out=timed_out, stdout_truncated=out.dropped > 0,
        stderr_truncated=err.dropped > 0, backend=launch.backend, profile_digest=digest,
    )


async def _spawn(launch: Launch, with_stdin: bool) -> asyncio.subprocess.Process:
    """Start the launch; a failure in the child's setup raises :class:`SandboxError` with
    the reason the child reported."""
    err_r, err_w = os.pipe()
    setup = None if launch.setup is None else replace(launch.setup, error_fd=err_w)
    starting = asyncio.ensure_future(asyncio.create_subprocess_exec(
        *launch.argv,
        stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=launch.env, cwd=launch.cwd,
        start_new_session=True, preexec_fn=setup, pass_fds=launch.pass_fds,
    ))
    try:
        # Shielded: cancelled half-way, asyncio would kill only the group's leader and
        # leave bubblewrap's half-made sandbox behind. The whole group goes instead.
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            proc = await starting
            _kill(proc, launch)
            await proc.wait()
        raise
    except (OSError, subprocess.SubprocessError) as exc:
        os.close(err_w)
        detail = _read_ready(err_r).decode(errors="replace") or str(exc)
        raise SandboxError(f"{launch.backend} sandbox could not be started: {detail}") from None
    finally:
        with contextlib.suppress(OSError):
            os.close(err_w)
        os.close(err_r)
        for fd in launch.close_after_spawn:
            os.close(fd)
        launch.close_after_spawn = []


def _kill(proc: asyncio.subprocess.Process, launch: Launch) -> None:
    # Only while the leader is unreaped: its group id cannot have been reused yet.
    _killpg(proc.pid)
    if launch.on_kill is not None:
        launch.on_kill()


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _read_ready(fd: int) -> bytes:
    """What a pipe holds now, without waiting for more."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 65_536):
            chunks.append(chunk)
    return b"".join(chunks)
