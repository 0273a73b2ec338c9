"""Cron expressions: parsing, clear errors, fire times across daylight-saving changes, and
properties checked by brute force over every minute of a bounded horizon."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from underway.scheduling.cron import MACROS, Cron, CronError, last_fire, next_fire, utc_iso


def at(text: str) -> float:
    """Epoch seconds of an ISO time with an offset, e.g. '2024-03-10T07:00+00:00'."""
    return datetime.fromisoformat(text).timestamp()


def fires(expression: str, zone: str, after: str, count: int) -> list[str]:
    """The next ``count`` fire times, as local wall-clock times with their offsets."""
    cron = Cron.parse(expression, zone)
    t, out = at(after), []
    for _ in range(count):
        t = cron.next_fire(t)
        out.append(datetime.fromtimestamp(t, ZoneInfo(zone)).isoformat(timespec="minutes"))
    return out


# -- parsing ------------------------------------------------------------------------------


def test_fields_lists_ranges_steps_and_names() -> None:
    cron = Cron.parse("0,30 9-17/4 1,15 jan-MAR,Dec mon-fri")
    assert cron.minutes == (0, 30)
    assert cron.hours == (9, 13, 17)
    assert cron.days == {1, 15}
    assert cron.months == {1, 2, 3, 12}
    assert cron.weekdays == {1, 2, 3, 4, 5}


def test_step_from_a_single_value_runs_to_the_end_of_the_field() -> None:
    assert Cron.parse("5/20 * * * *").minutes == (5, 25, 45)


def test_seven_is_sunday_too() -> None:
    assert Cron.parse("0 0 * * 7").weekdays == {0}
    assert Cron.parse("0 0 * * 5-7").weekdays == {5, 6, 0}
    assert Cron.parse("0 0 * * */2").weekdays == {0, 2, 4, 6}
    assert Cron.parse("0 0 * * FRI-SUN").weekdays == {5, 6, 0}
    assert Cron.parse("0 0 * * mon-sun").weekdays == set(range(7))


@pytest.mark.parametrize("macro", sorted(MACROS))
def test_macros_fire_as_their_five_fields(macro: str) -> None:
    t = at("2024-02-27T13:17:00+00:00")
    expanded = Cron.parse(MACROS[macro])
    assert Cron.parse(macro).next_fire(t) == expanded.next_fire(t)
    assert Cron.parse(macro.upper()).next_fire(t) == expanded.next_fire(t)


@pytest.mark.parametrize(
    ("expression", "field", "detail"),
    [
        ("61 * * * *", "minute field '61'", "out of range 0-59"),
        ("* 24 * * *", "hour field '24'", "out of range 0-23"),
        ("* * 0 * *", "day-of-month field '0'", "out of range 1-31"),
        ("* * * 13 *", "month field '13'", "out of range 1-12"),
        ("* * * * 8", "day-of-week field '8'", "out of range 0-7"),
        ("* * * FOO *", "month field 'FOO'", "not a number or a name (JAN"),
        ("* * * * FUN", "day-of-week field 'FUN'", "not a number or a name (SUN"),
        ("*/0 * * * *", "minute field '*/0'", "step '0' must be a positive whole number"),
        ("* */x * * *", "hour field '*/x'", "step 'x'"),
        ("30-10 * * * *", "minute field '30-10'", "runs backwards"),
        ("1,,2 * * * *", "minute field '1,,2'", "empty item"),
        ("* * * * ?", "day-of-week field '?'", "not a number"),
    ],
)
def test_a_bad_field_is_named(expression: str, field: str, detail: str) -> None:
    with pytest.raises(CronError) as caught:
        Cron.parse(expression)
    assert field in str(caught.value)
    assert detail in str(caught.value)


def test_wrong_field_count_unknown_macro_and_empty() -> None:
    with pytest.raises(CronError, match=r"has 4 field\(s\); expected five: minute hour"):
        Cron.parse("* * * *")
    with pytest.raises(CronError, match="unknown cron macro '@reboot'; use one of @annually"):
        Cron.parse("@reboot")
    with pytest.raises(CronError, match="empty cron expression"):
        Cron.parse("  ")


def test_a_date_that_never_occurs_is_refused() -> None:
    with pytest.raises(CronError, match="day-of-month '30' never occurs in month '2'"):
        Cron.parse("0 0 30 2 *")
    with pytest.raises(CronError, match="day-of-month '31' never occurs"):
        Cron.parse("0 0 31 APR,JUN,SEP,NOV *")
    # February 29 does occur; and with a day of the week restricted, either day matches.
    assert Cron.parse("0 0 29 2 *")
    assert Cron.parse("0 0 30 2 MON")


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(CronError, match="unknown time zone 'Mars/Olympus'"):
        Cron.parse("* * * * *", "Mars/Olympus")
    with pytest.raises(CronError, match="unknown time zone"):
        Cron.parse("* * * * *", "../etc/passwd")


# -- fire times ---------------------------------------------------------------------------


def test_next_fire_is_strictly_after() -> None:
    t = at("2024-05-01T10:00:00+00:00")
    assert next_fire("0 * * * *", t) == at("2024-05-01T11:00:00+00:00")
    assert next_fire("0 * * * *", t - 0.5) == t
    assert next_fire("* * * * *", t + 59.9) == t + 60


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # The 13th of each month, and every Friday.
    assert fires("0 0 13 * FRI", "UTC", "2024-09-01T00:00+00:00", 4) == [
        "2024-09-06T00:00+00:00", "2024-09-13T00:00+00:00", "2024-09-20T00:00+00:00",
        "2024-09-27T00:00+00:00",
    ]
    # A field starting with '*' makes it "both": odd days that are Mondays.
    assert fires("0 0 */2 * MON", "UTC", "2024-09-01T00:00+00:00", 2) == [
        "2024-09-09T00:00+00:00", "2024-09-23T00:00+00:00",
    ]


def test_february_29_waits_for_a_leap_year() -> None:
    assert fires("0 12 29 2 *", "UTC", "2097-01-01T00:00+00:00", 1) == ["2104-02-29T12:00+00:00"]


def test_a_zone_shifts_the_wall_clock() -> None:
    assert fires("0 9 * * MON-FRI", "Asia/Kathmandu", "2024-06-07T12:00+00:00", 2) == [
        "2024-06-10T09:00+05:45", "2024-06-11T09:00+05:45",
    ]


def test_a_skipped_time_fires_when_the_clocks_jump() -> None:
    # New York springs forward from 02:00 EST to 03:00 EDT on 2024-03-10.
    assert fires("30 2 * * *", "America/New_York", "2024-03-09T12:00+00:00", 3) == [
        "2024-03-10T03:00-04:00", "2024-03-11T02:30-04:00", "2024-03-12T02:30-04:00",
    ]
    # Every quarter hour inside the skipped hour collapses into one fire at 03:00.
    assert fires("*/15 * * * *", "America/New_York", "2024-03-10T06:40+00:00", 3) == [
        "2024-03-10T01:45-05:00", "2024-03-10T03:00-04:00", "2024-03-10T03:15-04:00",
    ]
    # Sao Paulo skipped midnight itself (2018-11-04 00:00 -> 01:00).
    assert fires("0 0 * * *", "America/Sao_Paulo", "2018-11-03T12:00+00:00", 2) == [
        "2018-11-04T01:00-02:00", "2018-11-05T00:00-02:00",
    ]
    # Lord Howe moves by half an hour: 02:15 does not exist on 2024-10-06.
    assert fires("15 2 * * *", "Australia/Lord_Howe", "2024-10-05T00:00+00:00", 2) == [
        "2024-10-06T02:30+11:00", "2024-10-07T02:15+11:00",
    ]


def test_a_day_the_zone_skipped_fires_at_the_jump() -> None:
    # Samoa skipped 2011-12-30 entirely, crossing the date line.
    assert fires("0 12 * * *", "Pacific/Apia", "2011-12-29T12:00-10:00", 2) == [
        "2011-12-31T00:00+14:00", "2011-12-31T12:00+14:00",
    ]


def test_a_repeated_hour_fires_once() -> None:
    # New York falls back from 02:00 EDT to 01:00 EST on 2024-11-03.
    assert fires("30 1 * * *", "America/New_York", "2024-11-02T12:00+00:00", 2) == [
        "2024-11-03T01:30-04:00", "2024-11-04T01:30-05:00",
    ]
    assert fires("*/30 * * * *", "America/New_York", "2024-11-03T05:10+00:00", 3) == [
        "2024-11-03T01:30-04:00", "2024-11-03T02:00-05:00", "2024-11-03T02:30-05:00",
    ]
    # Asked from inside the second pass, the repeated wall times are already past.
    assert fires("45 1 * * *", "America/New_York", "2024-11-03T01:10-05:00", 1) == [
        "2024-11-04T01:45-05:00"]


def test_last_fire_is_at_or_before() -> None:
    t = at("2024-05-01T10:00:00+00:00")
    assert last_fire("0 * * * *", t) == t
    assert last_fire("0 * * * *", t - 1) == at("2024-05-01T09:00:00+00:00")
    ny = "America/New_York"
    # From inside the second pass of the repeated hour, the first pass's 01:50 is the latest.
    assert utc_iso(last_fire("50 1 * * *", at("2024-11-03T01:10-05:00"), ny)) == (
        "2024-11-03T05:50:00+00:00")
    assert utc_iso(last_fire("30 2 * * *", at("2024-03-10T03:05-04:00"), ny)) == (
        "2024-03-10T07:00:00+00:00")


def test_matches_only_fire_times() -> None:
    cron = Cron.parse("30 1 * * *", "America/New_York")
    assert cron.matches(at("2024-11-03T01:30-04:00"))
    assert not cron.matches(at("2024-11-03T01:30-05:00"))  # the repeat
    assert not cron.matches(at("2024-11-03T01:30:01-04:00"))
    jump = Cron.parse("30 2 * * *", "America/New_York")
    assert jump.matches(at("2024-03-10T03:00-04:00"))
    assert not jump.matches(at("2024-03-11T03:00-04:00"))


# -- properties ---------------------------------------------------------------------------

ZONES = [
    "UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata",
    "America/Sao_Paulo", "Pacific/Apia", "Asia/Kathmandu", "Pacific/Chatham",
]
HORIZON_MINUTES = 36 * 60
EARLIEST, LATEST = int(at("2010-01-01T00:00+00:00")), int(at("2032-01-01T00:00+00:00"))


@dataclass(frozen=True)
class Expr:
    """An expression's text with the sets it must mean, computed independently."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    both: bool

    def wall_matches(self, wall: datetime) -> bool:
        day_ok = wall.day in self.days
        week_ok = wall.isoweekday() % 7 in self.weekdays
        return (
            wall.minute in self.minutes and wall.hour in self.hours and wall.month in self.months
            and ((day_ok and week_ok) if self.both else (day_ok or week_ok))
        )


@st.composite
def field(
    draw: st.DrawFn, lo: int, hi: int, star_hi: int, names: tuple[str, ...] = (),
    star_weight: int = 3,
) -> tuple[str, frozenset[int]]:
    kind = draw(st.sampled_from(["*"] * star_weight + ["*/", "n", "a-b", "a-b/", "list"]))
    def value() -> tuple[str, int]:
        v = draw(st.integers(lo, hi))
        if names and v - lo < len(names) and draw(st.booleans()):
            return names[v - lo], v
        return str(v), v
    if kind == "*":
        return "*", frozenset(range(lo, star_hi + 1))
    if kind == "*/":
        step = draw(st.integers(1, max(1, (star_hi - lo) // 2 + 1)))
        return f"*/{step}", frozenset(range(lo, star_hi + 1, step))
    if kind == "n":
        text, v = value()
        return text, frozenset({v})
    if kind in ("a-b", "a-b/"):
        (ta, a), (tb, b) = sorted([value(), value()], key=lambda p: p[1])
        if tb == "SUN":
            b = 7  # SUN closing a range is the end of the week (MON-SUN, 0-SUN)
        if ta == "SUN":
            a = 0  # SUN opening a range is its start (SUN-7 is the whole week)
        step = draw(st.integers(1, 5)) if kind == "a-b/" else 1
        return f"{ta}-{tb}" + (f"/{step}" if kind == "a-b/" else ""), frozenset(
            range(a, b + 1, step))
    items = draw(st.lists(st.integers(lo, hi), min_size=1, max_size=4, unique=True))
    return ",".join(map(str, items)), frozenset(items)


@st.composite
def expressions(draw: st.DrawFn) -> Expr:
    minute = draw(field(0, 59, 59, star_weight=1))
    hour = draw(field(0, 23, 23, star_weight=4))
    month_names = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                   "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
    while True:
        dom = draw(field(1, 31, 31, star_weight=8))
        month = draw(field(1, 12, 12, month_names, star_weight=8))
        dow = draw(field(0, 7, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"),
                         star_weight=6))
        text = f"{minute[0]} {hour[0]} {dom[0]} {month[0]} {dow[0]}"
        try:
            Cron.parse(text)
        except CronError:
            continue  # a date that never occurs
        break
    return Expr(
        text, minute[1], hour[1], dom[1], month[1], frozenset(d % 7 for d in dow[1]),
        both=dom[0].startswith("*") or dow[0].startswith("*"),
    )


@cache
def transitions(zone: str) -> tuple[int, ...]:
    """Every offset change of ``zone`` between EARLIEST and LATEST, to the second."""
    tz, found = ZoneInfo(zone), []
    step = 3 * 3600
    prev = datetime.fromtimestamp(EARLIEST, tz).utcoffset()
    for t in range(EARLIEST + step, LATEST, step):
        off = datetime.fromtimestamp(t, tz).utcoffset()
        if off != prev:
            lo, hi = t - step, t
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if datetime.fromtimestamp(mid, tz).utcoffset() == off:
                    hi = mid
                else:
                    lo = mid
            found.append(hi)
            prev = off
    return tuple(found)


@st.composite
def instants(draw: st.DrawFn, zone: str) -> float:
    """A time in seconds, often within a few hours of a daylight-saving change."""
    changes = transitions(zone)
    if changes and draw(st.integers(0, 3)):
        base = draw(st.sampled_from(changes))
        return float(base + draw(st.integers(-3 * 3600, 2 * 3600)))
    return float(draw(st.integers(EARLIEST, LATEST)))


def minutes_between(start: float, end: float) -> range:
    """Whole UTC minutes m with start < m < end."""
    first = int(start // 60 * 60) + 60
    return range(first, int(end) if end == int(end) else int(end) + 1, 60)


def is_plain(zone: ZoneInfo, m: int) -> bool:
    """Not the second pass of a repeated hour and not the instant clocks jump forward."""
    local = datetime.fromtimestamp(m, zone)
    return not local.fold and local.utcoffset() == datetime.fromtimestamp(m - 1, zone).utcoffset()


SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(data=st.data(), expr=expressions(), zone=st.sampled_from(ZONES))
def test_next_fire_is_later_matches_and_no_fire_time_lies_between(
    data: st.DataObject, expr: Expr, zone: str
) -> None:
    cron = Cron.parse(expr.text, zone)
    tz = ZoneInfo(zone)
    t = data.draw(instants(zone))
    nf = cron.next_fire(t)
    assert nf > t
    assert cron.matches(nf)
    for m in minutes_between(t, min(nf, t + HORIZON_MINUTES * 60)):
        assert not cron.matches(m), f"{utc_iso(m)} fires but lies before {utc_iso(nf)}"
        if is_plain(tz, m):
            # The oracle reads the wall clock on its own; no plain minute may match it.
            wall = datetime.fromtimestamp(m, tz).replace(tzinfo=None)
            assert not expr.wall_matches(wall), f"{wall} matches {expr.text!r}"
    if is_plain(tz, int(nf)):
        assert expr.wall_matches(datetime.fromtimestamp(nf, tz).replace(tzinfo=None))


@SETTINGS
@given(data=st.data(), expr=expressions(), zone=st.sampled_from(ZONES))
def test_last_fire_is_at_or_before_matches_and_no_fire_time_lies_between(
    data: st.DataObject, expr: Expr, zone: str
) -> None:
    cron = Cron.parse(expr.text, zone)
    t = data.draw(instants(zone))
    lf = cron.last_fire(t)
    assert lf <= t
    assert cron.matches(lf)
    assert cron.next_fire(lf) > t
    for m in minutes_between(max(lf, t - HORIZON_MINUTES * 60), t + 1):
        assert not cron.matches(m), f"{utc_iso(m)} fires but lies after {utc_iso(lf)}"


@SETTINGS
@given(expr=expressions(), t=st.integers(EARLIEST, LATEST))
def test_in_utc_next_fire_is_the_first_minute_the_fields_allow(expr: Expr, t: int) -> None:
    nf = Cron.parse(expr.text).next_fire(t)
    expected = next(
        (m for m in minutes_between(t, t + HORIZON_MINUTES * 60)
         if expr.wall_matches(datetime.fromtimestamp(m, UTC).replace(tzinfo=None))),
        None,
    )
    if expected is None:
        assert nf >= t + HORIZON_MINUTES * 60
    else:
        assert nf == expected
