"""Argument models of tools known by a JSON Schema (underway.effects._schema_args), as the
MCP toolset and the Agents SDK integration make them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from underway.effects._schema_args import MAX_ERRORS, SchemaArguments, schema_arguments
from underway.errors import ConfigurationError


def _model(schema: dict[str, object]) -> type[SchemaArguments]:
    return schema_arguments("pay-out", schema, where="here", extra="mcp",
                            base=SchemaArguments)


def test_every_property_is_a_field_under_its_own_name_as_alias() -> None:
    model = _model({"type": "object", "properties": {
        "amount": {}, "to-account": {}, "field_0": {}, "arguments": {}, "model_x": {}}})
    assert model.__name__ == "PayOutArguments"
    aliases = {f.alias for f in model.model_fields.values()}
    assert aliases == {"amount", "to-account", "field_0", "arguments", "model_x"}
    # A property that is also a method's name leaves the method alone.
    made = model.model_validate({"arguments": 1, "amount": 2})
    assert made.arguments() == {"arguments": 1, "amount": 2}


def test_arguments_come_back_as_passed_even_under_a_field_s_own_name() -> None:
    model = _model({"type": "object", "properties": {"to-account": {}}})
    assert model.model_validate({"field_0": 5}).arguments() == {"field_0": 5}
    assert model.model_validate(None).arguments() == {}
    made = model.model_validate({"to-account": [1, 2]})
    made.arguments()["to-account"].append(3)
    assert made.arguments() == {"to-account": [1, 2]}


def test_errors_are_listed_in_path_order_and_capped() -> None:
    model = _model({"type": "object", "properties": {
        "ids": {"type": "array", "items": {"type": "integer"}}}})
    with pytest.raises(ValidationError) as bad:
        model.model_validate({"ids": ["x"] * (MAX_ERRORS + 3)})
    said = str(bad.value)
    assert "ids.0: 'x' is not of type 'integer'; ids.1:" in said
    assert f"ids.{MAX_ERRORS - 1}:" in said and f"ids.{MAX_ERRORS}:" not in said
    assert "and 3 more" in said


def test_the_schema_is_shown_unchanged_and_checked_when_made() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}},
              "additionalProperties": False}
    assert _model(schema).model_json_schema() == schema
    with pytest.raises(ConfigurationError, match="here: tool 'pay-out' has an invalid"):
        _model({"type": "object", "properties": 3})
    with pytest.raises(ConfigurationError, match="here: tool 'pay-out' takes 'string'"):
        _model({"type": "string"})


def test_without_jsonschema_the_caller_s_extra_is_named() -> None:
    code = ("import sys; sys.modules['jsonschema'] = None\n"
            "from underway.effects._schema_args import SchemaArguments, schema_arguments\n"
            "schema_arguments('t', {}, where='OpenAI Agents SDK', extra='openai-agents', "
            "base=SchemaArguments)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 1
    assert "MissingExtra" in done.stderr
    assert "pip install 'underway[openai-agents]'" in done.stderr
