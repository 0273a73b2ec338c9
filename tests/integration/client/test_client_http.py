"""What only a client over HTTP meets: an API key reaches its own tenant and no other; a
key the server refuses, a role that may not act and a server that is down each give a clear
error; options the API does not take are named. The servers are real: ``underway serve``
run as a user runs it, and uvicorn in this process (:mod:`fakes.service_world`)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import underway as uw
from fakes.service_world import World
from fakes.serving import UNDERWAY, free_port, serve
from underway.client import RunFilter, _http
from underway.errors import SignedResolutionRequired
from underway.service import ServerThread, create_app


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    w = World(str(request.getfixturevalue("sqlite_url" if request.param == "sqlite"
                                          else "pg_url")))
    yield w
    w.close()


def client(world: World, tenant: str = "acme", role: str = "admin") -> uw.Client:
    return uw.Client(world.server.url, api_key=world.token[tenant][role])


def test_a_key_reaches_its_own_tenant_and_no_other(world: World) -> None:
    ours = world.start(invoice="A-1")
    theirs = world.start(invoice="G-1", tenant="globex")
    with client(world) as acme, client(world, "globex") as globex:
        assert [r.run_id for r in acme.list_runs().runs] == [ours]
        assert acme.get_run(ours).tenant_id == "acme"
        assert acme.get_run(ours, tenant_id="acme").run_id == ours
        for reach in (acme.get_run, acme.events, acme.state, acme.pending_request,
                      acme.children):
            with pytest.raises(uw.RunNotFound, match=f"no run '{theirs}' in tenant 'acme'"):
                reach(theirs)
        with pytest.raises(uw.RunNotFound):
            acme.signal(theirs, "paid")
        with pytest.raises(uw.RunNotFound):
            acme.cancel(theirs, by="ops")
        with pytest.raises(uw.RunNotFound):
            acme.fork(theirs, at_seq=1, by="ops")
        with pytest.raises(uw.RunNotFound):
            acme.find_run(theirs[:8])
        assert acme.run_labels([theirs]) == {}
        with pytest.raises(uw.ConfigurationError, match="the API key belongs to tenant "
                           "'acme'; over HTTP a client reaches its key's tenant only, "
                           "not 'globex'"):
            acme.get_run(theirs, tenant_id="globex")
        done = acme.bulk("cancel", RunFilter(), by="ops", dry_run=False)
        assert done.ids("done") == [ours]
        world.drive()
        assert globex.get_run(theirs).status == "waiting"
        assert acme.get_run(ours).status == "cancelled"


def test_steering_reads_rows_and_the_access_log_records_only_data_reads(world: World) -> None:
    run_id = world.start()
    with client(world, role="operator") as ops:
        ops.signal(run_id, "paid", {"amount": 5}, signal_id="s1")
        assert ops.get_run(run_id).run_id == run_id
        assert world.store.list_access("acme") == []
        ops.events(run_id)
    assert [(a.run_id, a.key_name, a.endpoint) for a in world.store.list_access("acme")] == \
        [(run_id, "acme-operator", "GET /v1/runs/{run_id}/events")]


def test_a_page_longer_than_the_apis_is_read_in_several(world: World,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    started = [world.start(invoice=f"P-{i}", drive=False) for i in range(5)]
    monkeypatch.setattr(_http, "API_PAGE", 2)
    with client(world) as acme:
        page = acme.list_runs(limit=4)
        assert len(page.runs) == 4 and page.next_cursor is not None
        rest = acme.list_runs(limit=4, cursor=page.next_cursor)
        assert rest.next_cursor is None
        assert sorted(r.run_id for r in page.runs + rest.runs) == sorted(started)


def test_a_refused_key_or_role_says_so(world: World) -> None:
    run_id = world.start()
    with uw.Client(world.server.url, api_key="uwk_not-a-key") as stranger, \
            pytest.raises(uw.ServiceError, match="refused the API key: the API key is "
                          "unknown or revoked") as refused:
        stranger.list_runs()
    assert refused.value.status == 401
    with client(world, role="viewer") as viewer:
        assert viewer.get_run(run_id).status == "waiting"
        with pytest.raises(uw.ServiceError, match="a viewer key may not do this; it needs "
                           "one of: operator, admin") as forbidden:
            viewer.cancel(run_id, by="me")
        assert forbidden.value.status == 403
        with uw.Client(world.server.url, api_key=world.token["acme"]["viewer"],
                       reveal=True) as revealing, \
                pytest.raises(uw.ServiceError, match="may not reveal sensitive fields"):
            revealing.events(run_id)


def test_a_server_that_settles_only_signed_refuses_as_a_database_client(world: World) -> None:
    run_id = world.start()
    strict = create_app(uw.Client(world.store, clock=world.clock), signed_resolutions=True)
    with ServerThread(strict) as server, \
            uw.Client(server.url, api_key=world.token["acme"]["operator"]) as remote:
        for settle in (lambda c: c.resume(run_id, by="ops", tenant_id="acme"),
                       lambda c: c.resolve(run_id, resolution="retry", by="ops",
                                           tenant_id="acme")):
            with pytest.raises(SignedResolutionRequired) as over_http:
                settle(remote)
            with pytest.raises(SignedResolutionRequired) as local:
                settle(uw.Client(world.store).signed_only())
            assert str(over_http.value) == str(local.value)
            assert (over_http.value.run_id, over_http.value.action) == \
                (local.value.run_id, local.value.action)
        assert remote.signed_resolutions


def test_a_server_that_is_down_gives_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with uw.Client(url, api_key="uwk_x") as down, \
            pytest.raises(uw.ServiceError, match=rf"cannot reach underway serve at "
                          rf"{url} \(ConnectError: .*\); is it running, and is the URL "
                          r"right\?") as failed:
        down.get_run("r")
    assert failed.value.status is None


def test_a_url_that_is_not_underway_serve_says_so(world: World, tmp_path: Path) -> None:
    with uw.Client(world.server.url + "/healthz", api_key=world.token["acme"]["admin"]) \
            as wrong, pytest.raises(uw.ServiceError, match=r"answered 404 to GET "
                                    r"/healthz/v1/whoami \(Not found\)"):
        wrong.list_runs()
    files = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler,
                                                          directory=str(tmp_path)))
    serving = threading.Thread(target=files.serve_forever, daemon=True)
    serving.start()
    try:
        with uw.Client(f"http://127.0.0.1:{files.server_port}", api_key="k") as other, \
                pytest.raises(uw.ServiceError, match="answered 404 to GET /v1/whoami, not "
                              "with a problem: is it underway serve"):
            other.list_runs()
    finally:
        files.shutdown()
        files.server_close()


def test_options_only_a_database_takes_are_named(world: World, sqlite_url: str) -> None:
    with pytest.raises(uw.ConfigurationError, match="needs api_key="):
        uw.Client(world.server.url)
    with pytest.raises(uw.ConfigurationError, match="api_key= goes with an http"):
        uw.Client(sqlite_url, api_key="k")
    with pytest.raises(uw.ConfigurationError, match="reveal= goes with an http"):
        uw.Client(sqlite_url, reveal=True)
    with uw.Client(sqlite_url) as local, \
            pytest.raises(uw.ConfigurationError, match="codec= is a database client's"):
        uw.Client(world.server.url, api_key="k", codec=local.codec)
    with client(world) as acme:
        with pytest.raises(uw.ConfigurationError, match="a start over HTTP takes no "
                           "run_id, principal: the API names the run"):
            acme.start("reminders", {}, run_id="mine", principal="alice")
        assert acme.list_runs().runs == []


def test_the_client_drives_a_real_underway_serve(sqlite_url: str) -> None:
    def cli(*args: str) -> str:
        done = subprocess.run([str(UNDERWAY), "--db", sqlite_url, *args],
                              capture_output=True, text=True, timeout=120, check=True)
        return done.stdout.strip()

    cli("db", "migrate")
    token = cli("apikeys", "new", "--tenant", "acme", "--role", "operator", "--name", "ops")
    with serve(sqlite_url, ready_within=60) as (url, _), \
            uw.Client(url, api_key=token) as remote:
        run_id, created = remote.start("anything", {"n": 1}, idempotency_key="k",
                                       labels={"team": "ops"})
        assert created and remote.start("anything", {"n": 2},
                                        idempotency_key="k") == (run_id, False)
        assert remote.get_run(run_id).tenant_id == "acme"
        assert remote.state(run_id).input == {"n": 1}
        assert remote.list_runs(labels={"team": "ops"}).runs[0].run_id == run_id
        assert remote.cancel(run_id, by="ops", reason="done with it")
    with uw.Client(sqlite_url) as local:
        assert local.state(run_id, tenant_id="acme").input == {"n": 1}
        assert [e.event.type for e in local.events(run_id, tenant_id="acme")] == ["RunStarted"]
