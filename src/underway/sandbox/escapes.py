"""Escape attempts a sandbox must block, and a check of this host's backends.

    python -m underway.sandbox.escapes                   # bwrap and docker
    python -m underway.sandbox.escapes --backend bwrap --only loopback_tcp
    python -m underway.sandbox.escapes --backend docker --image my-python-image

Each :class:`Escape` plants its bait on the host (a secret file, a listening socket, a
process to kill), runs a real command in the sandbox that goes for it, and judges from
the host's side whether it got there: a :class:`Verdict` says ``blocked`` or not, with
the evidence. Nothing here trusts what the command says about itself. The check prints
one line per attempt and ``blocked N/N`` per backend; a backend that cannot run on this
host is reported unavailable, with why.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from ..errors import ConfigurationError
from .backends import select, why_unavailable
from .errors import SandboxError, SandboxUnavailable
from .profile import Backend, Limits, SandboxProfile
from .result import CommandResult
from .run import run_command_async
from .tools import interpreter

__all__ = ["ESCAPES", "Escape", "Verdict", "main"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether an escape was blocked, and what the host saw."""

    blocked: bool
    evidence: str


@dataclass(frozen=True, slots=True)
class Escape:
    """One escape attempt: ``attempt(profile)`` runs it under ``profile`` and judges it."""

    name: str
    what: str
    attempt: Callable[[SandboxProfile], Awaitable[Verdict]]


ESCAPES: list[Escape] = []
"""The catalogue, in the order the check runs it."""


def _escape(name: str, what: str) -> Callable[
    [Callable[[SandboxProfile], Awaitable[Verdict]]], Callable[[SandboxProfile], Awaitable[Verdict]]
]:
    def register(
        fn: Callable[[SandboxProfile], Awaitable[Verdict]],
    ) -> Callable[[SandboxProfile], Awaitable[Verdict]]:
        ESCAPES.append(Escape(name, what, fn))
        return fn

    return register


def base_profile(backend: str, image: str | None = None) -> SandboxProfile:
    """The profile escapes run under unless they need tighter limits (``image``: the
    Docker image, which needs bash, coreutils and python3)."""
    profile = SandboxProfile(
        backend=cast(Backend, backend),
        limits=Limits(timeout_s=20, cpu_seconds=10, memory_mb=512, max_processes=32),
    )
    return profile if image is None else replace(profile, image=image)


def marker() -> str:
    """A string no process on the host has in its argv yet."""
    return f"underway-escape-{uuid.uuid4().hex[:12]}"


LAUNCHERS = frozenset({b"bwrap", b"docker", b"timeout"})
"""Programs that start a sandbox from the host side (bubblewrap, Docker's client, and the
``timeout`` that keeps the time limit in front of bubblewrap): they carry the command in
their argv but run outside the sandbox, so they are not the sandboxed command's
processes."""


def processes_with(text: str) -> list[int]:
    """Host pids whose command line contains ``text`` (launchers excepted)."""
    needle = text.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline and os.path.basename(cmdline.split(b"\0")[0]) not in LAUNCHERS:
            found.append(int(entry))
    return found


async def _bash(profile: SandboxProfile, script: str,
                workspace: Path | None = None) -> CommandResult:
    return await run_command_async(["/bin/bash", "-c", script], profile=profile,
                                   workspace=workspace)


async def _python(profile: SandboxProfile, code: str) -> CommandResult:
    profile = replace(profile, python=True)
    argv = [interpreter(select(profile).name), "-I", "-c", code]
    return await run_command_async(argv, profile=profile)


def _said(r: CommandResult) -> str:
    return f"exit {r.exit_code}{' (timed out)' if r.timed_out else ''}: " + \
        (r.stdout + r.stderr).strip().replace("\n", " | ")[:300]


@contextlib.contextmanager
def _host_dir() -> Iterator[Path]:
    """A world-readable directory on the host, outside anything the sandbox mounts."""
    path = Path(tempfile.mkdtemp(prefix="underway-escape-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- the filesystem ------------------------------------------------------------------------
@_escape("read_host_secret", "read a world-readable secret in the host's home and /tmp")
async def read_host_secret(profile: SandboxProfile) -> Verdict:
    token = uuid.uuid4().hex
    home_secret = Path.home() / f"underway-secret-{token[:8]}"
    with _host_dir() as bait:
        tmp_secret = bait / "secret"
        for path in (home_secret, tmp_secret):
            path.write_text(token)
            path.chmod(0o644)
        try:
            r = await _bash(profile, (
                f"cat {home_secret} {tmp_secret}; cat /proc/1/root{home_secret}; "
                f"grep -s {token} {Path.home()}/* /tmp/*/* /home/*/* 2>/dev/null; "
                f"ls -la {Path.home()} {bait}"
            ))
        finally:
            home_secret.unlink(missing_ok=True)
    leaked = token in r.stdout + r.stderr
    return Verdict(not leaked, ("read the secret: " if leaked else "") + _said(r))


@_escape("see_host_dirs", "see the host's home, working directory and other top-level dirs")
async def see_host_dirs(profile: SandboxProfile) -> Verdict:
    # A file planted in each host directory tells the host's directory from one of the same
    # name that the sandbox has of its own (a container image has its own /var and /home).
    inside = {"/", "/tmp", "/usr", "/etc", "/proc", "/dev", profile.workspace_dir}
    paths = sorted({str(p) for p in (Path.home(), Path.cwd(), "/var", "/opt", "/home", "/srv",
                                     "/mnt", "/boot", "/run")
                    if os.path.isdir(p) and str(p) not in inside
                    and not str(p).startswith(("/usr/", "/etc/", "/tmp/"))})
    name = f".{marker()}"
    planted = []
    try:
        for p in paths:
            with contextlib.suppress(OSError):
                Path(p, name).write_text("host\n")
                Path(p, name).chmod(0o644)
                planted.append(p)
        script = "".join(f'[ -e "{p}/{name}" ] && echo "VISIBLE {p}"; '
                         for p in planted) + "true"
        r = await _bash(profile, script)
    finally:
        for p in planted:
            Path(p, name).unlink(missing_ok=True)
    seen = [line for line in r.stdout.splitlines() if line.startswith("VISIBLE")]
    return Verdict(bool(planted) and not seen and r.exit_code == 0,
                   f"planted a file in {', '.join(planted) or 'no directory'}: "
                   + ("; ".join(seen) or "none visible"))


@_escape("write_outside", "write into /etc, /usr, /usr/local, the host's home and /")
async def write_outside(profile: SandboxProfile) -> Verdict:
    name = marker()
    targets = [Path(d) / name for d in ("/etc", "/usr", "/usr/local", str(Path.home()), "/")]
    try:
        r = await _bash(profile, "; ".join(f"echo x > {t}" for t in targets))
        landed = [str(t) for t in targets if t.exists()]
    finally:
        for t in targets:
            t.unlink(missing_ok=True)
    return Verdict(not landed, (f"created {landed}; " if landed else "") + _said(r))


@_escape("write_host_tmp", "write into the host's /tmp")
async def write_host_tmp(profile: SandboxProfile) -> Verdict:
    target = Path("/tmp") / marker()
    try:
        r = await _bash(profile, f"echo x > {target} && echo wrote-private-tmp")
        landed = target.exists()
    finally:
        target.unlink(missing_ok=True)
    return Verdict(not landed, ("host /tmp written; " if landed else "") + _said(r))


@_escape("symlink_out", "write through symlinks from the workspace to host paths")
async def symlink_out(profile: SandboxProfile) -> Verdict:
    name = marker()
    targets = [Path.home() / name, Path("/etc") / name]
    with _host_dir() as ws:
        os.chmod(ws, 0o777)
        try:
            r = await _bash(profile, (
                f"ln -s {targets[0]} a; echo x > a; ln -s /etc b; echo x > b/{name}; "
                f"ln -s / c; echo x > c{targets[0]}; ls -la"
            ), workspace=ws)
            landed = [str(t) for t in targets if t.exists()]
        finally:
            for t in targets:
                t.unlink(missing_ok=True)
    return Verdict(not landed, (f"created {landed}; " if landed else "") + _said(r))


@_escape("dotdot_out", "climb out of the workspace with ..")
async def dotdot_out(profile: SandboxProfile) -> Verdict:
    name = marker()
    with _host_dir() as outer:
        ws = outer / "ws"
        ws.mkdir(mode=0o777)
        os.chmod(ws, 0o777)
        r = await _bash(profile, (
            f"echo x > ../{name}; echo x > ../../{name}; "
            f"echo x > ../../../../../../{str(Path.home()).lstrip('/')}/{name}; "
            f"cd .. && echo x > {name}"
        ), workspace=ws)
        landed = [str(p) for p in (outer / name, outer.parent / name, Path.home() / name)
                  if p.exists()]
        for p in (outer.parent / name, Path.home() / name):
            p.unlink(missing_ok=True)
    return Verdict(not landed, (f"created {landed}; " if landed else "") + _said(r))


@_escape("huge_file", "write a 64 MiB file with file_size_mb=1")
async def huge_file(profile: SandboxProfile) -> Verdict:
    limited = replace(profile, limits=replace(profile.limits, file_size_mb=1))
    with _host_dir() as ws:
        os.chmod(ws, 0o777)
        r = await _bash(limited, "head -c 67108864 /dev/zero > big", workspace=ws)
        size = (ws / "big").stat().st_size if (ws / "big").exists() else 0
    return Verdict(size <= 1024 * 1024, f"the file reached {size} bytes; " + _said(r))


# -- what later calls mount ---------------------------------------------------------------
@contextlib.contextmanager
def _vault() -> Iterator[tuple[Path, str]]:
    """Host secrets out of every sandbox's reach: ``vault`` (mode 0700, the worker's)
    holds ``cfg/secret`` (mode 0644: only the directory keeps it out) and ``secret0600``
    (mode 0600). Both hold the token yielded with the vault."""
    token = uuid.uuid4().hex
    with _host_dir() as bait:
        vault = bait / "vault"
        (vault / "cfg").mkdir(parents=True)
        vault.chmod(0o700)
        (vault / "cfg").chmod(0o755)
        for path, mode in ((vault / "cfg" / "secret", 0o644), (vault / "secret0600", 0o600)):
            path.write_text(token)
            path.chmod(mode)
        yield vault, token


@contextlib.contextmanager
def _workspace() -> Iterator[Path]:
    """A persistent workspace (mode 0777) in a host directory of its own."""
    with _host_dir() as outer:
        ws = outer / "ws"
        ws.mkdir()
        ws.chmod(0o777)
        yield ws


async def _call(profile: SandboxProfile | Callable[[], SandboxProfile], script: str,
                workspace: Path | None = None) -> str:
    """What one call said, or why it was refused (the profile may be made by the call, so
    that a profile refused when made counts as a refusal)."""
    try:
        made = profile() if callable(profile) else profile
        return _said(await _bash(made, script, workspace))
    except SandboxUnavailable:
        raise
    except (SandboxError, ConfigurationError) as exc:
        return f"refused ({type(exc).__name__}: {str(exc)[:160]})"


async def _swap(profile: SandboxProfile, ws: Path, field_name: str, path: Path, plant: str,
                probe: str) -> list[str]:
    """The two-call attack on a profile path inside the workspace ``ws``: the profile is
    made (call 0 runs with it), call 1 — a command with the workspace, no more — runs
    ``plant``, then call 2 runs ``probe`` with the profile made before, and call 3 with
    one made after the swap."""
    def with_path() -> SandboxProfile:
        if field_name == "ro_paths":
            return replace(profile, ro_paths=(str(path),))
        return replace(profile, rw_paths=(str(path),))

    before = await _call(with_path, "true")
    pinned: SandboxProfile | Callable[[], SandboxProfile] = with_path
    with contextlib.suppress(ConfigurationError):
        pinned = with_path()
    said = [f"call 0: {await _call(pinned, probe, ws)}", f"(profile made: {before})",
            f"call 1: {await _call(profile, plant, ws)}"]
    said.append(f"call 2: {await _call(pinned, probe, ws)}")
    said.append(f"call 3 (profile made after): {await _call(with_path, probe, ws)}")
    return said


def _leaked(token: str, said: list[str]) -> Verdict:
    leaked = any(token in line for line in said)
    return Verdict(not leaked, ("READ THE SECRET; " if leaked else "") + " | ".join(said))


@_escape("swap_ro_path", "swap a read-only path inside the workspace for a symlink to a "
                         "root-only directory, for the next call to mount")
async def swap_ro_path(profile: SandboxProfile) -> Verdict:
    with _vault() as (vault, token), _workspace() as ws:
        (ws / "cfg").mkdir(mode=0o777)
        said = await _swap(profile, ws, "ro_paths", ws / "cfg",
                           f"rm -rf cfg && ln -s {vault}/cfg cfg && ls -l cfg",
                           f"cat {ws}/cfg/secret {ws}/cfg/../secret0600")
    return _leaked(token, said)


@_escape("swap_rw_path", "swap a writable path inside the workspace for a symlink to the "
                         "host's /tmp and to a world-writable host directory")
async def swap_rw_path(profile: SandboxProfile) -> Verdict:
    name = marker()
    said = []
    with _host_dir() as drop:
        drop.chmod(0o777)
        for target in (Path("/tmp"), drop):
            with _workspace() as ws:
                (ws / "out").mkdir(mode=0o777)
                said += await _swap(profile, ws, "rw_paths", ws / "out",
                                    f"rm -rf out && ln -s {target} out",
                                    f"echo x > {ws}/out/{name}")
        landed = [str(p) for p in (Path("/tmp") / name, drop / name) if p.exists()]
        (Path("/tmp") / name).unlink(missing_ok=True)
    return Verdict(not landed, (f"WROTE {landed}; " if landed else "") + " | ".join(said))


@_escape("swap_parent_dir", "replace a directory above a read-only path with a symlink")
async def swap_parent_dir(profile: SandboxProfile) -> Verdict:
    with _vault() as (vault, token), _workspace() as ws:
        (ws / "a" / "cfg").mkdir(parents=True)
        for d in (ws / "a", ws / "a" / "cfg"):
            d.chmod(0o777)
        said = await _swap(profile, ws, "ro_paths", ws / "a" / "cfg",
                           f"rm -rf a && ln -s {vault} a", f"cat {ws}/a/cfg/secret")
    return _leaked(token, said)


@_escape("dotdot_symlink", "swap a read-only path for a relative symlink climbing out with ..")
async def dotdot_symlink(profile: SandboxProfile) -> Verdict:
    with _vault() as (vault, token), _workspace() as ws:
        (ws / "cfg").mkdir(mode=0o777)
        climb = "../" * 12 + str(vault / "cfg").lstrip("/")
        said = await _swap(profile, ws, "ro_paths", ws / "cfg",
                           f"rm -rf cfg && ln -s {climb} cfg", f"cat {ws}/cfg/secret")
    return _leaked(token, said)


@_escape("hardlink_planted", "hardlink root-owned files into the workspace; mount a path that "
                             "became a hardlink to a root-only file on the same device")
async def hardlink_planted(profile: SandboxProfile) -> Verdict:
    with _vault() as (vault, token), _workspace() as ws, _host_dir() as shared:
        secret = vault / "secret0600"
        said = [await _call(profile, "ln /usr/bin/env e1; ln /etc/ld.so.cache e2; "
                                     "ls e1 e2 2>&1", ws)]
        # Planted from outside (a sandbox cannot link across its mounts): a hardlink in
        # the workspace, and one in place of a mounted file, both on the secret's device.
        os.link(secret, ws / "planted")
        cfg = shared / "cfg.txt"
        cfg.write_text("config\n")
        cfg.chmod(0o644)
        pinned = replace(profile, ro_paths=(str(cfg),))
        said.append(f"before: {await _call(pinned, f'cat {cfg}')}")
        os.link(vault / "cfg" / "secret", shared / "next")
        os.replace(shared / "next", cfg)
        same = os.stat(cfg).st_dev == os.stat(secret).st_dev
        said.append(f"same device: {same}")
        said.append(f"workspace: {await _call(profile, 'cat planted', ws)}")
        said.append(f"pinned: {await _call(pinned, f'cat {cfg}')}")
        said.append("in workspace: " + await _call(
            lambda: replace(profile, ro_paths=(str(ws / "planted"),)),
            f"cat {ws}/planted", ws))
    verdict = _leaked(token, said)
    if os.geteuid() != 0:
        # The sandbox runs as the worker, who may read its own file in the workspace.
        verdict = _leaked(token, [line for line in said if not line.startswith("workspace")])
    return verdict


@_escape("rename_race", "swap a read-only path back and forth while other calls mount it")
async def rename_race(profile: SandboxProfile) -> Verdict:
    with _vault() as (vault, token), _workspace() as ws:
        (ws / "cfg").mkdir(mode=0o777)
        cfg = ws / "cfg"

        def with_cfg() -> SandboxProfile:
            return replace(profile, ro_paths=(str(cfg),))

        pinned: SandboxProfile | Callable[[], SandboxProfile] = with_cfg
        with contextlib.suppress(ConfigurationError):
            pinned = with_cfg()
        racer = asyncio.ensure_future(_call(profile, (
            "end=$((SECONDS + 3)); while [ $SECONDS -lt $end ]; do mv cfg cfg.real; "
            f"ln -s {vault}/cfg cfg; sleep 0.01; rm cfg; mv cfg.real cfg; done"), ws))
        said: list[str] = []
        for _ in range(6):
            said += await asyncio.gather(
                _call(pinned, f"cat {cfg}/secret", ws),
                _call(with_cfg, f"cat {cfg}/secret", ws))
        said.append(f"racer: {await racer}")
    return _leaked(token, said)


@_escape("workspace_swap", "replace the workspace itself with a symlink: from inside, and "
                           "from a call that can write its parent")
async def workspace_swap(profile: SandboxProfile) -> Verdict:
    name = marker()
    with _vault() as (vault, token), _host_dir() as share, _host_dir() as rootdir, \
            _workspace() as own:
        said = [await _call(profile, (
            "cd / && { mv /workspace /w2; rmdir /workspace; ln -s / /workspace; } 2>&1; true"),
            own)]
        share.chmod(0o777)
        ws = share / "ws"
        ws.mkdir(mode=0o777)
        ws.chmod(0o777)
        owners = {p: (os.stat(p).st_uid, os.stat(p).st_gid) for p in (vault, rootdir)}

        def writer() -> SandboxProfile:
            return replace(profile, rw_paths=(str(share),))

        try:
            for target in (vault, rootdir):
                said.append(await _call(writer, f"mv {ws} {share}/old; ln -s {target} {ws}"))
                said.append(await _call(profile, f"cat cfg/secret; echo x > {name}", ws))
                if ws.is_symlink():
                    ws.unlink()
                    (share / "old").rename(ws)
        finally:
            chowned = [str(p) for p, ids in owners.items()
                       if (os.stat(p).st_uid, os.stat(p).st_gid) != ids]
            for p, ids in owners.items():
                os.chown(p, *ids)
        landed = [str(p) for p in (vault / name, rootdir / name) if p.exists()]
    verdict = _leaked(token, said)
    bad = chowned or landed
    return Verdict(verdict.blocked and not bad,
                   (f"CHOWNED {chowned} WROTE {landed}; " if bad else "") + verdict.evidence)


@_escape("mount_target_symlink", "mount at a target inside a writable mount, where a command "
                                 "can leave a symlink for the next mount to follow")
async def mount_target_symlink(profile: SandboxProfile) -> Verdict:
    with _host_dir() as share:
        share.chmod(0o777)
        said = []
        layouts: list[dict[str, Any]] = [
            {"rw_paths": (str(share),), "workspace_dir": f"{share}/ws"},
            {"rw_paths": (str(share),), "ro_paths": (f"{share}/ref",)},
        ]
        for kwargs in layouts:
            def made(kw: dict[str, Any] = kwargs) -> SandboxProfile:
                return replace(profile, **kw)

            # Twice: the first call leaves the symlinks a second would mount through.
            for _ in range(2):
                said.append(await _call(made, f"ln -s /usr/bin {share}/ws; "
                                              f"ln -s /usr/bin {share}/ref; pwd -P; true"))
    accepted = [line for line in said if not line.startswith("refused")]
    return Verdict(not accepted, " | ".join(said))


# -- the network ---------------------------------------------------------------------------
@_escape("loopback_tcp", "connect to a TCP server listening on the host's loopback")
async def loopback_tcp(profile: SandboxProfile) -> Verdict:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            accepted.append(f"{peer[0]}:{peer[1]}")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        r = await _bash(profile, (
            f"for h in 127.0.0.1 localhost; do (exec 3<>/dev/tcp/$h/{port}) 2>&1 "
            "&& echo CONNECTED $h; done; true"
        ))
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
    reached = bool(accepted) or "CONNECTED" in r.stdout
    return Verdict(not reached, (f"server accepted {accepted}; " if accepted else "") + _said(r))


@_escape("abstract_unix_socket", "connect to an abstract unix socket the host listens on")
async def abstract_unix_socket(profile: SandboxProfile) -> Verdict:
    name = marker()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(8)
    server.setblocking(False)
    try:
        r = await _python(profile, (
            "import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            f"s.connect('\\0{name}'); print('CONNECTED')"
        ))
        try:
            conn, _ = server.accept()
            conn.close()
            accepted = True
        except BlockingIOError:
            accepted = False
    finally:
        server.close()
    reached = accepted or "CONNECTED" in r.stdout
    return Verdict(not reached, ("host socket reached; " if reached else "") + _said(r))


# -- processes -----------------------------------------------------------------------------
@_escape("host_env", "read the worker's environment, inherited or through /proc")
async def host_env(profile: SandboxProfile) -> Verdict:
    var, token = f"UNDERWAY_ESCAPE_{uuid.uuid4().hex[:8].upper()}", uuid.uuid4().hex
    os.environ[var] = token
    # /proc/PID/environ shows what a process started with, so the bait is a process
    # started with the secret (as the sandbox user: only isolation stands in the way).
    bait = _host_process({**os.environ}, profile)
    try:
        r = await _bash(profile, (
            f"env; for p in self 1 $PPID {os.getpid()} {bait.pid}; do cat /proc/$p/environ; "
            "done 2>&1 | tr '\\0' ' '"
        ))
    finally:
        del os.environ[var]
        bait.kill()
        bait.wait()
    leaked = token in r.stdout + r.stderr
    return Verdict(not leaked, ("saw the variable; " if leaked else "") + _said(r)[:200])


@_escape("kill_host_process", "SIGKILL a host process of the sandbox's own uid")
async def kill_host_process(profile: SandboxProfile) -> Verdict:
    victim = _host_process(None, profile)
    try:
        r = await _bash(profile, f"kill -9 {victim.pid}; kill -0 {victim.pid} && echo ALIVE")
        alive = not _dead_or_dying(victim)
    finally:
        victim.kill()
        victim.wait()
    return Verdict(alive, ("" if alive else "host process was killed; ") + _said(r))


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


@_escape("nested_userns", "gain capabilities in a nested user namespace")
async def nested_userns(profile: SandboxProfile) -> Verdict:
    r = await _bash(profile, "unshare --user --map-root-user --mount sh -c 'id -u; mount -t "
                             "tmpfs none /tmp && echo MOUNTED'")
    gained = "MOUNTED" in r.stdout or r.stdout.strip().startswith("0")
    return Verdict(not gained, _said(r))


def _bomb_ids() -> int:
    """A user and group id no account has, this process's own: two checks running at once
    on one host do not share a process count either."""
    return BOMB_IDS + os.getpid() % 1_000_000


BOMB_IDS = 1_900_000_000
"""Start of the id range the fork-bomb check runs as (far above any account's ids)."""


@_escape("fork_bomb", "fork without end, every process holding on (max_processes=24)")
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
        r = await _bash(limited, f": {tag}; bomb() {{ bomb & bomb & wait; }}; bomb")
    finally:
        stop.set()
        thread.join(timeout=5)
    left = processes_with(tag)
    host_ok = subprocess.run(["true"], check=False).returncode == 0
    return Verdict(peak <= cap and not left and host_ok,
                   f"peak {peak} processes (cap {cap}), {len(left)} left after the call, host "
                   f"{'spawns fine' if host_ok else 'cannot spawn'}; exit {r.exit_code}"
                   f"{' (timed out)' if r.timed_out else ''}")


@_escape("memory_hog", "allocate 2 GiB with memory_mb=256")
async def memory_hog(profile: SandboxProfile) -> Verdict:
    limited = replace(profile, limits=replace(profile.limits, memory_mb=256))
    r = await _python(limited, "b = bytearray(2 * 1024 ** 3)\nprint('ALLOCATED', len(b))")
    got = "ALLOCATED" in r.stdout
    return Verdict(not got and r.exit_code != 0, _said(r)[-200:])


@_escape("runaway_loop", "loop forever past a 1 s time limit")
async def runaway_loop(profile: SandboxProfile) -> Verdict:
    tag = marker()
    limited = replace(profile, limits=replace(profile.limits, timeout_s=1, cpu_seconds=None))
    r = await _bash(limited, f": {tag}; while :; do :; done")
    left = processes_with(tag)
    return Verdict(r.timed_out and not left,
                   f"timed_out={r.timed_out}, {len(left)} processes left, exit {r.exit_code}")


@_escape("cpu_time", "burn CPU past cpu_seconds=1 (wall limit 300 s)")
async def cpu_time(profile: SandboxProfile) -> Verdict:
    # The wall limit only guards against a hang: on a busy machine one CPU second may take
    # many seconds of wall time to accumulate.
    limited = replace(profile, limits=replace(profile.limits, timeout_s=300, cpu_seconds=1))
    r = await _bash(limited, "while :; do :; done")
    return Verdict(not r.timed_out and r.exit_code != 0,
                   f"exit {r.exit_code}, timed_out={r.timed_out}")


@_escape("outlive_setsid", "leave a `setsid` background process behind")
async def outlive_setsid(profile: SandboxProfile) -> Verdict:
    tag = marker()
    r = await _bash(profile, f"setsid bash -c 'exec -a {tag} sleep 300' & sleep 0.3; echo started")
    left = processes_with(tag)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return Verdict(not left and "started" in r.stdout,
                   f"{len(left)} processes left after the call; " + _said(r))


@_escape("outlive_double_fork", "leave a double-forked `nohup` daemon behind")
async def outlive_double_fork(profile: SandboxProfile) -> Verdict:
    tag = marker()
    r = await _bash(profile, (
        f"( nohup bash -c 'trap \"\" HUP TERM; exec -a {tag} sleep 300' >/dev/null 2>&1 & ); "
        "sleep 0.3; echo started"
    ))
    left = processes_with(tag)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return Verdict(not left and "started" in r.stdout,
                   f"{len(left)} processes left after the call; " + _said(r))


# -- the check -----------------------------------------------------------------------------
@dataclass
class Report:
    """The outcome of every escape on one backend (or why it could not run)."""

    backend: str
    unavailable: str | None = None
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    @property
    def blocked(self) -> int:
        """How many escapes were blocked."""
        return sum(v.blocked for v in self.verdicts.values())

    def summary(self) -> str:
        """``bwrap: blocked 17/17`` or ``docker: unavailable (why)``."""
        if self.unavailable is not None:
            return f"{self.backend}: unavailable, 0 escapes run ({self.unavailable})"
        return f"{self.backend}: blocked {self.blocked}/{len(self.verdicts)}"


async def check(backend: str, names: list[str] | None = None,
                show: Callable[[str], None] | None = None, *,
                image: str | None = None) -> Report:
    """Run the escapes (all, or those ``names``) on ``backend`` (Docker: in ``image``)."""
    profile = base_profile(backend, image)
    report = Report(backend, why_unavailable(backend, profile))
    if report.unavailable is not None:
        return report
    for esc in ESCAPES:
        if names and esc.name not in names:
            continue
        try:
            verdict = await esc.attempt(profile)
        except Exception as exc:
            verdict = Verdict(False, f"the attempt itself failed: {type(exc).__name__}: {exc}")
        report.verdicts[esc.name] = verdict
        if show is not None:
            state = "blocked" if verdict.blocked else "NOT BLOCKED"
            show(f"{backend:<7} {esc.name:<21} {state:<12} {verdict.evidence}")
    return report


def main(argv: list[str] | None = None) -> int:
    """Check the backends; exit 1 if an available one let an escape through."""
    parser = argparse.ArgumentParser(prog="python -m underway.sandbox.escapes",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--backend", action="append", choices=["bwrap", "docker", "none"],
                        help="backend to check (repeatable; default: bwrap and docker)")
    parser.add_argument("--only", default="", help="comma-separated escape names: " +
                        ", ".join(e.name for e in ESCAPES))
    parser.add_argument("--image", default=None,
                        help="Docker image to run in (needs bash, coreutils and python3; "
                        f"default {SandboxProfile().image})")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - {e.name for e in ESCAPES}
    if unknown:
        parser.error(f"unknown escapes {sorted(unknown)}")
    if "none" in (args.backend or []):
        parser.error("backend 'none' isolates nothing; there is nothing to check")

    def show(line: str) -> None:
        print(line, flush=True)

    reports = [asyncio.run(check(b, names, show, image=args.image))
               for b in args.backend or ["bwrap", "docker"]]
    print()
    for report in reports:
        print(report.summary())
    leaked = any(r.unavailable is None and r.blocked < len(r.verdicts) for r in reports)
    return 1 if leaked else 0


if __name__ == "__main__":
    sys.exit(main())
