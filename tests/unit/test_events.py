"""Events: schema versions, upcasters, recorded journals from earlier versions, public API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from underway import events as ev
from underway.errors import IntegrityError
from underway.events._calls import CallEvent, HashedCallEvent
from underway.events._union import _UPCASTERS
from underway.journal.state import RunState, apply

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_every_event_type_is_registered_with_a_version() -> None:
    assert set(ev.EVENT_TYPES) >= {
        "RunStarted", "StepStarted", "StepCompleted", "ToolStarted", "ToolSucceeded",
        "ToolFailed", "ToolTimedOut", "SchemaValidationFailed", "ModelResponded", "TimerSet",
        "TimerFired", "SignalReceived", "Escalated", "RunCompleted", "RunFailed", "RunCancelled",
    }
    assert all(cls.VERSION >= 1 for cls in ev.EVENT_TYPES.values())


def _subclasses(cls: type[ev.Event]) -> set[type[ev.Event]]:
    return {c for s in cls.__subclasses__() for c in {s, *_subclasses(s)}}


def test_the_union_event_types_and_all_name_the_same_events() -> None:
    """``RunEvent`` lists the event types: ``EVENT_TYPES`` is built from it, and the
    package's ``__all__`` (static, for type checkers) names exactly its members."""
    members = get_args(ev.RunEvent)
    assert get_args(ev.AnyEvent)[0] == ev.RunEvent
    assert len(set(members)) == len(members)
    assert {cls.__name__: cls for cls in members} == ev.EVENT_TYPES
    assert all(cls.model_fields["type"].default == cls.__name__ for cls in members)
    events = {n for n in ev.__all__ if isinstance(getattr(ev, n), type)
              and issubclass(getattr(ev, n), ev.Event)}
    assert events == {*ev.EVENT_TYPES, "Event", "Encrypted"}
    defined = {c for c in _subclasses(ev.Event) if c.__module__.startswith("underway.events")}
    assert defined == {*members, ev.Encrypted, CallEvent, HashedCallEvent}


def test_canonical_json_is_stable() -> None:
    assert ev.canonical_json({"b": 1, "a": [1.5, "é"]}) == '{"a":[1.5,"é"],"b":1}'.encode()
    with pytest.raises(ValueError):
        ev.canonical_json(float("nan"))


@pytest.fixture
def run_failed_v2() -> Iterator[None]:
    """Pretend RunFailed moved to v2, which renamed ``reason`` from v1's ``message``."""

    def upgrade(data: dict[str, object]) -> dict[str, object]:
        data = dict(data)
        data["reason"] = data.pop("message")
        return data

    old_version = ev.RunFailed.VERSION
    ev.RunFailed.VERSION = 2
    ev.upcaster("RunFailed", 1)(upgrade)
    yield
    ev.RunFailed.VERSION = old_version
    _UPCASTERS.pop(("RunFailed", 1))


@pytest.mark.usefixtures("run_failed_v2")
def test_old_versions_are_upcast_on_read() -> None:
    env = {"at": 1.0, "seq": 3, "type": "RunFailed", "v": 1, "data": {"message": "ERP down"}}
    event = ev.from_envelope(env)
    assert event == ev.RunFailed(reason="ERP down")


@pytest.mark.usefixtures("run_failed_v2")
def test_a_missing_upcaster_is_a_clear_error() -> None:
    _UPCASTERS.pop(("RunFailed", 1))
    env = {"at": 1.0, "seq": 3, "type": "RunFailed", "v": 1, "data": {"message": "x"}}
    with pytest.raises(IntegrityError, match="no upcaster for RunFailed v1"):
        ev.from_envelope(env)
    ev.upcaster("RunFailed", 1)(lambda d: d)


def test_newer_and_unknown_events_are_refused_clearly() -> None:
    with pytest.raises(IntegrityError, match="newer than this code"):
        ev.from_envelope({"at": 0, "seq": 1, "type": "RunFailed", "v": 99, "data": {}})
    with pytest.raises(IntegrityError, match="unknown event type 'Teleported'"):
        ev.from_envelope({"at": 0, "seq": 1, "type": "Teleported", "v": 1, "data": {}})


def _default(name: str) -> object:
    f = RunState.__dataclass_fields__[name]
    return f.default_factory() if callable(f.default_factory) else f.default


def test_recorded_journals_from_earlier_versions_still_load_and_fold() -> None:
    """Each fixture is a journal recorded by a released version with the state it folded to."""
    fixtures = sorted(FIXTURES.glob("journal_*.json"))
    assert fixtures, "no recorded journals found"
    for path in fixtures:
        recorded = json.loads(path.read_text())
        state = RunState(tenant_id=recorded["tenant_id"], run_id=recorded["run_id"])
        prev = ev.genesis_hash(recorded["tenant_id"], recorded["run_id"])
        for row in recorded["events"]:
            payload = row["payload"].encode()
            assert ev.chain_hash(prev, payload) == row["hash"], f"{path.name} seq {row['seq']}"
            prev = row["hash"]
            env = json.loads(payload)
            from underway.journal.state import Recorded

            apply(state, Recorded(env["seq"], env["at"], ev.from_envelope(env)))
        folded = state.to_json()
        # Fields added to RunState since the recording must sit at their defaults, except
        # counters derived from events the old journal already holds: read_calls counts its
        # read-only call, model_usage must agree with the model totals it recorded.
        fs = recorded["final_state"]
        derived = {"read_calls": 1, "model_usage": {"default": {
            "calls": fs["model_calls"], "tokens_in": fs["tokens_in"],
            "tokens_out": fs["tokens_out"], "cost_usd": fs["cost_usd"]}}}
        added = {k: v for k, v in folded.items() if k not in recorded["final_state"]}
        assert added == {k: derived.get(k, _default(k)) for k in added}, path.name
        assert {k: folded[k] for k in recorded["final_state"]} == recorded["final_state"]


def test_a_checkpoint_from_a_newer_version_loads_without_its_unknown_fields() -> None:
    s = RunState(tenant_id="t", run_id="r", flow="f", steps_completed=3)
    data = s.to_json()
    data["field_from_the_future"] = {"x": 1}
    data["calls"] = [{"index": 0, "key": "k", "tool": "t", "args_hash": "h",
                      "status": "succeeded", "result": 1, "added_later": True}]
    back = RunState.from_json(data)
    assert back.steps_completed == 3 and back.calls[0].result == 1
