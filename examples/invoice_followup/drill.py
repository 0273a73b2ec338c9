"""The invoice follow-up agent under fault drills (docs/drills.md)::

    cd examples
    underway drill --app invoice_followup.drill:app --setup invoice_followup.drill:scenario \
        --db sqlite:///drill.db --runs 10

:func:`scenario` gives each drill a fresh simulated world (the ERP fixture and an empty
outbox) in the drill's scratch directory; :func:`app` is what the drill's workers load,
bound to that world through ``INVOICE_FOLLOWUP_DATA``.
"""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path
from typing import Any

from underway.errors import ConfigurationError
from underway.ops.drills import DrillSite, Scenario

from .flow import FollowUpInput, followup, make_tools

DATA_ENV = "INVOICE_FOLLOWUP_DATA"


def app() -> list[Any]:
    """The flow and its tools, bound to the world in ``$INVOICE_FOLLOWUP_DATA``."""
    data = os.environ.get(DATA_ENV, "").strip()
    if not data:
        raise ConfigurationError(f"set {DATA_ENV} to the directory of the simulated ERP")
    return [followup, *make_tools(Path(data))]


def scenario(site: DrillSite) -> Scenario:
    """A fresh world for the drill, and the input of each run: one business day each,
    with a day of a tenth of a second so the durable timers pass quickly."""
    world = site.workdir / "world"
    world.mkdir()

    def input_for(i: int) -> FollowUpInput:
        return FollowUpInput(as_of=date(2024, 6, 1 + i % 28), wait_days=3.0,
                             seconds_per_day=0.1)

    return Scenario(input=input_for, env={DATA_ENV: str(world)})
