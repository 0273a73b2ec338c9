"""What one worker lets its sandboxed calls spend: :class:`WorkerLimits` and the
:class:`Budget` that the runner and the egress proxy consult.

A call's :class:`~underway.sandbox.Limits` bound that call. But every call also spends
the worker's own resources: descriptors for its pipes and proxy connections, memory for
its output, processes of the sandbox user. Without a bound per worker, one call could
exhaust them and leave the worker unable to serve its other calls.

So every call is admitted first, by :meth:`Budget.admit`. It reserves the call's whole
share at once: one call slot, its ``max_processes`` (plus the launcher's own processes),
its kept output (``output_cap_bytes`` for each of two streams) and, with ``hosts``, its
``egress_connections``. The sum of what running calls reserve never passes the worker's
limits; a call that does not fit is refused before it starts, with
:class:`SandboxLimitReached` naming the limit. A call then spends only its own share:
the kernel holds it to its processes, the runner to its output, the proxy to its
connections. What one call does can therefore never take what another call reserved.

The process's budget (:func:`worker_budget`) is made on first use from
:class:`WorkerLimits` defaults; :func:`configure_worker` replaces it.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ..errors import ConfigurationError
from .errors import SandboxLimitReached
from .profile import SandboxProfile

LAUNCHER_PROCESSES = 2
"""Processes a call runs as the sandbox user outside its sandbox: the deadline keeper
(``timeout``) and bubblewrap's monitor."""
FDS_PER_CALL = 12
"""Descriptors a call holds in the worker besides its egress connections: output pipes,
the setup pipe, mount sources, the proxy's listening socket, the child watcher."""
FDS_PER_CONNECTION = 2
"""Descriptors of one egress connection in the worker: the sandbox's end and the
upstream's."""
THREADS_PER_CALL = 2
"""Threads a call may run in the worker: the child watcher's and a chore's."""
FD_SHARE = 0.75
"""The largest part of the worker's open-files limit its sandboxed calls may hold: the
rest is the store's, the service's and the engine's."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerLimits:
    """What all sandboxed calls of one worker may reserve at once.

    Args:
        calls: sandboxed calls running at once.
        processes: processes and threads of all calls at once. Each call reserves its
            ``max_processes`` plus :data:`LAUNCHER_PROCESSES`. When the worker runs as root,
            the kernel also holds the sandbox user to this many processes on the host.
        egress_connections: egress proxy connections open at once, all calls together.
            A call with ``hosts`` reserves its ``egress_connections``.
        output_bytes: command output kept in memory at once. A call reserves twice its
            ``output_cap_bytes`` (stdout and stderr).
        resolver_threads: threads that resolve the names of egress destinations, for
            all calls. They never take a thread from the event loop's default executor.
    """

    calls: int = 32
    processes: int = 4096
    egress_connections: int = 128
    output_bytes: int = 64 * 1024 * 1024
    resolver_threads: int = 4

    def __post_init__(self) -> None:
        for name in ("calls", "processes", "egress_connections", "output_bytes",
                     "resolver_threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(
                    f"sandbox worker limit {name}={value!r}: give a whole number of at least 1")

    def descriptors(self) -> int:
        """The most descriptors the worker's sandboxed calls can hold at once."""
        return self.calls * FDS_PER_CALL + self.egress_connections * FDS_PER_CONNECTION

    def check_descriptors(self) -> None:
        """Raise :class:`~underway.errors.ConfigurationError` when the calls could hold
        more descriptors than :data:`FD_SHARE` of this process's open-files limit."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        room = int(soft * FD_SHARE) if soft != resource.RLIM_INFINITY else None
        if room is not None and self.descriptors() > room:
            raise ConfigurationError(
                f"sandbox worker limits calls={self.calls} and egress_connections="
                f"{self.egress_connections} could hold {self.descriptors()} file "
                f"descriptors, more than {room} ({FD_SHARE:.0%} of this process's "
                f"open-files limit {soft}): lower them or raise the limit (ulimit -n)")

    def threads(self) -> int:
        """The most threads the worker's sandboxed calls can run at once: per call, the
        thread that waits for its process (asyncio's child watcher) and one removing its
        directories; and the resolvers. Egress connections cost none."""
        return self.calls * THREADS_PER_CALL + self.resolver_threads


@dataclass(frozen=True, slots=True)
class Usage:
    """What running calls have reserved (see :meth:`Budget.usage`)."""

    calls: int
    processes: int
    egress_connections: int
    output_bytes: int


@dataclass(frozen=True, slots=True)
class Share:
    """What one call reserved: its limits, as the runner and the proxy enforce them."""

    processes: int
    egress_connections: int
    output_bytes: int


class Admission:
    """One admitted call's reservation; a context manager that gives it back on exit.

    ``share``: what it reserved. ``budget``: the budget it came from.
    """

    def __init__(self, budget: Budget, share: Share) -> None:
        self.budget = budget
        self.share = share
        self._held = True

    def release(self) -> None:
        """Give the reservation back (once; later calls do nothing)."""
        if self._held:
            self._held = False
            self.budget._release(self.share)

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


class Budget:
    """The reservations of one worker's sandboxed calls against ``limits``.

    Thread-safe: calls made with :func:`~underway.sandbox.run_command` from several
    threads, each with its own event loop, share one budget.

    Args:
        limits: what all calls may reserve at once.

    Raises :class:`~underway.errors.ConfigurationError` when ``limits`` would let the
    calls hold more descriptors than :data:`FD_SHARE` of this process's open-files limit.
    """

    def __init__(self, limits: WorkerLimits | None = None) -> None:
        self.limits = limits or WorkerLimits()
        self.limits.check_descriptors()
        self._lock = threading.Lock()
        self._used = Usage(0, 0, 0, 0)
        self._resolver: ThreadPoolExecutor | None = None
        self._chores: ThreadPoolExecutor | None = None

    def admit(self, profile: SandboxProfile) -> Admission:
        """Reserve the share of one call under ``profile``.

        Raises :class:`SandboxLimitReached` naming the first worker limit the share does
        not fit in; the command must then not run.
        """
        lim = profile.limits
        share = Share(
            processes=(lim.max_processes or 0) + LAUNCHER_PROCESSES,
            egress_connections=lim.egress_connections if profile.hosts else 0,
            output_bytes=2 * lim.output_cap_bytes,
        )
        with self._lock:
            used = self._used
            wanted = (("calls", used.calls, 1, self.limits.calls),
                      ("processes", used.processes, share.processes, self.limits.processes),
                      ("egress connections", used.egress_connections,
                       share.egress_connections, self.limits.egress_connections),
                      ("output bytes", used.output_bytes, share.output_bytes,
                       self.limits.output_bytes))
            for name, have, want, limit in wanted:
                if have + want > limit:
                    raise SandboxLimitReached(_refusal(name, have, want, limit))
            self._used = Usage(used.calls + 1, used.processes + share.processes,
                               used.egress_connections + share.egress_connections,
                               used.output_bytes + share.output_bytes)
        return Admission(self, share)

    def _release(self, share: Share) -> None:
        with self._lock:
            u = self._used
            self._used = Usage(u.calls - 1, u.processes - share.processes,
                               u.egress_connections - share.egress_connections,
                               u.output_bytes - share.output_bytes)

    def usage(self) -> Usage:
        """What running calls have reserved now."""
        with self._lock:
            return self._used

    async def resolve(self, host: str, port: int) -> list[tuple[Any, ...]]:
        """``socket.getaddrinfo(host, port)`` for TCP, on the budget's own resolver
        threads: a slow name server holds up only egress, never the default executor."""
        with self._lock:
            if self._resolver is None:
                self._resolver = ThreadPoolExecutor(
                    self.limits.resolver_threads, thread_name_prefix="underway-resolve")
            pool = self._resolver
        return await asyncio.get_running_loop().run_in_executor(
            pool, lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))

    async def chore(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the budget's own threads (one per call at most) and wait for it:
        slow work on a call's behalf, such as removing what its command left, never
        holds up the event loop or its default executor."""
        with self._lock:
            if self._chores is None:
                self._chores = ThreadPoolExecutor(self.limits.calls,
                                                  thread_name_prefix="underway-sandbox")
            pool = self._chores
        await asyncio.get_running_loop().run_in_executor(pool, fn)

    def close(self) -> None:
        """Stop the budget's threads once they finish what they are doing."""
        with self._lock:
            pools, self._resolver, self._chores = (self._resolver, self._chores), None, None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=False)


def _refusal(name: str, have: int, want: int, limit: int) -> str:
    if want > limit:
        return (f"sandbox worker {name} limit {limit} is less than one call under this "
                f"profile reserves ({want}); the command was not run: lower the profile's "
                f"limit or raise the worker's (WorkerLimits)")
    return (f"sandbox worker {name} limit {limit} reached ({have} reserved by running "
            f"calls, this call needs {want}); the command was not run: retry when calls "
            f"finish, or raise the worker's limit (WorkerLimits)")


_budget: Budget | None = None
_budget_pid = 0
_budget_lock = threading.Lock()


def worker_budget() -> Budget:
    """This process's budget: the one :func:`configure_worker` set, else one with the
    :class:`WorkerLimits` defaults. A forked child starts a fresh one with the same
    limits (the parent's reservations are not its own)."""
    global _budget, _budget_pid
    with _budget_lock:
        if _budget is None or _budget_pid != os.getpid():
            _budget = Budget(_budget.limits if _budget is not None else None)
            _budget_pid = os.getpid()
        return _budget


def configure_worker(limits: WorkerLimits) -> Budget:
    """Make ``limits`` this process's sandbox budget and return it. Calls already
    running keep their reservations in the budget they were admitted by.

    Args:
        limits: what all sandboxed calls of this process may reserve at once.
    """
    global _budget, _budget_pid
    fresh = Budget(limits)
    with _budget_lock:
        old, _budget, _budget_pid = _budget, fresh, os.getpid()
    if old is not None:
        old.close()
    return fresh
