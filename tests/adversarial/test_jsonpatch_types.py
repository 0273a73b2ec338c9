"""The state fold preserves JSON types exactly: ``1`` is not ``True``, ``1`` is not ``1.0``,
``0.0`` is not ``-0.0``. A step that writes ``True`` where ``1`` was reads ``True`` in its next
step, after the run left the worker and a fresh engine loaded it from the checkpoint or from
the journal alone."""

from __future__ import annotations

import asyncio
import copy
import json
import math
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import BaseModel

import underway as uw
from underway.journal.patch import apply_patch, make_patch, same_json

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.integers(-3, 3)
    | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0, 1.0])
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=4), children, max_size=5),
    max_leaves=30,
)


def typed(value: Any) -> str:
    """A rendering that tells every JSON type apart (``repr`` keeps ``-0.0`` and ``1.0``)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{typed(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(typed(v) for v in value) + "]"
    return f"{type(value).__name__}:{value!r}"


@given(json_values, json_values)
@example(1, True)
@example(0, False)
@example(1, 1.0)
@example(0.0, -0.0)
@example([1, 2], [True, 2])
@example([1], [True, 5])
@example({"a": [0, {"b": 1}]}, {"a": [False, {"b": 1.0}]})
@example(2**70, float(2**70))
def test_a_patch_turns_old_into_new_types_included(old: Any, new: Any) -> None:
    patched = apply_patch(copy.deepcopy(old), make_patch(old, new))
    assert typed(patched) == typed(new)
    assert json.dumps(patched, sort_keys=True) == json.dumps(new, sort_keys=True)


@given(json_values)
def test_a_value_compared_with_itself_needs_no_patch(value: Any) -> None:
    assert make_patch(value, copy.deepcopy(value)) == []


@given(json_values, json_values)
def test_same_json_is_equality_of_typed_renderings(a: Any, b: Any) -> None:
    assert same_json(a, b) == (typed(a) == typed(b))


class Mixed(BaseModel):
    flag: Any = 1
    off: Any = 0
    count: Any = 1
    zero: float = 0.0
    bag: dict[str, Any] = {"items": [1, 0, 2.0]}


WRITTEN = {"flag": True, "off": False, "count": 1.0, "zero": -0.0,
           "bag": {"items": [True, False, 2]}}


def _flow() -> uw.Flow[Mixed, Any]:
    flow: uw.Flow[Mixed, Any] = uw.Flow("typed_state", state=Mixed)

    @flow.step
    async def write(ctx: uw.RunContext[Mixed, Any]) -> Any:
        for name, value in WRITTEN.items():
            setattr(ctx.state, name, copy.deepcopy(value))
        return ctx.wait("go", then=read)

    @flow.step
    async def read(ctx: uw.RunContext[Mixed, Any]) -> Any:
        return ctx.done({
            name: typed(getattr(ctx.state, name)) for name in WRITTEN
        } | {"sign": math.copysign(1.0, ctx.state.zero)})

    return flow


def test_a_later_step_reads_the_type_an_earlier_step_wrote(db_url: str) -> None:
    first = uw.Engine(uw.connect(db_url), flows=[_flow()])
    run_id, _ = first.start("typed_state")
    asyncio.run(uw.Runner(first).run_until_idle())
    row = first.store.get_run("default", run_id)
    assert row is not None and row.status == "waiting"
    first.store.close()

    # A fresh engine on a fresh connection, as a restarted worker would be.
    second = uw.Engine(uw.connect(db_url), flows=[_flow()])
    try:
        for use_checkpoint in (True, False):
            folded = second.journal.load("default", run_id, use_checkpoint=use_checkpoint)
            assert typed(folded.state) == typed(Mixed(**WRITTEN).model_dump(mode="json"))
        second.signal(run_id, "go")
        done = asyncio.run(uw.Runner(second).run_until_complete(run_id))
        assert done.status == "completed"
        expected = {name: typed(value) for name, value in WRITTEN.items()}
        expected["zero"] = typed(-0.0)
        assert done.result == expected | {"sign": -1.0}
    finally:
        second.store.close()


@pytest.mark.parametrize(("before", "after"), [(1, True), (0, False), (1, 1.0), (True, 1)])
def test_each_type_change_is_journaled_as_a_patch(before: Any, after: Any) -> None:
    assert make_patch({"x": before}, {"x": after}) == [
        {"op": "replace", "path": "/x", "value": after}
    ]
