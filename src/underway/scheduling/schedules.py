"""Schedules: start a run of a flow at every tick of a cron expression.

A schedule is a row in the store (tenant, name, flow, cron expression, time zone, input,
queue, the next tick due). Workers call :func:`fire_due_schedules` on every loop: it claims
due schedules of the flows the worker knows, starts one run per tick, and moves each
schedule on to its next tick.

Each tick's run is started with the idempotency key ``schedule:{name}:{tick}`` (the tick in
ISO 8601 UTC), so a tick starts exactly one run even when two schedulers fire it: one whose
claim ran out while it was paused, or one that crashed after starting the run and before
moving the schedule on. When no worker ran for a while, only the latest missed tick starts
a run; the ticks before it are skipped.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..client import Client
from ..codec import ENCRYPTED, Codec, schedule_where
from ..errors import ConfigurationError, KeyUnavailable, UnderwayError
from ..events import JSON, canonical_json
from ..flow import Flow
from ..store.base import NewRun, ScheduleRecord
from ..store.features import scheduling
from .cron import Cron, CronError, utc_iso

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = [
    "Schedule",
    "add_schedule",
    "fire_due_schedules",
    "get_schedule",
    "list_schedules",
    "next_schedule_due",
    "remove_schedule",
    "tick_key",
]

log = logging.getLogger("underway.schedules")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}")


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as users see it. Times are epoch seconds."""

    tenant_id: str
    name: str
    flow: str
    cron: str
    timezone: str
    input: JSON
    queue: str
    next_fire_at: float
    """The next tick that has not started a run yet."""
    enabled: bool
    created_at: float
    last_fired_at: float | None
    """The tick that last started a run, if any."""

    @classmethod
    def from_record(cls, rec: ScheduleRecord, codec: Codec | None = None) -> Schedule:
        """The user's view of a stored schedule, its input opened through ``codec`` (the
        store's: ``[encrypted]`` when it is sealed and cannot be opened here)."""
        try:
            data = (codec or Codec()).open_json(rec.input, schedule_where(rec.tenant_id,
                                                                          rec.name))
        except KeyUnavailable:
            data = ENCRYPTED
        return cls(
            tenant_id=rec.tenant_id, name=rec.name, flow=rec.flow, cron=rec.cron,
            timezone=rec.timezone, input=data, queue=rec.queue,
            next_fire_at=rec.next_fire_at, enabled=rec.enabled, created_at=rec.created_at,
            last_fired_at=rec.last_fired_at,
        )


def tick_key(name: str, tick: float) -> str:
    """The idempotency key of the run started by schedule ``name`` at ``tick``."""
    return f"schedule:{name}:{utc_iso(tick)}"


def add_schedule(
    engine: Client | Engine,
    name: str,
    flow: Flow[Any, Any] | str,
    cron: str,
    input: JSON | BaseModel = None,
    *,
    tenant_id: str = "default",
    timezone: str = "UTC",
    queue: str = "default",
    enabled: bool = True,
) -> Schedule:
    """Create schedule ``name``, or update the one of that name, and return it.

    Declaring an existing schedule again with the same cron expression and time zone keeps
    its pending tick. So doing it at every start-up never skips a tick.

    Args:
        engine: An engine or a client.
        name: The schedule's name.
        flow: The flow, or its name. A worker that has the flow registered starts the runs.
        cron: The cron expression.
        input: The runs' input. When the flow is known here (a :class:`Flow`, or a name
            ``engine`` has the code of), it is checked against its input model now.
        tenant_id: The tenant.
        timezone: The IANA time zone the expression is read in.
        queue: The queue the runs go on.
        enabled: False keeps it from firing.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"schedule name {name!r} must be 1-200 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit"
        )
    if not queue:
        raise ConfigurationError(f"schedule {name!r}: queue name must not be empty")
    parsed = Cron.parse(cron, timezone)
    flow_name = flow.name if isinstance(flow, Flow) else flow
    if not flow_name:
        raise ConfigurationError(f"schedule {name!r} needs a flow")
    known = flow if isinstance(flow, Flow) else engine.flows.get(flow_name)
    if known is not None:
        try:
            input = known.parse_input(input).model_dump(mode="json")
        except ConfigurationError as exc:
            raise ConfigurationError(f"schedule {name!r}: {exc}") from None
    elif isinstance(input, BaseModel):
        input = input.model_dump(mode="json")
    try:
        data = canonical_json(input)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"schedule {name!r}: input is not JSON: {exc}") from None
    now = engine.clock.now()
    rec = scheduling(engine.store).put_schedule(ScheduleRecord(
        tenant_id=tenant_id, name=name, flow=flow_name, cron=parsed.expression,
        timezone=timezone, input=engine.codec.seal(data, schedule_where(tenant_id, name)),
        queue=queue, next_fire_at=parsed.next_fire(now), enabled=enabled, created_at=now,
    ))
    return Schedule.from_record(rec, engine.codec)


def remove_schedule(engine: Client | Engine, name: str, *, tenant_id: str = "default") -> bool:
    """Delete schedule ``name``; False when there was none. Runs it started carry on.

    Args:
        engine: An engine or a client.
        name: The schedule's name.
        tenant_id: The tenant.
    """
    return scheduling(engine.store).delete_schedule(tenant_id, name)


def get_schedule(
    engine: Client | Engine, name: str, *, tenant_id: str = "default"
) -> Schedule | None:
    """Schedule ``name``, if it exists.

    Args:
        engine: An engine or a client.
        name: The schedule's name.
        tenant_id: The tenant.
    """
    rec = scheduling(engine.store).get_schedule(tenant_id, name)
    return None if rec is None else Schedule.from_record(rec, engine.codec)


def list_schedules(engine: Client | Engine, *, tenant_id: str = "default") -> list[Schedule]:
    """A tenant's schedules, by name."""
    return [Schedule.from_record(r, engine.codec)
            for r in scheduling(engine.store).list_schedules(tenant_id)]


def next_schedule_due(engine: Engine) -> float | None:
    """When the next tick of a schedule of ``engine``'s flows is due (epoch seconds; in the
    past when one is due now), so a worker can sleep until then."""
    if not engine.flows:
        return None
    return scheduling(engine.store).next_schedule_at(now=engine.clock.now(),
                                                     flows=sorted(engine.flows))


async def fire_due_schedules(engine: Engine, *, limit: int = 100) -> int:
    """Start the runs of every due tick of the schedules of ``engine``'s flows; return how
    many runs were started.

    Schedules are claimed atomically (PostgreSQL: ``FOR UPDATE SKIP LOCKED``; SQLite: under
    ``BEGIN IMMEDIATE``) for ``engine.lease_ttl`` seconds, so concurrent schedulers split
    the work. A tick whose run cannot be created from the schedule (its input does not fit
    the flow) is logged and skipped; any other error leaves the schedule due and is raised.
    The store is called off the event loop (:meth:`Engine.io`), one trip per tick.
    """
    if not engine.flows:
        return 0
    now = engine.clock.now()
    claimed = await engine.io(_claim, engine, now, limit)
    started = 0
    for i, (rec, data) in enumerate(claimed):
        try:
            started += await _fire(engine, rec, data, now)
        except BaseException:
            await engine.io(_release_all, engine, [r for r, _ in claimed[i:]])
            raise
    return started


def _claim(
    engine: Engine, now: float, limit: int
) -> list[tuple[ScheduleRecord, JSON | UnderwayError]]:
    """Claim due schedules and open their inputs (with the keys their tenants seal with
    read now, off the event loop), in one trip."""
    out: list[tuple[ScheduleRecord, JSON | UnderwayError]] = []
    for rec in scheduling(engine.store).claim_schedules(now=now, until=now + engine.lease_ttl,
                                            flows=sorted(engine.flows), limit=limit):
        try:
            engine.codec.prepare(rec.tenant_id)
            out.append((rec, engine.codec.open_json(
                rec.input, schedule_where(rec.tenant_id, rec.name))))
        except UnderwayError as exc:
            out.append((rec, exc))
        except ValueError as exc:
            out.append((rec, UnderwayError(f"its input is not JSON ({exc})")))
    return out


async def _fire(
    engine: Engine, rec: ScheduleRecord, data: JSON | UnderwayError, now: float
) -> int:
    try:
        cron = Cron.parse(rec.cron, rec.timezone)
    except CronError as exc:
        # Stored schedules were valid when added; a worker whose time zone database lacks
        # the zone leaves the tick to one that has it.
        log.error("schedule %r of tenant %r cannot be read here: %s", rec.name, rec.tenant_id, exc)
        await engine.io(_release, engine, rec)
        return 0
    tick = max(rec.next_fire_at, cron.last_fire(now))
    new: NewRun | None = None
    try:
        if isinstance(data, UnderwayError):
            raise ConfigurationError(f"its input cannot be read here: {data}")
        new = engine.prepare_start(
            rec.flow, data, tenant_id=rec.tenant_id,
            idempotency_key=tick_key(rec.name, tick), queue=rec.queue,
        )
    except ConfigurationError as exc:
        log.error(
            "schedule %r of tenant %r: tick %s skipped: %s", rec.name, rec.tenant_id,
            utc_iso(tick), exc,
        )
    return await engine.io(_start, engine, rec, new, tick, cron.next_fire(now))


def _start(
    engine: Engine, rec: ScheduleRecord, new: NewRun | None, tick: float, next_fire_at: float
) -> int:
    """Create the tick's run (unless it was skipped) and move the schedule on, in one trip;
    1 when the run was created here."""
    created = False
    if new is not None:
        # Created False: a scheduler that died before moving the schedule on started it.
        _, created, _ = engine.create_run(new)
    scheduling(engine.store).advance_schedule(
        rec.tenant_id, rec.name, expected=rec.next_fire_at, next_fire_at=next_fire_at,
        fired_at=tick if new is not None else None,
    )
    return int(created)


def _release_all(engine: Engine, claimed: list[ScheduleRecord]) -> None:
    for rec in claimed:
        with contextlib.suppress(Exception):
            _release(engine, rec)


def _release(engine: Engine, rec: ScheduleRecord) -> None:
    scheduling(engine.store).advance_schedule(
        rec.tenant_id, rec.name, expected=rec.next_fire_at, next_fire_at=rec.next_fire_at,
        fired_at=None,
    )
