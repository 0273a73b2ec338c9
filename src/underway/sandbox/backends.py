"""Choosing the backend a call runs under, failing closed when none is usable."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import ConfigurationError
from . import _bwrap as bwrap
from . import _unsandboxed as unsandboxed
from . import docker
from ._launch import Launch
from ._workspace import CallDirs
from .errors import SandboxUnavailable
from .profile import BACKENDS, SandboxProfile

__all__ = ["BackendImpl", "Planner", "select", "why_unavailable"]

log = logging.getLogger("underway.sandbox")


class Planner(Protocol):
    """A backend's ``plan``: the :class:`Launch` of ``argv`` under ``profile``.

    ``ceiling``: the most processes the sandbox user may run for the worker (its
    :class:`~underway.sandbox.WorkerLimits` ``processes``), for backends that count them
    per user."""

    def __call__(self, profile: SandboxProfile, argv: Sequence[str], dirs: CallDirs,
                 extra_env: Mapping[str, str] | None, /, *,
                 ceiling: int | None = None) -> Launch: ...


@dataclass(frozen=True, slots=True)
class BackendImpl:
    """One backend: ``unavailable(profile)`` says why it cannot run here (None: it can);
    ``plan`` builds the :class:`Launch` of a command; ``isolated``: whether it sandboxes."""

    name: str
    unavailable: Callable[[SandboxProfile], str | None]
    plan: Planner
    isolated: bool = True


IMPLS = {
    "bwrap": BackendImpl("bwrap", bwrap.unavailable, bwrap.plan),
    "docker": BackendImpl("docker", docker.unavailable, docker.plan),
    "none": BackendImpl("none", unsandboxed.unavailable, unsandboxed.plan, isolated=False),
}
AUTO_ORDER = ("bwrap", "docker")


def why_unavailable(backend: str, profile: SandboxProfile | None = None) -> str | None:
    """None when ``backend`` can run commands on this host, else why not and how to fix it.

    ``profile`` matters for the ids bubblewrap runs as and for the ``none`` opt-out."""
    if backend not in BACKENDS:
        raise ConfigurationError(f"sandbox backend {backend!r} is unknown; choose one of "
                                 f"{list(BACKENDS)}")
    profile = profile or SandboxProfile()
    refused = []
    for name in AUTO_ORDER if backend == "auto" else (backend,):
        reason = IMPLS[name].unavailable(profile)
        if reason is None:
            return None
        refused.append(reason if backend != "auto" else f"{name}: {reason}")
    return "; ".join(refused)


def select(profile: SandboxProfile) -> BackendImpl:
    """The backend a call under ``profile`` runs with; raises :class:`SandboxUnavailable`
    naming every backend tried when none is usable. Never falls back to ``none``."""
    names = AUTO_ORDER if profile.backend == "auto" else (profile.backend,)
    refused = []
    for name in names:
        impl = IMPLS[name]
        reason = impl.unavailable(profile)
        if reason is None:
            return impl
        refused.append(f"{name}: {reason}")
    raise SandboxUnavailable(
        f"no sandbox backend is usable for profile backend={profile.backend!r}, so the "
        "command was not run. Tried " + "; ".join(refused) + ". Install bubblewrap "
        "(apt-get install bubblewrap) or start a Docker engine."
    )

