"""Argument models for tools known by a JSON Schema: an MCP server's tools, the Agents
SDK's function tools, pydantic-ai's toolsets.

:func:`schema_arguments` checks a call with the tool's own JSON Schema (``jsonschema``), so
the guard refuses an invalid call as it refuses any other (``SchemaValidationFailed``),
before anything reaches the tool. A model shows models the schema unchanged
(``model_json_schema``). Each top-level property is also a field, under its own name as
alias, so a tool's ``amount`` or ``account`` options can name it. ``arguments()`` gives the
arguments back as they were passed.

``jsonschema`` is optional: it comes with the extras that need it (``mcp``,
``openai-agents``), and its absence names the caller's extra.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from typing import Any, ClassVar, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    create_model,
    model_validator,
)
from pydantic_core import to_jsonable_python

from .._extras import import_extra
from ..errors import ConfigurationError
from ..events import JSON

MAX_ERRORS = 10
"""Schema errors a refusal lists (the rest are counted)."""

A = TypeVar("A", bound="SchemaArguments")


class SchemaArguments(BaseModel):
    """The arguments of a call of a tool known by its JSON Schema, checked against it.

    ``arguments()`` gives them back as they were passed.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    _passed: dict[str, Any] = PrivateAttr(default_factory=dict)
    validator: ClassVar[Any] = None
    """What :meth:`schema_errors` checks with: a ``jsonschema`` validator of
    :attr:`input_schema` here."""

    @classmethod
    def schema_errors(cls, value: Any) -> list[str]:
        """What is wrong with ``value``, one ``path: message`` each, in path order."""
        errors = sorted(cls.validator.iter_errors(value),
                        key=lambda e: [(isinstance(p, str), p) for p in e.path])
        return [f"{'.'.join(map(str, e.path)) or '(arguments)'}: {e.message}" for e in errors]

    @model_validator(mode="wrap")
    @classmethod
    def _against_schema(cls, value: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        value = {} if value is None else value
        errors = cls.schema_errors(value)
        if errors:
            shown = errors[:MAX_ERRORS]
            more = len(errors) - len(shown)
            raise ValueError("; ".join(shown) + (f"; and {more} more" if more else ""))
        made = handler(value)
        # Kept as passed: the fields' own names may be keys of the call too.
        made._passed = dict(value)
        return made

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The tool's input schema, as the tool gave it."""
        return cls.input_schema

    def arguments(self) -> dict[str, JSON]:
        """The arguments as passed (and checked)."""
        out: dict[str, JSON] = to_jsonable_python(self._passed)
        return out


def arguments_model(tool: str, schema: Mapping[str, Any], validator: Any,
                    base: type[A]) -> type[A]:
    """A subclass of ``base`` for ``tool``: a field for each top-level property of
    ``schema`` (named by it, as alias), and ``validator``, what ``base.schema_errors``
    checks a call with. The schema itself is not checked here: :func:`schema_arguments`
    checks it, for a ``jsonschema`` validator."""
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    fields: dict[str, Any] = {}
    for prop in props:
        plain = prop.isidentifier() and not keyword.iskeyword(prop) \
            and not prop.startswith(("_", "model_", "field_")) and not hasattr(base, prop)
        # A name of its own for the others: what the caller sends is keyed by the alias.
        name = prop if plain else f"field_{len(fields)}"
        fields[name] = (Any, Field(default=None, alias=prop))
    model: type[A] = create_model(_class_name(tool), __base__=base, **fields)
    model.input_schema = dict(schema)
    model.validator = validator
    return model


def schema_arguments(tool: str, schema: Mapping[str, Any], *, where: str, extra: str,
                     base: type[A]) -> type[A]:
    """The argument model of ``tool``, checked with ``jsonschema`` against ``schema``.

    Args:
        tool: The tool's name.
        schema: Its JSON Schema, an object's.
        where: Where the tool comes from, for errors (``MCP server mail``).
        extra: The extra that installs ``jsonschema`` for the caller.
        base: The class the model subclasses (:class:`SchemaArguments` or a subclass).

    Raises:
        ConfigurationError: ``schema`` is not a valid JSON Schema of an object.
        MissingExtra: ``jsonschema`` is not installed.
    """
    jsonschema = import_extra("jsonschema", what=f"{where}: tool {tool!r}", extra=extra)
    schema = dict(schema)
    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigurationError(
            f"{where}: tool {tool!r} has an invalid input schema: {exc.message}") from None
    if schema.get("type", "object") != "object":
        raise ConfigurationError(
            f"{where}: tool {tool!r} takes {schema.get('type')!r}, but a tool's arguments "
            "are an object")
    return arguments_model(tool, schema, cls(schema), base)


def _class_name(tool: str) -> str:
    return "".join(p.capitalize() for p in "".join(
        c if c.isalnum() else " " for c in tool).split()) + "Arguments"
