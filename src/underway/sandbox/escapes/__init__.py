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

=================  ===========================================================
module             holds
=================  ===========================================================
``_catalogue``     :class:`Escape`, :class:`Verdict`, :data:`ESCAPES`, the profile
``_host``          bait on the host; the processes a command left behind
``_filesystem``    host secrets and directories, writes out of the workspace
``_mounts``        what a command leaves for a later call to mount
``_network``       the host's loopback and abstract unix sockets
``_processes``     the host's processes and environment, limits, lifetimes
``_check``         :func:`check`, :class:`Report` and the command line
=================  ===========================================================
"""

from __future__ import annotations

# The attempt modules register their escapes when imported: this order is the catalogue's.
from . import _filesystem, _mounts, _network, _processes  # noqa: F401
from ._catalogue import ESCAPES, Escape, Verdict, base_profile
from ._check import Report, check, main
from ._host import marker, processes_with

__all__ = [
    "ESCAPES",
    "Escape",
    "Report",
    "Verdict",
    "base_profile",
    "check",
    "main",
    "marker",
    "processes_with",
]
