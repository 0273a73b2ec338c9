"""Fault drills: run a flow of yours against the failures it will meet, in a scratch
database, and read what it did from the ledger (``underway drill``, docs/drills.md).

A drill starts runs of the app's flow and drives them with real worker processes while it
injects faults (:data:`FAULTS`): workers SIGKILLed at seeded fault points, duplicated
starts and intake deliveries, expired credentials, partial answers from services, slow
dependencies. Its :class:`DrillReport` counts runs started, completed, failed and
escalated, effects executed more than once (must be none), and failures nobody was told
of (must be none), and says per fault what the flow did.
"""

from __future__ import annotations

from ._drive import DrillError, DrillOptions, run_drill
from ._plan import FAULTS, DrillSite, Fault, Scenario, parse_faults
from ._report import DrillReport, FaultReport, Finding

__all__ = [
    "FAULTS",
    "DrillError",
    "DrillOptions",
    "DrillReport",
    "DrillSite",
    "Fault",
    "FaultReport",
    "Finding",
    "Scenario",
    "parse_faults",
    "run_drill",
]
