"""The runs filter of the command line: the options ``runs ls`` and ``runs bulk`` share,
parsed once into the :class:`~underway.client.RunFilter` the client lists runs with."""

from __future__ import annotations

from typing import Annotated

import typer

from ..client import RunFilter
from ..labels import parse_labels
from ._common import Problem, parse_time

STATUSES = ("ready", "waiting", "escalated", "dead", "completed", "failed", "cancelled")
"""Every status a run can have."""

StatusOption = Annotated[
    str | None,
    typer.Option("--status", help=f"Only runs with this status: {', '.join(STATUSES)}.",
                 show_default=False),
]
FlowOption = Annotated[
    str | None, typer.Option("--flow", help="Only runs of this flow.", show_default=False)
]
SinceOption = Annotated[
    str | None,
    typer.Option("--since", help="Only runs created at or after this time: ISO 8601 "
                 "(UTC unless it has an offset) or epoch seconds.", show_default=False),
]
UntilOption = Annotated[
    str | None,
    typer.Option("--until", help="Only runs created before this time.", show_default=False),
]


def run_filter(*, status: str | None, flow: str | None, since: str | None,
               until: str | None, label: list[str] | None = None) -> RunFilter:
    """The filter the options name; a bad status or time is a :class:`Problem`.

    Args:
        status: ``--status``.
        flow: ``--flow``.
        since: ``--since``.
        until: ``--until``.
        label: ``--label`` name=value filters (all must match).
    """
    if status is not None and status not in STATUSES:
        raise Problem(f"unknown status {status!r}; choose one of {', '.join(STATUSES)}")
    return RunFilter(status=status, flow=flow, since=parse_time(since, "--since"),
                     until=parse_time(until, "--until"),
                     labels=parse_labels(label or (), field="--label") or None)
