"""The OpenAPI document's links: where the ids a response names can be used next. A
client generated from the document, and a stateful fuzzer, learn from them that the
``run_id`` a start returns is the ``{run_id}`` of the run's endpoints, and so on."""

from __future__ import annotations

from typing import Any

IDS = ("run_id", "key_id", "approver_id", "source", "subject")
"""Response fields that name a resource. Each leads to every other operation that takes a
path or query parameter of the same name."""
PAGES = {"next_cursor": "cursor"}
"""A page's field that leads to its own operation's next page, with the parameter it fills."""


def add_links(doc: dict[str, Any]) -> None:
    """Give every 2xx JSON response of ``doc`` that names a resource (:data:`IDS`) or a
    next page (:data:`PAGES`) the links that use it.

    Args:
        doc: The OpenAPI document, changed in place.
    """
    schemas = doc.get("components", {}).get("schemas", {})
    operations = [op for ops in doc["paths"].values() for op in ops.values()]
    takers = {name: [(op, p["in"]) for op in operations for p in op.get("parameters", [])
                     if p["name"] == name and p["in"] in ("path", "query")] for name in IDS}
    for op in operations:
        for status, response in op["responses"].items():
            if not status.startswith("2"):
                continue
            fields = _fields(response, schemas)
            links: dict[str, Any] = {}
            for name in IDS:
                if name not in fields:
                    continue
                for target, where in takers[name]:
                    if target is not op:
                        _link(links, target, f"{where}.{name}", name)
            for name, parameter in PAGES.items():
                if name in fields and any(p["name"] == parameter and p["in"] == "query"
                                          for p in op.get("parameters", [])):
                    _link(links, op, f"query.{parameter}", name)
            if links:
                response["links"] = links


def _link(links: dict[str, Any], target: dict[str, Any], parameter: str, field: str) -> None:
    """Fill ``parameter`` of ``target`` with the response's ``field`` (one link per target,
    however many of its parameters the response fills)."""
    link = links.setdefault(target["operationId"],
                            {"operationId": target["operationId"], "parameters": {}})
    link["parameters"][parameter] = f"$response.body#/{field}"


def _fields(response: dict[str, Any], schemas: dict[str, Any]) -> set[str]:
    """The top-level fields of ``response``'s JSON body (none for a list or no body)."""
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    ref = schema.get("$ref", "")
    if ref.startswith("#/components/schemas/"):
        schema = schemas.get(ref.rsplit("/", 1)[1], {})
    return set(schema.get("properties", {}))
