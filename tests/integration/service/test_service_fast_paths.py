"""The plain ``GET /v1/runs/{id}`` and ``POST /v1/runs/{id}/signals`` (answered without
FastAPI's routing, :mod:`underway.service._fast`) answer exactly as the same requests in
another shape (a query string, another spelling of the content type), which FastAPI
serves: the same body, status and access-log entry, the same refusals; a key revoked
between two plain requests is refused at the second."""

from __future__ import annotations

import httpx

from fakes.service_world import World


def _plain_and_routed(world: World, method: str, path: str, *, role: str = "operator",
                      tenant: str = "acme", json: object = None,
                      token: str | None = None) -> tuple[httpx.Response, httpx.Response]:
    """The request in its plain shape, and routed through FastAPI (a query string that
    changes nothing: the default purpose; or a content type with no space before its
    charset)."""
    headers = {"Authorization": f"Bearer {token or world.token[tenant][role]}"}
    if method == "GET":
        plain = world.http.get(path, headers=headers)
        routed = world.http.get(path, params={"purpose": "operations"}, headers=headers)
        return plain, routed
    body = httpx.Request("POST", "/", json=json).content
    plain = world.http.post(path, content=body, headers={
        **headers, "Content-Type": "application/json"})
    routed = world.http.post(path, content=body, headers={
        **headers, "Content-Type": "application/json;charset=utf-8"})
    return plain, routed


def test_a_plain_read_answers_and_logs_as_the_routed_one(world: World) -> None:
    run_id = world.start()
    before = {a.seq for a in world.store.list_access("acme", limit=100)}
    plain, routed = _plain_and_routed(world, "GET", f"/v1/runs/{run_id}", role="viewer")
    assert plain.status_code == routed.status_code == 200
    assert plain.json() == routed.json()
    assert plain.json()["waiting_on"]["signal"] == "paid"
    assert plain.headers["content-type"] == routed.headers["content-type"]
    assert plain.headers["x-frame-options"] == "DENY"
    added = [a for a in world.store.list_access("acme", limit=100) if a.seq not in before]
    assert sorted((a.run_id, a.endpoint, a.key_name, a.purpose) for a in added) == [
        (run_id, "GET /v1/runs/{run_id}", "acme-viewer", "operations")] * 2


def test_plain_refusals_are_the_routed_ones(world: World) -> None:
    run_id = world.start()
    other = world.start(tenant="globex")
    cases = [
        ("GET", f"/v1/runs/{other}", {}),  # another tenant's run: 404
        ("GET", "/v1/runs/no-such-run", {}),
        ("POST", f"/v1/runs/{run_id}/signals", {"json": {"name": "nope"}}),  # undeclared
        ("POST", f"/v1/runs/{run_id}/signals", {"json": {"name": "paid", "extra": 1}}),
        ("POST", f"/v1/runs/{run_id}/signals", {"json": {"name": ""}}),
        ("POST", f"/v1/runs/{run_id}/signals", {"json": {"name": "paid", "payload": "\x00"}}),
        ("POST", f"/v1/runs/{run_id}/signals", {"json": {"name": "paid"}, "role": "viewer"}),
        ("GET", f"/v1/runs/{run_id}", {"role": "intake"}),
        ("GET", f"/v1/runs/{run_id}", {"token": "uwk_0123456789abcdef_nope"}),
        ("POST", f"/v1/runs/{run_id}/signals", {"json": {"name": "paid"},
                                                "token": "uwk_0123456789abcdef_nope"}),
    ]
    for method, path, options in cases:
        plain, routed = _plain_and_routed(world, method, path, **options)  # type: ignore[arg-type]
        assert plain.status_code == routed.status_code >= 400, (path, options, plain.text)
        assert plain.json() == routed.json(), (path, options)
        assert plain.headers.get("www-authenticate") == routed.headers.get("www-authenticate")
    # Nothing reached the inbox.
    assert world.store.pending_signals("acme", run_id) == []


def test_a_plain_signal_is_delivered_once_as_the_routed_one(world: World) -> None:
    run_id = world.start()
    plain, routed = _plain_and_routed(world, "POST", f"/v1/runs/{run_id}/signals",
                                      json={"name": "paid", "signal_id": "s-1",
                                            "payload": {"amount": 5}})
    assert plain.status_code == routed.status_code == 202
    assert plain.json() == {"run_id": run_id, "delivered": True, "note": ""}
    assert routed.json() == {"run_id": run_id, "delivered": False, "note": ""}
    [sent] = world.store.pending_signals("acme", run_id)
    assert (sent.signal_id, sent.name, sent.sender) == ("s-1", "paid", "apikey:acme-operator")


def test_a_key_revoked_between_two_plain_reads_is_refused_at_the_second(world: World) -> None:
    run_id = world.start()
    path = f"/v1/runs/{run_id}"
    headers = world.headers(role="viewer")
    assert world.http.get(path, headers=headers).status_code == 200
    key_id = world.token["acme"]["viewer"][4:20]
    assert world.store.revoke_api_key("acme", key_id, at=world.clock.now())
    refused = world.http.get(path, headers=headers)
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    signal = world.http.post(f"{path}/signals", json={"name": "paid"},
                             headers=world.headers(role="operator"))
    assert signal.status_code == 202
    assert world.store.revoke_api_key("acme", world.token["acme"]["operator"][4:20],
                                      at=world.clock.now())
    again = world.http.post(f"{path}/signals", json={"name": "paid"},
                            headers=world.headers(role="operator"))
    assert again.status_code == 401
    assert len(world.store.pending_signals("acme", run_id)) == 1
