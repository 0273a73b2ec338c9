"""Escapes through processes: the worker's environment, host processes, user namespaces,
the process, memory, time and CPU limits, and processes that outlive their call."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from ..profile import SandboxProfile
from ._catalogue import Verdict, escape, output_of, run_bash, run_python
from ._host import marker, processes_with


@escape("host_env", "read the worker's environment, inherited or through /proc")
async def host_env(profile: SandboxProfile) -> Verdict:
    var, token = f"UNDERWAY_ESCAPE_{uuid.uuid4().hex[:8].upper()}", uuid.uuid4().hex
    os.environ[var] = token
    # /proc/PID/environ shows what a process started with, so the bait is a process
    # started with the secret (as the sandbox user: only isolation stands in the way).
    bait = _host_process({**os.environ}, profile)
    try:
        r = await run_bash(profile, (
            f"env; for p in self 1 $PPID {os.getpid()} {bait.pid}; do cat /proc/$p/environ; "
            "done 2>&1 | tr '\\0' ' '"
        ))
    finally:
        del os.environ[var]
        bait.kill()
        bait.wait()
    leaked = token in r.stdout + r.stderr
    return Verdict(not leaked, ("saw the variable; " if leaked else "") + output_of(r)[:200])


@escape("kill_host_process", "SIGKILL a host process of the sandbox's own uid")
async def kill_host_process(profile: SandboxProfile) -> Verdict:
    victim = _host_process(None, profile)
    try:
        r = await run_bash(profile, f"kill -9 {victim.pid}; kill -0 {victim.pid} && echo ALIVE")
        alive = not _dead_or_dying(victim)
    finally:
        victim.kill()
        victim.wait()
    return Verdict(alive, ("" if alive else "host process was killed; ") + output_of(r))


def _dead_or_dying(proc: subprocess.Popen[bytes]) -> bool:
    """Whether ``proc`` has been killed. A SIGKILL takes effect when the kernel next runs
    the target, which on a busy host can be after the sender has exited: until then the
    target still runs, with the signal pending (or already exiting), so both count."""
    if proc.poll() is not None:
        return True
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except OSError:
        return False  # not reaped yet, so listed: unreadable says nothing
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    pending = int(fields.get("SigPnd", "0"), 16) | int(fields.get("ShdPnd", "0"), 16)
    exiting = int(stat.rsplit(")", 1)[1].split()[6]) & 0x4  # PF_EXITING in the task flags
    return bool(pending & 1 << (signal.SIGKILL - 1) or exiting
                or fields.get("State", "").strip()[:1] in ("Z", "X"))


def _host_process(env: dict[str, str] | None, profile: SandboxProfile) -> subprocess.Popen[bytes]:
    """A host ``sleep`` running as the sandbox user when the worker is root, so that only
    the sandbox's isolation, not file permissions, keeps the command away from it."""
    root = os.geteuid() == 0
    return subprocess.Popen(["sleep", "60"], env=env, start_new_session=True,
                            user=profile.uid if root else None,
                            group=profile.gid if root else None)


@escape("nested_userns", "gain capabilities in a nested user namespace")
async def nested_userns(profile: SandboxProfile) -> Verdict:
    r = await run_bash(profile, "unshare --user --map-root-user --mount sh -c 'id -u; mount -t "
                                "tmpfs none /tmp && echo MOUNTED'")
    gained = "MOUNTED" in r.stdout or r.stdout.strip().startswith("0")
    return Verdict(not gained, output_of(r))


def _bomb_ids() -> int:
    """A user and group id no account has, this process's own: two checks running at once
    on one host do not share a process count either."""
    return BOMB_IDS + os.getpid() % 1_000_000


BOMB_IDS = 1_900_000_000
"""Start of the id range the fork-bomb check runs as (far above any account's ids)."""


@escape("fork_bomb", "fork without end, every process holding on (max_processes=24)")
async def fork_bomb(profile: SandboxProfile) -> Verdict:
    cap = 24
    limited = replace(profile, limits=replace(profile.limits, max_processes=cap, timeout_s=5))
    if os.geteuid() == 0:
        # The process limit counts every process of the sandbox's user on the host (a
        # container's processes too: Docker maps its users to the host's): a bomb run as
        # the profile's user would starve the host's other sandboxes (a worker's live calls)
        # for as long as it holds. A user of its own keeps the check harmless.
        ids = _bomb_ids()
        limited = replace(limited, uid=ids, gid=ids)
    tag = marker()
    peak = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, len(processes_with(tag)))
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        # Each process forks two more and waits for them: none exits, so the tree grows
        # until the process limit stops it, and stays there until the time limit.
        r = await run_bash(limited, f": {tag}; bomb() {{ bomb & bomb & wait; }}; bomb")
    finally:
        stop.set()
        thread.join(timeout=5)
    left = processes_with(tag)
    host_ok = subprocess.run(["true"], check=False).returncode == 0
    return Verdict(peak <= cap and not left and host_ok,
                   f"peak {peak} processes (cap {cap}), {len(left)} left after the call, host "
                   f"{'spawns fine' if host_ok else 'cannot spawn'}; exit {r.exit_code}"
                   f"{' (timed out)' if r.timed_out else ''}")


@escape("memory_hog", "allocate 2 GiB with memory_mb=256")
async def memory_hog(profile: SandboxProfile) -> Verdict:
    limited = replace(profile, limits=replace(profile.limits, memory_mb=256))
    r = await run_python(limited, "b = bytearray(2 * 1024 ** 3)\nprint('ALLOCATED', len(b))")
    got = "ALLOCATED" in r.stdout
    return Verdict(not got and r.exit_code != 0, output_of(r)[-200:])


@escape("runaway_loop", "loop forever past a 1 s time limit")
async def runaway_loop(profile: SandboxProfile) -> Verdict:
    tag = marker()
    limited = replace(profile, limits=replace(profile.limits, timeout_s=1, cpu_seconds=None))
    r = await run_bash(limited, f": {tag}; while :; do :; done")
    left = processes_with(tag)
    return Verdict(r.timed_out and not left,
                   f"timed_out={r.timed_out}, {len(left)} processes left, exit {r.exit_code}")


@escape("cpu_time", "burn CPU past cpu_seconds=1 (wall limit 300 s)")
async def cpu_time(profile: SandboxProfile) -> Verdict:
    # The wall limit only guards against a hang: on a busy machine one CPU second may take
    # many seconds of wall time to accumulate.
    limited = replace(profile, limits=replace(profile.limits, timeout_s=300, cpu_seconds=1))
    r = await run_bash(limited, "while :; do :; done")
    return Verdict(not r.timed_out and r.exit_code != 0,
                   f"exit {r.exit_code}, timed_out={r.timed_out}")


@escape("outlive_setsid", "leave a `setsid` background process behind")
async def outlive_setsid(profile: SandboxProfile) -> Verdict:
    tag = marker()
    r = await run_bash(profile,
                       f"setsid bash -c 'exec -a {tag} sleep 300' & sleep 0.3; echo started")
    left = processes_with(tag)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return Verdict(not left and "started" in r.stdout,
                   f"{len(left)} processes left after the call; " + output_of(r))


@escape("outlive_double_fork", "leave a double-forked `nohup` daemon behind")
async def outlive_double_fork(profile: SandboxProfile) -> Verdict:
    tag = marker()
    r = await run_bash(profile, (
        f"( nohup bash -c 'trap \"\" HUP TERM; exec -a {tag} sleep 300' >/dev/null 2>&1 & ); "
        "sleep 0.3; echo started"
    ))
    left = processes_with(tag)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return Verdict(not left and "started" in r.stdout,
                   f"{len(left)} processes left after the call; " + output_of(r))

