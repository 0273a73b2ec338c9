"""Five-field cron expressions and their fire times in a named IANA time zone.

A small parser of our own rather than a dependency: five fields and :mod:`zoneinfo` are all
it takes.

An expression is ``minute hour day-of-month month day-of-week`` (or ``@yearly``,
``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight``, ``@hourly``). Each
field is ``*``, a number, a range ``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n`` (from ``a``
to the field's end), or a comma-separated list of those. Months take ``JAN``-``DEC`` and
days of the week ``SUN``-``SAT`` (0 and 7 are both Sunday; ``SUN`` ending a range is 7,
as in ``MON-SUN``), in any case.

Day-of-month and day-of-week follow the classic rule: when both are restricted, a day
matches if *either* does; when either field starts with ``*`` (``*``, ``*/2``), a day must
match both (so the other alone decides).

The expression is read on the wall clock of its zone. Across daylight-saving changes:

- a wall-clock time the clocks skip (spring forward) fires at the moment they jump, so
  ``30 2 * * *`` in ``America/New_York`` fires at 03:00 EDT on the day clocks go forward;
- a wall-clock time that happens twice (fall back) fires once, at its first occurrence.
  This holds for every field, so ``*/15 * * * *`` in a zone with daylight saving leaves a
  one-hour gap when clocks fall back; use ``UTC`` for a schedule that must keep a fixed
  real-time interval.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from functools import cached_property
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import ConfigurationError

__all__ = ["MACROS", "Cron", "CronError", "last_fire", "next_fire", "utc_iso", "zone"]

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""Shorthands and the five fields each stands for."""

_MONTHS = {name.upper(): i for i, name in enumerate(calendar.month_abbr) if name}
_WEEKDAYS = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}

# (name, lowest, highest value a list item may name, highest value '*' covers, names)
_FIELDS: tuple[tuple[str, int, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, 59, {}),
    ("hour", 0, 23, 23, {}),
    ("day-of-month", 1, 31, 31, {}),
    ("month", 1, 12, 12, _MONTHS),
    ("day-of-week", 0, 7, 6, _WEEKDAYS),
)

# February 29 recurs at most eight years apart (2096 -> 2104); a search never needs longer.
_SEARCH_DAYS = 9 * 366
_MAX_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class CronError(ConfigurationError):
    """A cron expression or time zone that cannot be used; the message names the field."""


def zone(name: str) -> tzinfo:
    """The IANA time zone called ``name`` (``UTC``, ``Europe/Berlin``, ...)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CronError(
            f"unknown time zone {name!r}; use an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from None


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression evaluated in ``timezone``.

    >>> Cron.parse("0 9 * * MON-FRI", "Europe/Berlin").next_fire(1_700_000_000)
    1700035200.0
    """

    expression: str
    timezone: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """Days of the week, 0 = Sunday."""
    any_day: bool
    """True when day-of-month or day-of-week starts with ``*``: a day must match both."""

    @classmethod
    def parse(cls, expression: str, timezone: str = "UTC") -> Cron:
        """Parse ``expression``; raise :class:`CronError` naming the field that is wrong."""
        if not isinstance(expression, str) or not expression.strip():
            raise CronError("empty cron expression; expected five fields "
                            "(minute hour day-of-month month day-of-week) or a macro like @daily")
        text = expression.strip()
        if text.startswith("@"):
            expanded = MACROS.get(text.lower())
            if expanded is None:
                raise CronError(
                    f"unknown cron macro {text!r}; use one of {', '.join(sorted(MACROS))}"
                )
            text = expanded
        parts = text.split()
        if len(parts) != 5:
            raise CronError(
                f"cron expression {expression!r} has {len(parts)} field(s); expected five: "
                "minute hour day-of-month month day-of-week"
            )
        values = [
            _parse_field(expression, part, *spec) for part, spec in zip(parts, _FIELDS, strict=True)
        ]
        weekdays = frozenset(0 if d == 7 else d for d in values[4])
        cron = cls(
            expression=expression.strip(),
            timezone=timezone,
            minutes=tuple(sorted(values[0])),
            hours=tuple(sorted(values[1])),
            days=frozenset(values[2]),
            months=frozenset(values[3]),
            weekdays=weekdays,
            any_day=parts[2].startswith("*") or parts[4].startswith("*"),
        )
        zone(timezone)
        if parts[4].startswith("*") and not any(
            d <= _MAX_DAYS_IN_MONTH[m - 1] for m in cron.months for d in cron.days
        ):
            raise CronError(
                f"cron expression {expression!r}: day-of-month {parts[2]!r} never occurs in "
                f"month {parts[3]!r}, so it would never fire"
            )
        return cron

    @cached_property
    def _zone(self) -> tzinfo:
        return zone(self.timezone)

    # -- matching -----------------------------------------------------------------------
    def _day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = day.isoweekday() % 7 in self.weekdays
        return (in_month and in_week) if self.any_day else (in_month or in_week)

    def _wall_matches(self, wall: datetime) -> bool:
        return (
            wall.minute in self.minutes and wall.hour in self.hours
            and self._day_matches(wall.date())
        )

    def matches(self, at: float) -> bool:
        """True when the instant ``at`` (epoch seconds) is one of this expression's fire times."""
        tz = self._zone
        local = datetime.fromtimestamp(at, tz)
        if local.fold:
            return False  # the second pass through a repeated hour: it fired the first time
        if local.second == 0 and local.microsecond == 0 and self._wall_matches(
            local.replace(tzinfo=None)
        ):
            return True
        before = datetime.fromtimestamp(at - 1, tz)
        after_offset, before_offset = local.utcoffset(), before.utcoffset()
        if after_offset is None or before_offset is None or after_offset <= before_offset:
            return False
        # The clocks jumped forward at ``at``: it fires for every skipped minute that matches.
        wall = local.replace(tzinfo=None)
        skipped = wall - (after_offset - before_offset)
        minute = skipped.replace(second=0, microsecond=0)
        if minute < skipped:
            minute += timedelta(minutes=1)
        while minute < wall:
            if self._wall_matches(minute):
                return True
            minute += timedelta(minutes=1)
        return False

    # -- fire times ---------------------------------------------------------------------
    def _instant(self, wall: datetime) -> float:
        """When a matching wall-clock minute fires: its first occurrence, or, for a time the
        clocks skipped, the moment they jumped."""
        tz = self._zone
        first = wall.replace(tzinfo=tz, fold=0).timestamp()
        if datetime.fromtimestamp(first, tz).replace(tzinfo=None) == wall:
            return first
        # Skipped: fold=1 reads the wall time with the later offset (an earlier instant,
        # before the jump), fold=0 with the earlier offset (after it). Find the jump.
        lo, hi = int(wall.replace(tzinfo=tz, fold=1).timestamp()), int(first)
        target = datetime.fromtimestamp(hi, tz).utcoffset()
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if datetime.fromtimestamp(mid, tz).utcoffset() == target:
                hi = mid
            else:
                lo = mid
        return float(hi)

    def next_fire(self, after: float) -> float:
        """The first fire time strictly after ``after`` (both epoch seconds)."""
        local = datetime.fromtimestamp(after, self._zone)
        start = local.replace(tzinfo=None, fold=0, second=0, microsecond=0)
        day = start.date()
        for _ in range(_SEARCH_DAYS):
            if day.month not in self.months:
                day = _first_of_next_month(day)
                continue
            if self._day_matches(day):
                for hour in self.hours:
                    if day == start.date() and hour < start.hour:
                        continue
                    for minute in self.minutes:
                        wall = datetime.combine(day, time(hour, minute))
                        if wall < start:
                            continue
                        at = self._instant(wall)
                        if at > after:
                            return at
            day += timedelta(days=1)
        raise CronError(f"cron expression {self.expression!r} never fires")  # pragma: no cover

    def last_fire(self, at: float) -> float:
        """The latest fire time at or before ``at`` (both epoch seconds)."""
        local = datetime.fromtimestamp(at, self._zone)
        wall_at = local.replace(tzinfo=None, fold=0)
        if local.fold:
            # In the second pass through a repeated hour, later wall times of the first pass
            # are earlier instants.
            first, second = local.replace(fold=0).utcoffset(), local.utcoffset()
            if first is not None and second is not None:
                wall_at += first - second
        day = wall_at.date()
        for _ in range(_SEARCH_DAYS):
            if day.month not in self.months:
                day = date(day.year, day.month, 1) - timedelta(days=1)
                continue
            if self._day_matches(day):
                for hour in reversed(self.hours):
                    if day == wall_at.date() and hour > wall_at.hour:
                        continue
                    for minute in reversed(self.minutes):
                        wall = datetime.combine(day, time(hour, minute))
                        if wall > wall_at:
                            continue
                        fired = self._instant(wall)
                        if fired <= at:
                            return fired
            day -= timedelta(days=1)
        raise CronError(f"cron expression {self.expression!r} never fires")  # pragma: no cover


def next_fire(expression: str, after: float, timezone: str = "UTC") -> float:
    """The first fire time of ``expression`` in ``timezone`` strictly after ``after``.

    Args:
        expression: The cron expression.
        after: The instant (epoch seconds).
        timezone: The IANA time zone it is read in.
    """
    return Cron.parse(expression, timezone).next_fire(after)


def last_fire(expression: str, at: float, timezone: str = "UTC") -> float:
    """The latest fire time of ``expression`` in ``timezone`` at or before ``at``.

    Args:
        expression: The cron expression.
        at: The instant (epoch seconds).
        timezone: The IANA time zone it is read in.
    """
    return Cron.parse(expression, timezone).last_fire(at)


def utc_iso(at: float) -> str:
    """``at`` (epoch seconds) as an ISO 8601 UTC time, e.g. ``2024-03-10T07:00:00+00:00``."""
    return datetime.fromtimestamp(at, UTC).isoformat()


def _first_of_next_month(day: date) -> date:
    return date(day.year + 1, 1, 1) if day.month == 12 else date(day.year, day.month + 1, 1)


def _parse_field(
    expression: str, text: str, name: str, lowest: int, highest: int, star_end: int,
    names: dict[str, int],
) -> set[int]:
    def bad(why: str) -> CronError:
        return CronError(f"cron expression {expression!r}: {name} field {text!r}: {why}")

    def number(item: str) -> int:
        if item.upper() in names:
            return names[item.upper()]
        if not item.isdigit():
            known = f" or a name ({', '.join(names)})" if names else ""
            raise bad(f"{item!r} is not a number{known}")
        value = int(item)
        if not lowest <= value <= highest:
            raise bad(f"{value} is out of range {lowest}-{highest}")
        return value

    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise bad("empty item in the list")
        body, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise bad(f"step {step_text!r} must be a positive whole number")
            step = int(step_text)
        if body == "*":
            first, last = lowest, star_end
        elif "-" in body:
            a, _, b = body.partition("-")
            first, last = number(a), number(b)
            if name == "day-of-week" and b.upper() == "SUN":
                last = 7  # MON-SUN: Sunday closes the week
            if first > last:
                raise bad(f"range {body!r} runs backwards; write it as {b}-{a} or as a list")
        else:
            first = number(body)
            last = star_end if slash else first
        values.update(range(first, last + 1, step))
    return values
