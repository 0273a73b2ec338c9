"""What an MCP tool's annotations make of an underway tool (underway.mcp.flags), its JSON
Schema as an argument model, and the extra named when the SDK is missing."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import mcp_types as types
import pytest
from pydantic import ValidationError

import underway.mcp as uw_mcp
from underway.errors import ConfigurationError
from underway.mcp import flags
from underway.mcp._schema import arguments_model


def test_no_annotation_is_the_worst_case() -> None:
    assert flags(None) == flags({}) == uw_mcp.ToolFlags(
        mutating=True, idempotent=False, irreversible=True, trusted_output=False,
        outbound=False)


@pytest.mark.parametrize(("hints", "expected"), [
    ({"readOnlyHint": True}, (False, False, False, False, True)),
    ({"readOnlyHint": True, "openWorldHint": False}, (False, False, False, False, False)),
    ({"destructiveHint": False}, (True, False, False, False, False)),
    ({"idempotentHint": True}, (True, True, False, False, False)),
    ({"idempotentHint": True, "destructiveHint": False}, (True, True, False, False, False)),
    # Said destructive and idempotent: a lost call is for a person, never repeated.
    ({"idempotentHint": True, "destructiveHint": True}, (True, False, True, False, False)),
    ({"openWorldHint": False}, (True, False, True, False, False)),
    # readOnlyHint false is the default, spelt out.
    ({"readOnlyHint": False, "destructiveHint": True}, (True, False, True, False, False)),
])
def test_each_hint_sets_its_flag(hints: dict[str, bool],
                                 expected: tuple[bool, ...]) -> None:
    got = flags(hints)
    assert (got.mutating, got.idempotent, got.irreversible, got.trusted_output,
            got.outbound) == expected
    # The SDK's own annotations read the same.
    sdk = types.ToolAnnotations.model_validate(hints)
    assert flags(sdk) == got


@pytest.mark.parametrize(("hints", "overrides", "expected"), [
    ({}, {"read_only": True}, (False, False, False, False, True)),
    ({}, {"idempotent": True}, (True, True, False, False, False)),
    ({"idempotentHint": True}, {"irreversible": True}, (True, False, True, False, False)),
    ({"readOnlyHint": True}, {"mutating": True}, (True, False, True, False, False)),
    ({"readOnlyHint": True, "openWorldHint": False}, {"trusted_output": True},
     (False, False, False, True, False)),
    ({"readOnlyHint": True}, {"outbound": False}, (False, False, False, False, False)),
    ({}, {"timeout": 5, "permissions": ("x",)}, (True, False, True, False, False)),
])
def test_an_override_wins_over_a_hint(hints: dict[str, bool], overrides: dict[str, Any],
                                      expected: tuple[bool, ...]) -> None:
    got = flags(hints, overrides)
    assert (got.mutating, got.idempotent, got.irreversible, got.trusted_output,
            got.outbound) == expected


def test_bad_hints_and_contradicting_overrides_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="readOnlyHint must be true or false"):
        flags({"readOnlyHint": "yes"})
    with pytest.raises(ConfigurationError, match="read_only=True contradicts mutating=True"):
        flags(None, {"read_only": True, "mutating": True})
    with pytest.raises(ConfigurationError, match="read-only cannot be irreversible"):
        flags(None, {"read_only": True, "irreversible": True})


def test_the_schema_checks_arguments_and_keeps_them_as_passed() -> None:
    tool = types.Tool(name="send-mail", input_schema={
        "type": "object", "required": ["to", "from"], "additionalProperties": False,
        "properties": {"to": {"type": "string", "format": "email"},
                       "from": {"type": "string"}, "json": {"type": "integer"},
                       "amount": {"type": "number", "minimum": 0}}})
    model = arguments_model("mail", tool)
    assert model.__name__ == "SendMailArguments"
    assert model.model_json_schema() == tool.input_schema
    ok = model.model_validate({"to": "a@b.in", "from": "me", "json": 3})
    assert ok.arguments() == {"to": "a@b.in", "from": "me", "json": 3}
    with pytest.raises(ValidationError) as bad:
        model.model_validate({"to": 7, "extra": 1, "amount": -2})
    said = str(bad.value)
    assert "'from' is a required property" in said
    assert "to: 7 is not of type 'string'" in said
    assert "amount: -2 is less than the minimum of 0" in said
    assert "Additional properties are not allowed ('extra' was unexpected)" in said


def test_a_schema_that_is_not_an_object_or_not_a_schema_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="invalid input schema"):
        arguments_model("s", types.Tool(name="t", input_schema={"type": "object",
                                                                "required": "x"}))
    with pytest.raises(ConfigurationError, match="takes 'array'"):
        arguments_model("s", types.Tool(name="t", input_schema={"type": "array"}))


def test_without_the_sdk_the_import_names_the_extra() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['mcp'] = None; import underway.mcp"],
        capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "MissingExtra" in done.stderr
    assert "pip install 'underway[mcp]'" in done.stderr


def test_a_toolset_refuses_overrides_and_names_the_server_does_not_have() -> None:
    from underway.mcp import HTTP, Toolset

    listing = [types.Tool(name="lookup", input_schema={"type": "object"})]
    typo = Toolset(HTTP(url="http://127.0.0.1/mcp", hosts=["127.0.0.1"]),
                   overrides={"lookpu": {"read_only": True}})
    with pytest.raises(ConfigurationError, match=r"lists no tool \['lookpu'\]"):
        typo._absorb(listing)
    bad = Toolset(HTTP(url="http://127.0.0.1/mcp", hosts=["127.0.0.1"]),
                  overrides={"lookup": {"name": "other"}})
    with pytest.raises(ConfigurationError, match=r"\['name'\], which the toolset sets"):
        bad._absorb(listing)
    odd = Toolset(HTTP(url="http://127.0.0.1/mcp", hosts=["127.0.0.1"]),
                  overrides={"lookup": {"colour": "red"}})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(ConfigurationError, match=r"options a tool does not take: \['colour'\]"):
        odd._absorb(listing)


def test_an_unknown_protocol_mode_is_refused() -> None:
    from underway.mcp import HTTP, Toolset

    with pytest.raises(ConfigurationError, match="mode must be 'auto', 'legacy'"):
        Toolset(HTTP(url="http://127.0.0.1/mcp", hosts=["127.0.0.1"]), mode="2024-01-01")
