"""The ``none`` backend: no isolation at all, for development on a machine without
bubblewrap or Docker.

The command runs as the worker's own user, sees its whole filesystem, network and
processes; only the time limit, the output caps, and the CPU, memory and file-size
limits hold. It must be asked for twice — ``backend="none"`` and either
``allow_unsandboxed=True`` or ``UNDERWAY_ALLOW_UNSANDBOXED=1`` — and every call logs a
warning.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ._child import capped, child_setup, exec_chain
from ._launch import Launch, command_env
from ._workspace import CallDirs
from .profile import SandboxProfile

OPT_OUT_ENV = "UNDERWAY_ALLOW_UNSANDBOXED"


def unavailable(profile: SandboxProfile) -> str | None:
    """None when the profile opted out of sandboxing, else why ``none`` is refused."""
    if profile.allow_unsandboxed or os.environ.get(OPT_OUT_ENV) == "1":
        return None
    return (f"backend 'none' runs commands without any isolation and is for development "
            f"only: pass allow_unsandboxed=True in the profile or set {OPT_OUT_ENV}=1")


def plan(profile: SandboxProfile, argv: Sequence[str], dirs: CallDirs,
         extra_env: Mapping[str, str] | None, *, ceiling: int | None = None) -> Launch:
    """How to run ``argv`` directly, in the workspace. ``ceiling`` is unused: without a
    sandbox, no process limit applies."""
    # The process limit is left off: for root it does not apply, and for anyone else it
    # would count every process of their session, not the command's.
    rlimits = capped([r for r in profile.limits.rlimits() if r[0] != "RLIMIT_NPROC"])
    env = command_env(profile, dirs.workspace, extra_env)
    chain = exec_chain(None, rlimits)
    if chain is not None:
        return Launch("none", chain + list(argv), env, cwd=dirs.workspace)
    return Launch("none", list(argv), env, child_setup(None, rlimits), cwd=dirs.workspace)
