"""A start's options are declared once, in :class:`~underway.StartOptions`: every start
entry point takes exactly its fields as keywords (typed by
:class:`~underway.client.StartKeywords`, the same names and types), or a ready one as
``options``, never both."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest
from typing_extensions import Unpack

import underway as uw
from fakes.invoice_flows import reminders
from underway.client import Client, StartKeywords, StartOptions
from underway.client._options import START_FIELDS
from underway.errors import ConfigurationError, InvalidInput
from underway.lineage import Lineage
from underway.testing import memory_engine

ENTRY_POINTS: dict[str, Callable[..., Any]] = {
    "Client.start": Client.start,
    "Client.prepare_start": Client.prepare_start,
    "Engine.start": uw.Engine.start,
    "Engine.prepare_start": uw.Engine.prepare_start,
}


def test_the_keywords_are_the_options_fields_by_name_and_type() -> None:
    fields = {f.name for f in dataclasses.fields(StartOptions)}
    assert fields == START_FIELDS == set(StartKeywords.__annotations__)
    assert typing.get_type_hints(StartKeywords) == typing.get_type_hints(StartOptions)


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_every_entry_point_takes_the_keywords_and_writes_none_of_them(name: str) -> None:
    params = inspect.signature(ENTRY_POINTS[name]).parameters
    assert not START_FIELDS & set(params), "an option written out again"
    assert params["options"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["options"].default is None
    keywords = [p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    assert len(keywords) == 1
    hints = typing.get_type_hints(ENTRY_POINTS[name], include_extras=True)
    assert hints[keywords[0].name] == Unpack[StartKeywords]


def test_defaults() -> None:
    o = StartOptions()
    assert (o.tenant_id, o.queue, o.purpose, o.roles) == ("default", "default", "operations", ())
    assert o.idempotency_key is o.run_id is o.start_at is o.deadline is o.lineage is None
    assert uw.StartOptions is StartOptions


def test_roles_are_kept_whatever_iterable_gave_them() -> None:
    assert StartOptions(roles=iter(["b", "a"])).roles == ("b", "a")


@pytest.mark.parametrize(("given", "field"), [
    ({"run_id": "a\x00b"}, "run_id"),
    ({"idempotency_key": "k" * 2001}, "idempotency_key"),
    ({"queue": "q\ud800"}, "queue"),
    ({"start_at": float("nan")}, "start_at"),
    ({"deadline": -1.0}, "deadline"),
])
def test_options_no_run_can_hold_are_refused_when_made(given: dict[str, Any],
                                                        field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        StartOptions(**given)
    assert caught.value.field == field


def test_an_empty_queue_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="queue name must not be empty"):
        StartOptions(queue="")


def test_a_ready_options_starts_the_run_as_the_keywords_would() -> None:
    engine, _ = memory_engine([reminders])
    given = {"invoice": "INV-8", "amount": 800}
    opts = StartOptions(tenant_id="acme", idempotency_key="INV-8", queue="billing",
                        principal="priya", roles=["ops"], subject="cust-7",
                        lineage=Lineage(labels={"batch": "7"}))
    by_options, created = engine.start(reminders, given, options=opts)
    assert created
    again, created = engine.client.start(
        reminders, given, tenant_id="acme", idempotency_key="INV-8")
    assert (again, created) == (by_options, False)
    row = engine.client.get_run(by_options, tenant_id="acme")
    assert (row.queue, row.subject) == ("billing", "cust-7")
    state = engine.state(by_options, tenant_id="acme")
    assert (state.principal, state.roles) == ("priya", ["ops"])
    assert state.lineage_record.labels == {"batch": "7"}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_an_option_given_twice_is_refused_naming_it(name: str) -> None:
    engine, _ = memory_engine([reminders])
    owner = engine.client if name.startswith("Client") else engine
    method = getattr(owner, name.split(".")[1])
    with pytest.raises(ConfigurationError, match="queue=") as caught:
        method(reminders, {"invoice": "INV-8", "amount": 800},
               options=StartOptions(queue="billing"), queue="billing")
    assert "tenant_id" not in str(caught.value)
    assert engine.client.list_runs().runs == []


def test_an_unknown_keyword_is_a_type_error_with_or_without_options() -> None:
    engine, _ = memory_engine([reminders])
    for extra in ({}, {"options": StartOptions()}):
        with pytest.raises(TypeError, match="queu"):
            engine.client.start(reminders, {"invoice": "INV-8", "amount": 800},
                                queu="billing", **extra)
