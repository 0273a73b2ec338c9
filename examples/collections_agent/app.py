"""What ``underway worker --app examples.collections_agent.app:app`` runs.

The worker finds the data directory (the simulated services' URLs and the playbook) in
``UNDERWAY_COLLECTIONS_DATA`` and the length of a day in ``UNDERWAY_DEMO_DAY_SECONDS``, else
in the data directory (the demo records it there, so a replay on the same data asks the
model the same way);
``UNDERWAY_MODEL`` swaps the rule-based brain for a real model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from underway import Flow
from underway.errors import ConfigurationError

from .agent import build_agent
from .brain import day_seconds

DATA_ENV = "UNDERWAY_COLLECTIONS_DATA"


def flows(data: Path) -> list[Flow[Any, Any]]:
    """The example's flows, with tools bound to the services recorded in ``data``."""
    return [build_agent(data, day_seconds=day_seconds(data=data)).flow]


def app() -> list[Flow[Any, Any]]:
    """The worker's flows (``--app examples.collections_agent.app:app``)."""
    data = os.environ.get(DATA_ENV, "").strip()
    if not data:
        raise ConfigurationError(
            f"set {DATA_ENV} to the example's data directory (where the simulated services "
            "wrote services.json)"
        )
    return flows(Path(data))
