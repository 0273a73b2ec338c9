"""The support monitor under fault drills (docs/drills.md)::

    cd examples
    underway drill --app support.drill:app --setup support.drill:scenario \
        --db sqlite:///drill.db --environment prod --runs 10

:func:`scenario` starts a ticket desk for the drill (in the drill's process, on a local
port; the workers reach it through ``underway.http``), seeds the help center into the
drill's scratch database, and hands each run a new ticket's ``ticket.created`` event
through intake, so the duplicates drill delivers the same desk event three times.
:func:`app` is what the drill's workers load: the monitor's flows on the scratch database
(``$UNDERWAY_DB``), against the desk at ``$SUPPORT_DESK_URL``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from underway import connect
from underway.errors import ConfigurationError
from underway.knowledge import open_knowledge
from underway.ops.drills import DrillSite, Scenario
from underway.scheduling.intake import IntakeEvent

from . import helpcenter
from .app import Settings, build, default_model
from .desk import Desk, DeskServer
from .relay import CREATED
from .scenario import FIXTURE

DESK_ENV = "SUPPORT_DESK_URL"
REPLY_TIMEOUT_S = 1.0
"""How long a ticket waits for the customer's details in a drill: nobody answers."""


def app() -> list[Any]:
    """The monitor's flows on ``$UNDERWAY_DB``, against the desk at ``$SUPPORT_DESK_URL``."""
    desk, db = os.environ.get(DESK_ENV, ""), os.environ.get("UNDERWAY_DB", "")
    if not desk or not db:
        raise ConfigurationError(f"set {DESK_ENV} and UNDERWAY_DB (underway drill does)")
    settings = Settings(desk=desk, reply_timeout_s=REPLY_TIMEOUT_S)
    monitor = build(settings, connect(db, migrate=False), model=default_model())
    return monitor.flows


@contextmanager
def scenario(site: DrillSite) -> Iterator[Scenario]:
    """A desk and the help center for the drill; run ``i``: a new ticket from the
    fixture's incoming mail, its creation delivered through intake."""
    world = site.workdir / "desk"
    world.mkdir()
    desk = Desk.create(world)
    incoming = json.loads(FIXTURE.read_text(encoding="utf-8"))["incoming"]
    store = connect(site.db)
    knowledge = open_knowledge(store)
    helpcenter.seed(knowledge, now=time.time())
    settings = Settings(desk="http://127.0.0.1", reply_timeout_s=REPLY_TIMEOUT_S)
    routes = build(settings, store, model=default_model()).routes
    events: dict[int, IntakeEvent] = {}

    def event(i: int) -> IntakeEvent:
        if i not in events:
            mail = incoming[i % len(incoming)]
            ticket = desk.open_ticket(mail["customer"], mail["subject"], mail["body"],
                                      mail["priority"], mail["sla_s"])
            [e] = [e for e in desk.events() if e["type"] == CREATED
                   and e["ticket"]["id"] == ticket["id"]]
            events[i] = IntakeEvent(
                tenant_id=helpcenter.TENANT, entity_id=ticket["id"], event_type=CREATED,
                occurred_at=datetime.fromtimestamp(e["at"], UTC), source="desk",
                idempotency_key=f"desk-event-{e['seq']}", payload=e)
        return events[i]

    try:
        with DeskServer(desk) as server:
            yield Scenario(env={DESK_ENV: server.url}, event=event, routes=routes,
                           tenant_id=helpcenter.TENANT)
    finally:
        knowledge.close()
        store.close()
