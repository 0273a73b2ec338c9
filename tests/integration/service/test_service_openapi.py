"""The OpenAPI document is valid and as strict as the server: every ``$ref`` resolves, and
the parameters the server checks by pattern say so (a client generated from it, or a
fuzzer, learns the same bounds the server enforces)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, get_args

import pytest

from underway.errors import ConfigurationError
from underway.flow import Flow
from underway.journal import state
from underway.service import create_app
from underway.service._models import RunStatus
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


VERBS = {"add", "answer", "approve", "cancel", "create", "deliver", "erase", "fork", "get",
         "list",
         "record", "reject", "remove", "resolve", "resume", "revoke", "send", "set", "settle",
         "start", "stream", "submit", "verify"}
"""What an operation id may start with: it reads as a method of a generated client."""

PINNED = {
    "GET /v1/runs": "list_runs", "POST /v1/runs": "start_run",
    "GET /v1/runs/{run_id}": "get_run", "GET /v1/runs/{run_id}/events": "list_events",
    "GET /v1/runs/{run_id}/events/stream": "stream_events",
    "GET /v1/runs/{run_id}/stream": "stream_run",
    "GET /v1/runs/{run_id}/stream/deltas": "list_stream_deltas",
    "POST /v1/runs/{run_id}/signals": "send_signal",
    "POST /v1/runs/{run_id}/cancel": "cancel_run", "POST /v1/runs/{run_id}/resume": "resume_run",
    "POST /v1/runs/{run_id}/resolve": "resolve_run",
    "POST /v1/runs/bulk/resume": "resume_runs", "POST /v1/runs/bulk/cancel": "cancel_runs",
    "POST /v1/runs/bulk/resolve": "resolve_runs", "POST /v1/runs/bulk/settle": "settle_runs",
    "POST /v1/runs/bulk/answer": "answer_runs", "POST /v1/runs/bulk/approve": "approve_runs",
    "POST /v1/runs/bulk/reject": "reject_runs",
    "GET /v1/approvals": "list_approvals", "GET /v1/approvals/{run_id}": "get_approval",
    "POST /v1/approvals/{run_id}/decision": "submit_decision",
    "POST /v1/intake/{source}": "deliver_webhook",
    "POST /v1/consents": "record_consent", "GET /v1/consents": "get_consents",
    "POST /v1/erasures": "erase_subject", "GET /v1/erasures": "list_erasures",
    "GET /v1/usage": "get_usage", "GET /v1/audit/verify": "verify_audit",
    "GET /v1/schedules": "list_schedules", "GET /v1/queues": "list_queues",
    "GET /v1/activity": "get_activity", "GET /v1/activity/days": "get_activity_days",
    "POST /v1/runs/{run_id}/fork": "fork_run", "GET /v1/whoami": "get_identity",
    "GET /v1/labels": "list_labels", "GET /v1/subjects/runs": "list_subject_runs",
    "GET /v1/approvers/{approver_id}": "get_approver",
    "GET /v1/api-keys": "list_api_keys", "POST /v1/api-keys": "create_api_key",
    "DELETE /v1/api-keys/{key_id}": "revoke_api_key",
    "GET /v1/approvers": "list_approvers", "POST /v1/approvers": "add_approver",
    "DELETE /v1/approvers/{approver_id}": "revoke_approver",
    "GET /v1/intake-secrets": "list_intake_secrets",
    "PUT /v1/intake-secrets/{source}": "set_intake_secret",
    "DELETE /v1/intake-secrets/{source}": "remove_intake_secret",
    "GET /v1/access-log": "list_access_log", "GET /v1/access-log/verify": "verify_access_log",
    "GET /healthz": "get_health", "GET /readyz": "get_readiness", "GET /metrics": "get_metrics",
}
"""The operation ids clients are generated with: renaming one breaks their code."""


def test_operation_ids_read_like_methods_are_unique_and_stable(
        document: dict[str, Any]) -> None:
    ids = {f"{method.upper()} {path}": op["operationId"]
           for path, ops in document["paths"].items() for method, op in ops.items()}
    assert {where: ids.get(where) for where in PINNED} == PINNED
    unlike = {where: name for where, name in ids.items()
              if not re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", name)
              or name.split("_")[0] not in VERBS}
    assert unlike == {}
    assert len(set(ids.values())) == len(ids)


def test_the_console_pages_are_not_in_the_api_document(document: dict[str, Any]) -> None:
    paths = set(document["paths"])
    assert {p for p in paths if not p.startswith("/v1/")} == {"/healthz", "/readyz", "/metrics"}
    media = {kind for ops in document["paths"].values() for op in ops.values()
             for response in op["responses"].values() for kind in response.get("content", {})}
    assert "text/html" not in media and "application/json" in media


def test_the_run_status_enum_is_every_status_a_run_can_have(document: dict[str, Any]) -> None:
    statuses = set(get_args(state.RunStatus))
    assert {s.value for s in RunStatus} == statuses
    assert set(document["components"]["schemas"]["RunStatus"]["enum"]) == statuses
    listed = next(p for p in document["paths"]["/v1/runs"]["get"]["parameters"]
                  if p["name"] == "status")
    assert {"$ref": "#/components/schemas/RunStatus"} in listed["schema"]["anyOf"]
