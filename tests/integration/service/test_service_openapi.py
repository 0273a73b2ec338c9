"""The OpenAPI document is valid and as strict as the server: every ``$ref`` resolves, and
the parameters the server checks by pattern say so (a client generated from it, or a
fuzzer, learns the same bounds the server enforces)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from underway.errors import ConfigurationError
from underway.flow import Flow
from underway.service import create_app
from underway.store import connect


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    store = connect("memory://")
    try:
        doc: dict[str, Any] = create_app(store).openapi()
        return doc
    finally:
        store.close()


def refs(node: Any, where: str = "#") -> Iterator[tuple[str, str]]:
    """Every ``$ref`` in ``node``, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield where, value
            else:
                yield from refs(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from refs(value, f"{where}/{i}")


def resolve(doc: dict[str, Any], ref: str) -> Any:
    """What the local JSON pointer ``ref`` points at (KeyError when nothing)."""
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_every_ref_resolves(document: dict[str, Any]) -> None:
    found = list(refs(document))
    assert len(found) > 50
    dangling = []
    for where, ref in found:
        try:
            resolve(document, ref)
        except KeyError:
            dangling.append(f"{where} -> {ref}")
    assert not dangling
    intake = document["paths"]["/v1/intake/{source}"]["post"]["requestBody"]
    schema = resolve(document, intake["content"]["application/json"]["schema"]["$ref"])
    assert {"entity_id", "event_type"} <= set(schema["required"])


def parameters(doc: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    """Every parameter ``name`` of every operation, with its schema (null allowed or not)."""
    found = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for param in op.get("parameters", []):
                if param["name"] == name:
                    schema = param["schema"]
                    for option in schema.get("anyOf", [schema]):
                        if option.get("type") == "string":
                            found.append((f"{method.upper()} {path}", option))
    return found


@pytest.mark.parametrize(("name", "refused", "accepted"), [
    ("purpose", ["", " ", "a\x01b", "\n", "x" * 101], ["operations"]),
    ("subject", ["", "a b", "a\x00", "a\u2003b", "x" * 201], ["cust-7"]),
    ("cursor", ["", "!!", "a b", "x" * 601], ["WzEsIngiXQ"]),
])
def test_checked_parameters_document_their_bounds(
    document: dict[str, Any], name: str, refused: list[str], accepted: list[str],
) -> None:
    found = parameters(document, name)
    assert found, name
    for where, schema in found:
        assert "pattern" in schema and "maxLength" in schema, (where, schema)
        pattern = re.compile(schema["pattern"])

        def fits(value: str, schema: dict[str, Any] = schema,
                 pattern: re.Pattern[str] = pattern) -> bool:
            return (schema.get("minLength", 0) <= len(value) <= schema["maxLength"]
                    and pattern.search(value) is not None)

        assert not [v for v in refused if fits(v)], where
        if "access-log" not in where:  # its cursor is a number; its purpose a filter
            assert all(fits(v) for v in accepted), where


def test_a_flow_name_is_documented_as_the_server_checks_it(document: dict[str, Any]) -> None:
    documented = document["components"]["schemas"]["StartRun"]["properties"]["flow"]["pattern"]
    # JSON Schema's ``$`` is the end of the text; Python's also matches before a last newline.
    pattern = re.compile(documented.removesuffix("$") + r"\Z")

    def accepted(name: str) -> bool:
        try:
            Flow.check_name(name)
        except ConfigurationError:
            return False
        return True

    names = ["reminders", "a.b-c_d", "\u00e92", "\u00b2", "", "_", "-.", "a b", "z#", "\u00a1",
             "a\x00", "a\n"]
    assert [n for n in names if bool(pattern.search(n)) != accepted(n)] == []
    assert any(accepted(n) for n in names) and not all(accepted(n) for n in names)
