"""The plan-and-extract program check: it refuses what it does not know, moves inline
extractions into steps of their own, and checks extracted values against a small, strict
subset of JSON Schema."""

from __future__ import annotations

from typing import Any

import pytest

from underway.agent._program import (
    MissingValue,
    ProgramError,
    check_schema,
    fill,
    lookup,
    parse_program,
    ref_paths,
    schema_errors,
)

TOOLS = ["read", "send"]


def parse(program: Any, known: tuple[str, ...] = (), max_steps: int = 10) -> Any:
    return parse_program(program, tools=TOOLS, known=known, max_steps=max_steps)


def x(ref: str, schema: Any = None) -> dict[str, Any]:
    return {"$extract": {"from": {"$ref": ref}, "schema": schema or {"type": "string"},
                         "instruction": "it"}}


def test_inline_extractions_become_steps_before_the_step_that_uses_them() -> None:
    steps, answer = parse({"steps": [
        {"id": "a", "tool": "read", "args": {"q": "inbox"}},
        {"id": "b", "tool": "send", "args": {"to": ["bob"], "body": x("a.body"),
                                             "cc": [x("a.cc")]}},
    ], "answer": {"said": x("a.body"), "to": {"$ref": "b_x2"}}})
    assert [s["id"] for s in steps] == ["a", "b_x1", "b_x2", "b", "answer_x1"]
    assert steps[3]["args"] == {"to": ["bob"], "body": {"$ref": "b_x1"},
                                "cc": [{"$ref": "b_x2"}]}
    assert steps[1]["extract"]["from"] == "a.body"
    assert answer == {"said": {"$ref": "answer_x1"}, "to": {"$ref": "b_x2"}}
    assert ref_paths(answer, "result") == [("result.said", "answer_x1"),
                                           ("result.to", "b_x2")]


@pytest.mark.parametrize(("program", "why"), [
    ([], "must be a JSON object"),
    ({"steps": [], "answer": 1, "run": "rm"}, "unknown fields ['run']"),
    ({"steps": [{"id": "a", "tool": "wipe"}]}, "no tool 'wipe'"),
    ({"steps": [{"id": "1a", "tool": "read"}]}, "id must match"),
    ({"steps": [{"id": "a", "tool": "read"}, {"id": "a", "tool": "read"}]}, "used twice"),
    ({"steps": [{"id": "a", "tool": "read", "args": {"q": {"$ref": "b"}}},
                {"id": "b", "tool": "read"}]}, "names no earlier step"),
    ({"steps": [{"id": "a", "tool": "read", "args": {"q": {"$ref": "a"}}}]},
     "names no earlier step"),
    ({"steps": [{"id": "a", "tool": "read", "args": {"q": {"$ref": "x", "or": 1}}}]},
     "is not a directive"),
    ({"steps": [{"id": "a", "tool": "read", "args": {"q": {"$code": "1"}}}]},
     "is not a directive"),
    ({"steps": [{"id": "a", "tool": "read", "args": {"q": "x"}, "when": "always"}]},
     "unknown fields ['when']"),
    ({"steps": [{"id": "a", "tool": "read"}, {"id": "b", "tool": "send", "args": {
        "q": x("a", {"type": "string", "$schema": "x"})}}]}, "not supported"),
    ({"steps": [{"id": "a", "tool": "read"}, {"id": "b", "tool": "send", "args": {
        "q": {"$extract": {"from": "a", "schema": {"type": "string"}}}}}]},
     "must be a reference"),
    ({"steps": [{"id": "a", "extract": {"from": {"$ref": "a"},
                                        "schema": {"type": "string"}}}]},
     "names no earlier step"),
    ({"steps": [{"id": "a", "tool": "read", "args": {"q": {"$ref": "a..b"}}}]},
     "names no earlier step"),
    ({"steps": [{"id": "b_x1", "tool": "read"}, {"id": "b", "tool": "send",
                                                 "args": {"q": x("b_x1")}}]},
     "is taken"),
    ({"steps": [{"id": f"s{i}", "tool": "read"} for i in range(11)]}, "at most 10"),
])
def test_an_invalid_program_is_refused_saying_why(program: Any, why: str) -> None:
    with pytest.raises(ProgramError, match=None) as err:
        parse(program)
    assert why in str(err.value)


def test_a_new_program_may_reference_the_steps_done_but_not_reuse_their_ids() -> None:
    steps, _ = parse({"steps": [{"id": "c", "tool": "send", "args": {"b": {"$ref": "a.x"}}}]},
                     known=("a",))
    assert steps[0]["args"] == {"b": {"$ref": "a.x"}}
    with pytest.raises(ProgramError, match="used twice"):
        parse({"steps": [{"id": "a", "tool": "read"}]}, known=("a",))


@pytest.mark.parametrize("schema", [
    {}, {"description": "no type"}, {"type": "text"}, {"type": "string", "pattern": "("},
    {"type": "object", "required": ["a"]}, {"type": "object", "additionalProperties": {}},
    {"type": "array", "items": {"type": "string", "allOf": []}},
    {"type": "string", "maxLength": True}, {"enum": "abc"},
])
def test_a_schema_outside_the_subset_is_refused(schema: Any) -> None:
    with pytest.raises(ProgramError):
        check_schema(schema, "s")


def test_values_are_checked_strictly() -> None:
    obj = {"type": "object", "required": ["iban"], "properties": {
        "iban": {"type": "string", "pattern": "^DE[0-9]{20}$"},
        "amount": {"type": "number", "minimum": 0, "maximum": 500},
        "tags": {"type": "array", "maxItems": 2, "items": {"enum": ["a", "b"]}}}}
    check_schema(obj, "s")
    assert schema_errors({"iban": "DE89370400440532013000", "amount": 12}, obj) == []
    assert schema_errors({"iban": "XX1", "amount": 900, "tags": ["a", "c", "b"], "cc": 1},
                         obj) == [
        "value: unexpected 'cc'", "value.iban: does not match the pattern '^DE[0-9]{20}$'",
        "value.amount: more than 500", "value.tags: more than 2 items",
        "value.tags[1]: must be one of [\"a\", \"b\"]"]
    assert schema_errors(True, {"type": "integer"}) == ["value: expected integer"]
    assert schema_errors(1, {"enum": [True]}) == ["value: must be one of [true]"]
    assert schema_errors({}, obj) == ["value: missing 'iban'"]


def test_references_are_filled_from_the_values_and_a_missing_part_is_said() -> None:
    values = {"a": {"items": [{"id": "I-1"}]}, "b": "text"}
    assert fill({"x": [{"$ref": "a.items.0.id"}], "y": {"$ref": "b"}}, values) == {
        "x": ["I-1"], "y": "text"}
    for ref in ("a.items.1", "a.nope", "c", "b.x"):
        with pytest.raises(MissingValue):
            lookup(ref, values)
