"""The access log: every read of a run's data through the API (each endpoint the OpenAPI
document marks as reading run data) appends exactly one entry per run read — key id and
name, time, tenant, run, endpoint — before the data leaves; other calls append none; the
admin reads it (per tenant) and nothing in the API can change or remove an entry."""

from __future__ import annotations

from fakes.route_table import SAMPLES, acme, endpoints
from fakes.service_world import World


def test_every_run_data_read_appends_one_entry_per_run(world: World) -> None:
    fx = acme(world)
    run_data = [e for e in endpoints(world) if e.run_data]
    assert {(e.method, e.path) for e in run_data} == {
        ("GET", "/v1/runs/{run_id}"), ("GET", "/v1/runs/{run_id}/events"),
        ("GET", "/v1/runs/{run_id}/events/stream"), ("GET", "/v1/runs/{run_id}/stream"),
        ("GET", "/v1/runs/{run_id}/stream/deltas"), ("GET", "/v1/approvals"),
        ("GET", "/v1/approvals/{run_id}"), ("GET", "/v1/usage"), ("GET", "/v1/activity"),
        ("GET", "/v1/activity/days"),
    }
    for e in endpoints(world):
        if e.method != "GET":
            continue
        path, kwargs = SAMPLES[(e.method, e.path)](world, fx)
        last = max((a.seq for a in world.store.list_access("acme", limit=1000)), default=0)
        r = world.call("GET", path, role="viewer" if "viewer" in e.roles else "admin",
                       **kwargs)
        assert r.status_code == 200, f"{e.path}: {r.text}"
        added = [a for a in world.store.list_access("acme", limit=1000) if a.seq > last]
        if not e.run_data:
            assert added == [], e.path
            continue
        expected = ({fx.refund} if e.path == "/v1/approvals" else
                    {"*"} if e.path in ("/v1/usage", "/v1/activity", "/v1/activity/days") else
                    {path.split("/")[3]})
        assert {a.run_id for a in added} == expected and len(added) == len(expected)
        for a in added:
            assert (a.key_id, a.key_name, a.endpoint) == (
                world.token["acme"]["viewer"][4:20], "acme-viewer", f"GET {e.path}")
            assert a.tenant_id == "acme" and abs(a.at - world.clock.now()) < 1
            assert (a.purpose, a.revealed) == ("operations", False)


def test_a_read_that_finds_nothing_records_nothing(world: World) -> None:
    for path in ("/v1/runs/nope", "/v1/runs/nope/events", "/v1/runs/nope/stream/deltas",
                 "/v1/approvals/nope"):
        assert world.call("GET", path, role="viewer").status_code == 404
    assert world.store.list_access("acme") == []


def test_the_admin_reads_the_log_of_its_tenant_newest_first_in_pages(world: World) -> None:
    run_id = world.start()
    other = world.start(tenant="globex")
    for _ in range(3):
        world.call("GET", f"/v1/runs/{run_id}", role="viewer")
    world.call("GET", f"/v1/runs/{other}", tenant="globex", role="viewer")
    page = world.call("GET", "/v1/access-log", params={"limit": 2}).json()
    assert [e["run_id"] for e in page["entries"]] == [run_id, run_id]
    rest = world.call("GET", "/v1/access-log",
                      params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert len(rest["entries"]) == 1 and rest["next_cursor"] is None
    seqs = [e["seq"] for e in page["entries"] + rest["entries"]]
    assert seqs == sorted(seqs, reverse=True)
    assert world.call("GET", "/v1/access-log", params={"run_id": other}).json()["entries"] == []
    bad = world.call("GET", "/v1/access-log", params={"cursor": "x"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "query.cursor"


def test_nothing_in_the_api_changes_or_removes_an_entry(world: World) -> None:
    run_id = world.start()
    world.call("GET", f"/v1/runs/{run_id}", role="viewer")
    log_paths = [e for e in endpoints(world) if e.path.startswith("/v1/access-log")]
    assert [(e.method, e.path) for e in log_paths] == [
        ("GET", "/v1/access-log"), ("GET", "/v1/access-log/verify")]
    for method in ("DELETE", "PUT", "PATCH", "POST"):
        for path in ("/v1/access-log", "/v1/access-log/verify"):
            assert world.call(method, path).status_code == 405
    assert len(world.store.list_access("acme")) == 1
