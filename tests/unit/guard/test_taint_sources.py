"""What a call gives back taints its context only when its tool ran and nobody vouches
for its output (underway.guard.taint.output_taints), as both agent integrations read it."""

from __future__ import annotations

import pytest

import underway as uw
from underway.guard.taint import output_taints
from underway.journal.state import REFUSAL_ERRORS


async def _lookup(args: uw.NoArgs) -> str:
    return "found"


UNVOUCHED = uw.Tool(name="lookup", fn=_lookup, mutating=False)
VOUCHED = uw.Tool(name="lookup", fn=_lookup, mutating=False, trusted_output=True)


def test_a_result_or_an_error_of_an_unvouched_tool_taints() -> None:
    assert output_taints(UNVOUCHED)
    assert output_taints(UNVOUCHED, "ToolError")
    assert not output_taints(VOUCHED) and not output_taints(VOUCHED, "ToolError")


@pytest.mark.parametrize("error", [*REFUSAL_ERRORS.values(), "SchemaValidationFailed"])
def test_a_call_the_door_refused_taints_nothing(error: str) -> None:
    assert not output_taints(UNVOUCHED, error)
