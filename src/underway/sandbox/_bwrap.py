"""The bubblewrap backend: each command in fresh namespaces on a read-only root.

The sandbox's root is an empty tmpfs, made read-only once everything is mounted. On it:
``/usr`` and the top-level links into it, a handful of ``/etc`` files, the profile's own
paths, the call's workspace (writable), a private ``/tmp``, a fresh ``/proc`` (only the
sandbox's processes) and a minimal ``/dev``. Nothing else of the host — its home
directories, its other files, its processes, its network — exists inside.

Every namespace is new (user, mount, PID, network, IPC, UTS, cgroup); the network one
is shared only when the profile allows it. Nested user namespaces are refused. A worker
running as root first drops to the profile's unprivileged user, so the process limit
applies and nothing inside has any privilege on the host.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._child import Rlimit, capped, child_setup, exec_chain, reachable
from ._launch import Launch, command_env, deadline
from ._workspace import CallDirs
from .errors import SandboxError
from .profile import ETC_NETWORK, ETC_RO, PROXY_SOCKET, ROOT_LINKS, SYSTEM_RO, SandboxProfile

PROBE_TIMEOUT_S = 20.0
HOSTNAME = "underway-sandbox"
"""The sandbox's host name; with :data:`MARKER_ENV`, how :func:`reap_orphans` recognizes
our sandboxes."""
MARKER_ENV = "UNDERWAY_SANDBOX"
"""Set to :data:`HOSTNAME` in every command's environment."""
_usable: set[tuple[str, int, int]] = set()
"""Binaries (with the ids they run as) that set up a sandbox once: probed only once."""


def binary() -> str | None:
    """The ``bwrap`` on PATH, if any."""
    return shutil.which("bwrap")


def as_ids(profile: SandboxProfile) -> tuple[int, int] | None:
    """The ids commands run as: the profile's when the worker is root (dropped to), else
    None (the worker's own; it cannot change them)."""
    return (profile.uid, profile.gid) if os.geteuid() == 0 else None


def unavailable(profile: SandboxProfile) -> str | None:
    """None when bubblewrap can set up a sandbox here, else why not and what to do."""
    path = binary()
    if path is None:
        return ("`bwrap` is not on PATH; install bubblewrap (Debian/Ubuntu: apt-get install "
                "bubblewrap; Fedora: dnf install bubblewrap)")
    ids = as_ids(profile)
    key = (path, *(ids or (os.geteuid(), os.getegid())))
    if key in _usable:
        return None
    argv = [path, "--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1",
            "--die-with-parent", *_system_mounts(network=False), "--proc", "/proc",
            "--dev", "/dev", "--", _true()]
    chain = exec_chain(ids, [])
    try:
        done = subprocess.run(
            (chain or []) + argv, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False,
            preexec_fn=None if chain else child_setup(ids, []), start_new_session=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path} could not be started: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        return (f"{path} cannot create a sandbox on this host ({why}); unprivileged user "
                "namespaces must be enabled (sysctl kernel.unprivileged_userns_clone=1, "
                "user.max_user_namespaces > 0)")
    _usable.add(key)
    reap_orphans(path, key[1])
    return None


def reap_orphans(path: str, uid: int) -> list[int]:
    """SIGKILL sandboxes that a worker killed during their setup left behind; return
    their pids.

    bubblewrap binds a sandbox to its own life only at the end of setup, so a worker
    SIGKILLed in those milliseconds can leave the half-made sandbox waiting forever, or
    running its command with nobody to time it out. Either is a process of the sandbox
    user whose parent is now init: a ``bwrap`` launched with our host name, or the init
    of a PID namespace that started with our environment marker. Killing it takes its
    namespace, and everything in it, down. Run when a process first uses the sandbox, so
    a worker restarted after a crash cleans up after its predecessor.
    """
    launch = f"--hostname\0{HOSTNAME}\0".encode()
    marker = f"{MARKER_ENV}={HOSTNAME}\0".encode()
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            status = dict(line.split(":", 1) for line in
                          Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
            if status.get("PPid", "").strip() != "1":
                continue
            stuck = (os.readlink(f"/proc/{pid}/exe") == path
                     and launch in Path(f"/proc/{pid}/cmdline").read_bytes())
            ns_pids = status.get("NSpid", "").split()
            running = (len(ns_pids) > 1 and ns_pids[-1] == "1"
                       and marker in Path(f"/proc/{pid}/environ").read_bytes())
            if stuck or running:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        except (OSError, ValueError):
            continue
    return killed


def plan(profile: SandboxProfile, argv: Sequence[str], dirs: CallDirs,
         extra_env: Mapping[str, str] | None, *, ceiling: int | None = None) -> Launch:
    """How to run ``argv`` under ``profile`` with bubblewrap.

    The process limit is set inside the sandbox, on its first process (see
    :func:`process_limits`); ``ceiling``, when the worker runs as root, caps the sandbox
    user's processes on the host from outside. A ``timeout`` process in front keeps the
    time limit (:func:`~underway.sandbox._launch.deadline`).
    """
    path = binary()
    if path is None:
        raise SandboxError("`bwrap` disappeared from PATH since it was probed")
    ids = as_ids(profile)
    bound = dirs.bind(profile, ids)
    stage: list[tuple[str, str, int, int]] = []
    fds: list[int] = []
    ws = profile.workspace_dir
    env = {**command_env(profile, ws, extra_env), MARKER_ENV: HOSTNAME}
    args = [path, "--unshare-all", "--unshare-user", "--disable-userns"]
    if profile.network:
        args.append("--share-net")
    # --as-pid-1: the command itself is the PID namespace's init and bubblewrap's own
    # child, so bubblewrap reaps it. With bubblewrap's extra init, that init outlives
    # bubblewrap by a moment and is left for the host's PID 1 to reap: a zombie of the
    # sandbox user, counted against its process limit, forever where PID 1 is a worker
    # that reaps nothing (a container without an init).
    args += ["--as-pid-1", "--die-with-parent", "--new-session", "--hostname", HOSTNAME]
    args += _system_mounts(network=profile.network)
    args += ["--size", str(profile.limits.tmp_size_mb * 1024 * 1024), "--tmpfs", "/tmp",
             "--proc", "/proc", "--dev", "/dev"]
    for b in bound:
        src = b.mount.source
        flag = "--bind" if b.mount.writable else "--ro-bind"
        if ids is not None and not reachable(src.real, *ids):
            # bubblewrap, running as the sandbox user, could not even look it up: bound
            # first at a reachable place, and checked there to be the verified object.
            point = dirs.stage_point(is_dir=src.is_dir)
            stage.append((src.real, point, src.dev, src.ino))
            args += [flag, point, b.mount.target]
        else:
            # The descriptor, not the path: bubblewrap mounts what it refers to and checks
            # after mounting that nothing was swapped in between.
            fds.append(b.fd)
            args += [flag + "-fd", str(b.fd), b.mount.target]
    if profile.hosts:
        # The egress proxy's socket (its directory is the call's, reachable by the user).
        args += ["--ro-bind", dirs.egress_socket, PROXY_SOCKET]
    args += ["--chdir", ws, "--remount-ro", "/"]
    # bubblewrap reads one byte from --block-fd once the sandbox is fully set up, just
    # before it starts the command; a byte still unread afterwards means setup failed.
    block_r, block_w = os.pipe()
    os.write(block_w, b"x")
    os.close(block_w)
    rlimits, inner = process_limits(profile, ids, ceiling)
    args += ["--block-fd", str(block_r), "--", *inner, *argv]
    args = deadline(profile.limits) + args
    chain = None if stage else exec_chain(ids, rlimits)
    if chain is not None:
        args, setup = chain + args, None
    else:
        setup = child_setup(ids, rlimits, tuple(stage))
    # The environment reaches the command through bubblewrap's own, never its argv: an
    # argv is readable by every user of the host.
    return Launch("bwrap", args, env, setup, pass_fds=(block_r, *fds), setup_fd=os.dup(block_r),
                  close_after_spawn=[block_r], kills_at_timeout=bool(deadline(profile.limits)))


def process_limits(profile: SandboxProfile, ids: tuple[int, int] | None,
                   ceiling: int | None) -> tuple[list[Rlimit], list[str]]:
    """``(rlimits of the launcher, argv prefix inside the sandbox)``.

    The kernel counts a process limit per user *and user namespace*, and every sandbox
    has a namespace of its own. So ``max_processes`` is set inside, by ``prlimit`` as
    the sandbox's first process: it counts only this call's processes, and a fork bomb
    in one call cannot stop another call of the same user from starting any. Outside,
    the launcher's own limit is what the kernel holds the sandbox user to across all of
    its sandboxes: the worker's ``ceiling`` when it runs as root (a user it owns), its
    own limit otherwise. Without ``prlimit`` where the sandbox sees it, the limit is set
    on the launcher, as before: per user, shared by all calls.
    """
    wanted = profile.limits.rlimits()
    nproc = [r for r in wanted if r[0] == "RLIMIT_NPROC"]
    outside = [r for r in wanted if r[0] != "RLIMIT_NPROC"]
    limiter = _inner_prlimit()
    if nproc and limiter is None:
        return capped(wanted), []
    if ids is not None and ceiling is not None:
        outside.append(("RLIMIT_NPROC", ceiling, ceiling))
    outside = capped(outside)
    if not nproc:
        return outside, []
    hard = next((h for n, _, h in outside if n == "RLIMIT_NPROC"), None)
    ((_, soft, top),) = capped(nproc)
    if hard is not None:
        soft, top = min(soft, hard), min(top, hard)
    assert limiter is not None
    return outside, [limiter, f"--nproc={soft}:{top}", "--"]


def _inner_prlimit() -> str | None:
    """``prlimit`` at a path every sandbox shows (under ``/usr`` or a root link)."""
    path = shutil.which("prlimit")
    if path is None:
        return None
    real = os.path.realpath(path)
    shown = (*SYSTEM_RO, *ROOT_LINKS)
    return real if any(real.startswith(d + "/") for d in shown) else None


def _system_mounts(*, network: bool) -> list[str]:
    args: list[str] = []
    for p in SYSTEM_RO:
        args += ["--ro-bind", p, p]
    for p in ROOT_LINKS:
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            args += ["--ro-bind", p, p]
    for p in ETC_RO + (ETC_NETWORK if network else ()):
        args += ["--ro-bind-try", p, p]
    return args


def _true() -> str:
    return "/usr/bin/true" if os.path.exists("/usr/bin/true") else "/bin/true"
