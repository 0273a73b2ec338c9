"""The Docker backend: each command in a throwaway container.

Used only when ``docker info`` succeeds, i.e. a Docker engine answers; a client without
an engine makes the backend unavailable, never a silent fallback. The container has no
network (unless allowed), a read-only root, no capabilities, ``no-new-privileges``, the
profile's user, memory, process, CPU and file-size limits, a private ``/tmp`` and the
workspace as its only writable volume. It is started with a unique name so that a
timeout or cancellation can ``docker kill`` it: killing the client alone would leave the
container running. Inside, ``timeout -s KILL`` bounds it too, for a client that dies
without a chance to kill it.

Each container is labelled with the identity of the process that launched it
(:func:`~underway.identity.worker_identity`). The first process on a host to use the
backend kills the containers whose launching process is gone — those of a worker killed
with SIGKILL — instead of letting them run until their own time limit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence

from ..identity import owner_is_dead, worker_identity
from ._child import child_setup, exec_chain
from ._launch import Launch, command_env
from ._workspace import CallDirs
from .errors import SandboxError
from .profile import PYTHON_PREFIX, SandboxProfile

__all__ = ["reap_orphans"]

PROBE_TIMEOUT_S = 10.0
KILL_TIMEOUT_S = 10.0
LABEL = "underway.sandbox.owner"
"""The container label naming the process that launched it."""
_usable: set[str] = set()


def binary() -> str | None:
    """The ``docker`` client on PATH, if any."""
    return shutil.which("docker")


def unavailable(profile: SandboxProfile) -> str | None:
    """None when a Docker engine answers, else why not."""
    path = binary()
    if path is None:
        return "the `docker` client is not on PATH"
    if path in _usable:
        return None
    try:
        done = subprocess.run([path, "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"`docker info` failed: {exc}"
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        return f"no Docker engine answers `docker info` ({lines[-1] if lines else done.returncode})"
    _usable.add(path)
    reap_orphans(path)
    return None


def reap_orphans(path: str) -> list[str]:
    """Kill the sandbox containers whose launching process, on this host, is gone; return
    their names. Errors are ignored: a container left alone still dies at its own time
    limit."""
    try:
        listed = subprocess.run(
            [path, "ps", "--filter", f"label={LABEL}",
             "--format", f'{{{{.Names}}}} {{{{.Label "{LABEL}"}}}}'],
            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    orphans = [name for name, _, owner in (line.partition(" ") for line in listed.splitlines())
               if owner and owner_is_dead(owner)]
    if orphans:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([path, "kill", *orphans], capture_output=True,
                           timeout=KILL_TIMEOUT_S, check=False)
    return orphans


def plan(profile: SandboxProfile, argv: Sequence[str], dirs: CallDirs,
         extra_env: Mapping[str, str] | None, *, ceiling: int | None = None) -> Launch:
    """How to run ``argv`` under ``profile`` in a container. ``ceiling`` is unused:
    Docker counts a container's processes in its own cgroup (``--pids-limit``)."""
    path = binary()
    if path is None:
        raise SandboxError("`docker` disappeared from PATH since it was probed")
    lim = profile.limits
    ws = profile.workspace_dir
    env = command_env(profile, ws, extra_env)
    name = f"underway-sandbox-{uuid.uuid4().hex[:16]}"
    args = [
        path, "run", "--rm", "-i", "--name", name, "--label", f"{LABEL}={worker_identity()}",
        "--network", "bridge" if profile.network else "none",
        "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--user", f"{profile.uid}:{profile.gid}",
        "--tmpfs", f"/tmp:rw,nosuid,nodev,size={lim.tmp_size_mb}m",
        "--workdir", ws, "--ulimit", "core=0",
    ]
    # Verified just before the engine is asked; the engine resolves the paths itself, so
    # the rules that keep every directory above them out of the sandbox's reach are what
    # make them stay put (docs/sandbox.md).
    for b in dirs.bind(profile, (profile.uid, profile.gid)):
        if b.mount.what != PYTHON_PREFIX:  # the image has its own Python
            args += ["--mount", _bind(b.mount.source.real, b.mount.target,
                                      readonly=not b.mount.writable)]
    if lim.memory_mb is not None:
        args += ["--memory", f"{lim.memory_mb}m", "--memory-swap", f"{lim.memory_mb}m"]
    if lim.max_processes is not None:
        args += ["--pids-limit", str(lim.max_processes)]
    if lim.cpus is not None:
        args += ["--cpus", str(lim.cpus)]
    if lim.cpu_seconds is not None:
        args += ["--ulimit", f"cpu={lim.cpu_seconds}:{lim.cpu_seconds + 1}"]
    if lim.file_size_mb is not None:
        args += ["--ulimit", f"fsize={lim.file_size_mb * 1024 * 1024}"]
    for var in env:
        # By name only: the value comes from the client's environment, not its argv.
        args += ["--env", var]
    deadline = str(int(lim.timeout_s) + 5)
    args += [profile.image, "timeout", "-s", "KILL", deadline, *argv]

    def kill() -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([path, "kill", name], capture_output=True, timeout=KILL_TIMEOUT_S,
                           check=False)

    # The client dies with the worker (and kill() is then never called: the in-container
    # `timeout` bounds what is left).
    # The client keeps its own environment (DOCKER_HOST, its config); the command gets
    # only the variables named with --env above.
    client_env = {**os.environ, **env}
    chain = exec_chain(None, [])
    if chain is not None:
        return Launch("docker", chain + args, client_env, on_kill=kill)
    return Launch("docker", args, client_env, child_setup(None, []), on_kill=kill)


def _bind(source: str, target: str, *, readonly: bool) -> str:
    for text in (source, target):
        if "," in text or "=" in text:
            raise SandboxError(
                f"Docker cannot mount {text!r}: paths with ',' or '=' are not supported"
            )
    return f"type=bind,source={source},target={target}" + (",readonly" if readonly else "")

