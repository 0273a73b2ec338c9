"""The collections agent under fault drills (docs/drills.md)::

    cd examples
    underway drill --app collections_agent.app:app --setup collections_agent.drill:scenario \
        --db sqlite:///drill.db --runs 10

:func:`scenario` starts the simulated ERP, payments, gateway and finance services for the
drill (in the drill's process, on local ports; the workers reach them over HTTP through
``underway.http``) and hands each run its overdue-invoice event through intake, so the
duplicates drill delivers the same event three times.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from underway.ops.drills import DrillSite, Scenario
from underway.scheduling.intake import IntakeEvent

from . import playbook
from .app import DATA_ENV
from .brain import DAY_ENV
from .overdue import ROUTES, overdue_event
from .services import Systems, serve

DAY_SECONDS = "0.05"
"""A day of the agent's waits, in the drill: a twentieth of a second."""


@contextmanager
def scenario(site: DrillSite) -> Iterator[Scenario]:
    """The services running for the drill, and run ``i``'s event: an open invoice's
    overdue event, made its own entity so that every run owns one."""
    data = site.workdir / "world"
    data.mkdir()
    systems = Systems.create(data)
    running = serve(systems, data)
    playbook.seed(data)
    invoices = [systems.invoice(i) for i in systems.invoice_ids()]

    def event(i: int) -> IntakeEvent:
        invoice = invoices[i % len(invoices)]
        base = overdue_event(invoice)
        return base.model_copy(update={"entity_id": f"{invoice['id']}~{i}",
                                       "idempotency_key": f"{base.idempotency_key}~{i}"})

    try:
        yield Scenario(env={DATA_ENV: str(data), DAY_ENV: DAY_SECONDS}, event=event,
                       routes=ROUTES)
    finally:
        running.close()
        systems.close()
