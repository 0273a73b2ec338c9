"""Invariant: revocation and signed-only settings take effect on every surface at once, and a
signed webhook delivery acts once. Attacked through a real uvicorn server with real SSE
reads (the API's tail and the console's), the console's forms, the CLI and the Python
client, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import underway as uw
from fakes.console_browser import csrf_of, sign_in
from fakes.journey_flows import journey_to_the_question
from fakes.service_world import World
from underway import webhooks
from underway.cli import app as cli
from underway.errors import SignedResolutionRequired
from underway.service import ServerThread, create_app


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    w = World(db_url)
    yield w
    w.close()


Frame = tuple[str, str, Any]


def _read(url: str, path: str, received: list[Frame], ready: threading.Event, *,
          ready_after: int, headers: dict[str, str] | None = None,
          cookies: httpx.Cookies | None = None) -> None:
    """Read the SSE stream at ``path`` until it ends; ``ready`` once ``ready_after`` frames
    (or a status frame) arrived: the server is tailing."""
    with httpx.Client(base_url=url, headers=headers, cookies=cookies, timeout=60.0) as c, \
            c.stream("GET", path) as r:
        assert r.status_code == 200, r.read()
        fields: dict[str, str] = {}
        for line in r.iter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if "data" in fields:
                kind = fields.get("event", "message")
                received.append((fields.get("id", ""), kind, json.loads(fields["data"])))
                if kind == "status" or len(received) >= ready_after:
                    ready.set()
            fields = {}


def _revoke_then_move(world: World, role: str, run_id: str) -> None:
    key_id = world.token["acme"][role].split("_")[1]
    assert world.store.revoke_api_key("acme", key_id, at=world.clock.now())
    sent = world.call("POST", f"/v1/runs/{run_id}/signals", role="operator",
                      json={"name": "paid", "payload": {"card": "4111-secret"}})
    assert sent.status_code == 202
    world.drive()
    assert world.store.get_run("acme", run_id).status == "completed"  # type: ignore[union-attr]


def test_an_open_api_tail_ends_when_its_key_is_revoked(world: World) -> None:
    run_id = world.start()
    head = len(uw.Client(world.store).history(run_id, tenant_id="acme"))
    received: list[Frame] = []
    ready = threading.Event()
    reader = threading.Thread(target=_read, args=(
        world.server.url, f"/v1/runs/{run_id}/events/stream", received, ready),
        kwargs={"ready_after": head, "headers": world.headers(role="viewer")})
    reader.start()
    assert ready.wait(30)
    _revoke_then_move(world, "viewer", run_id)
    reader.join(60)
    assert not reader.is_alive()
    assert [int(i) for i, kind, _ in received if kind != "unauthorized"] == list(
        range(1, head + 1))
    assert received[-1][1] == "unauthorized" and "revoked" in received[-1][2]["detail"]
    assert "4111-secret" not in json.dumps(received)
    again = world.call("GET", f"/v1/runs/{run_id}/events/stream", role="viewer")
    assert again.status_code == 401


def test_an_open_console_tail_ends_when_its_key_is_revoked(world: World) -> None:
    run_id = world.start()
    head = len(uw.Client(world.store).history(run_id, tenant_id="acme"))
    received: list[Frame] = []
    ready = threading.Event()
    with sign_in(world, role="viewer") as browser:
        reader = threading.Thread(target=_read, args=(
            world.server.url, f"/runs/{run_id}/events/stream?after={head}", received, ready),
            kwargs={"ready_after": 1, "cookies": browser.cookies})
        reader.start()
        assert ready.wait(30)
        _revoke_then_move(world, "viewer", run_id)
        reader.join(60)
        assert not reader.is_alive()
        page = browser.get(f"/runs/{run_id}", headers={"Accept": "text/html"},
                           follow_redirects=False)
    assert [kind for _, kind, _ in received] == ["status", "unauthorized"]
    assert "4111-secret" not in json.dumps(received)
    assert page.status_code == 303 and page.headers["location"].startswith("/login")


@pytest.fixture
def strict(world: World) -> Iterator[tuple[World, httpx.Client]]:
    """A second server on the same database whose deployment settles runs only with
    signed resolutions."""
    server = ServerThread(create_app(uw.Client(world.store, clock=world.clock),
                                     signed_resolutions=True))
    server.start()
    with httpx.Client(base_url=server.url, timeout=30.0) as http:
        yield world, http
    server.stop()


def test_every_surface_refuses_an_unsigned_resolution_up_front(
    strict: tuple[World, httpx.Client], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    world, http = strict
    run_id = journey_to_the_question(world)
    assert world.store.get_run("acme", run_id).status == "escalated"  # type: ignore[union-attr]
    auth = world.headers(role="operator")
    # The API: 409 problem+json, for a resolve and a resume.
    for action, body in (("resolve", {"resolution": "failed"}), ("resume", {})):
        r = http.post(f"/v1/runs/{run_id}/{action}", json=body, headers=auth)
        assert r.status_code == 409, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert "is refused here" in r.json()["detail"]
        assert r.json()["type"].endswith("signed-resolution-required")
    # The console: no unsigned forms; a posted one is an error page, not a 303.
    with httpx.Client(base_url=http.base_url, timeout=30.0) as browser:
        form = browser.get("/login").text
        from fakes.console_browser import login_form_token
        browser.post("/login", data={"token": world.token["acme"]["operator"],
                                     "csrf": login_form_token(form), "next": "/runs"})
        page = browser.get(f"/runs/{run_id}").text
        assert 'id="signed-only"' in page and f"/runs/{run_id}/resolve" not in page
        r = browser.post(f"/runs/{run_id}/resolve",
                         data={"csrf": csrf_of(page), "resolution": "failed"})
        assert r.status_code == 409 and "is refused here" in r.text
    # The CLI, reading the deployment's ./underway.toml.
    (tmp_path / "underway.toml").write_text("[approvals]\nsigned_resolutions = true\n")
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(cli, ["runs", "resolve", run_id, "--resolution", "failed",
                                   "--by", "ops", "--tenant", "acme",
                                   "--db", world.store_url])
    assert out.exit_code == 2 and "is refused here" in out.output
    # The Python client told the setting.
    with pytest.raises(SignedResolutionRequired, match="is refused here"):
        uw.Client(world.store, signed_resolutions=True).resolve(
            run_id, resolution="failed", by="ops", tenant_id="acme")
    assert world.store.pending_signals("acme", run_id) == []


def _post(world: World, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return world.call("POST", "/v1/intake/crm", role="intake", content=body,
                      headers={**headers, "Content-Type": "application/json"})


def test_one_signed_delivery_acts_once_whatever_key_header_it_is_posted_with(
    world: World,
) -> None:
    secret = webhooks.new_secret()
    r = world.call("PUT", "/v1/intake-secrets/crm", json={"secret": secret})
    assert r.status_code in (200, 201, 204), r.text
    event = {"entity_id": "INV-7", "event_type": "invoice.created",
             "payload": {"invoice": "INV-7", "amount": 3}}
    body = json.dumps(event).encode()
    v1 = webhooks.sign(secret, body, at=world.clock.now())
    # A key header a v1 signature does not cover is refused, whatever its value.
    for key in ("k-1", "k-2", "k-3"):
        r = _post(world, body, {**v1, "Idempotency-Key": key})
        assert r.status_code == 401 and r.json()["type"].endswith("unsigned-idempotency-key")
    assert world.store.list_runs("acme") == []
    # Signed with its key (v2): once; the same signature under another key does not verify.
    v2 = webhooks.sign(secret, body, at=world.clock.now(), idempotency_key="k-1")
    assert _post(world, body, v2).json()["action"] == "started"
    assert _post(world, body, v2).json()["action"] == "duplicate"
    for key in ("k-2", "k-3"):
        r = _post(world, body, {**v2, "Idempotency-Key": key})
        assert r.status_code == 401 and r.json()["type"].endswith("bad-signature")
    # A key in the body is signed by v1: re-signing later acts once too.
    keyed = json.dumps({**event, "entity_id": "INV-8", "idempotency_key": "b-1"}).encode()
    first = _post(world, keyed, webhooks.sign(secret, keyed, at=world.clock.now()))
    later = _post(world, keyed, webhooks.sign(secret, keyed, at=world.clock.now() + 1))
    assert (first.json()["action"], later.json()["action"]) == ("started", "duplicate")
    assert len(world.store.list_runs("acme")) == 2


@pytest.mark.parametrize("command", ["resolve", "resume"])
def test_the_cli_reads_signed_only_from_the_config_the_deployment_names(
    strict: tuple[World, httpx.Client], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    """Workers started with --config FILE settle runs only with signed resolutions: the
    CLI run elsewhere with the same --config refuses up front, sending nothing."""
    world, _ = strict
    run_id = journey_to_the_question(world)
    deployed = tmp_path / "etc" / "underway.toml"
    deployed.parent.mkdir()
    deployed.write_text("[approvals]\nsigned_resolutions = true\n")
    monkeypatch.chdir(tmp_path)  # no ./underway.toml here
    extra = ["--resolution", "failed"] if command == "resolve" else []
    out = CliRunner().invoke(cli, ["runs", command, run_id, *extra, "--by", "ops",
                                   "--tenant", "acme", "--db", world.store_url,
                                   "--config", str(deployed)])
    assert out.exit_code == 2 and "is refused here" in out.output, out.output
    assert world.store.pending_signals("acme", run_id) == []
