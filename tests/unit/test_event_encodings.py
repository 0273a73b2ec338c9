"""Every event type is stored byte for byte as recorded (tests/fixtures/event_encodings.json,
written by tests/fixtures/record_event_encodings.py): same fields in the same order, same
dump, same stored bytes and chain hashes, same schema; and it reads back to itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from underway import events as ev
from underway.journal import Journal
from underway.store.base import StoredEvent
from underway.store.memory import MemoryStore

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parent.parent / "fixtures" / "event_encodings.json")
    .read_text(encoding="utf-8"))
SAMPLES: list[dict[str, Any]] = RECORDED["events"]
TENANT, RUN = RECORDED["tenant_id"], RECORDED["run_id"]


def _event(sample: dict[str, Any]) -> ev.Event:
    return ev.EVENT_TYPES[sample["type"]].model_validate(sample["data"])


def test_every_event_type_has_recorded_samples() -> None:
    assert {s["type"] for s in SAMPLES} == set(ev.EVENT_TYPES) == set(RECORDED["schemas"])


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: f"{s['type']}-{s['sample']}")
def test_an_event_keeps_its_fields_and_dump(sample: dict[str, Any]) -> None:
    event = _event(sample)
    assert list(type(event).model_fields) == sample["fields"]
    assert json.dumps(event.model_dump(mode="json"), ensure_ascii=False) == sample["dump"]
    old = ev.envelope(event, seq=sample["seq"], at=sample["at"])
    assert ev.canonical_json(old).decode("utf-8") == sample["stored_before"]
    assert ev.from_envelope(json.loads(sample["stored_before"])) == event


def test_the_journal_stores_and_chains_every_event_as_recorded() -> None:
    journal = Journal(MemoryStore())
    pending = [(s["seq"], s["at"], _event(s)) for s in SAMPLES]
    stored = journal.encode(TENANT, RUN, pending, ev.genesis_hash(TENANT, RUN), {})
    assert [(r.payload.decode("utf-8"), r.hash) for r in stored] == [
        (s["stored"], s["hash"]) for s in SAMPLES]
    rows = [StoredEvent(s["seq"], s["type"], s["stored"].encode("utf-8"), s["hash"])
            for s in SAMPLES]
    back = journal.decode(TENANT, RUN, rows)
    assert [r.event for r in back] == [e for _, _, e in pending]


@pytest.mark.parametrize("name", sorted(RECORDED["schemas"]))
def test_an_event_type_keeps_its_schema(name: str) -> None:
    schema = ev.EVENT_TYPES[name].model_json_schema()
    assert json.dumps(schema, ensure_ascii=False) == RECORDED["schemas"][name]
