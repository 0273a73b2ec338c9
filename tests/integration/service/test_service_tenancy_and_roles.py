"""Tenant isolation and roles, table-driven over every endpoint of the app (the list comes
from the app's routes): a key of one tenant never reads or changes another tenant's data,
whatever its role — another tenant's run, key, approver or source is a 404 like a missing
one — and each role gets exactly the endpoints the OpenAPI document says it may call
(403 otherwise)."""

from __future__ import annotations

from typing import Any

from fakes.route_table import CONSENT_REFERENCE, SAMPLES, SUBJECT, Acme, acme, endpoints
from fakes.service_world import World
from underway.apikeys import ROLES


def test_the_sample_table_covers_every_endpoint(world: World) -> None:
    assert {(e.method, e.path) for e in endpoints(world)} == set(SAMPLES)


def snapshot(world: World, tenant: str) -> dict[str, Any]:
    s = world.store
    runs = s.list_runs(tenant, limit=1000)
    return {
        "runs": sorted((r.run_id, r.status, r.last_seq) for r in runs),
        "signals": sorted((r.run_id, p.signal_id) for r in runs
                          for p in s.pending_signals(tenant, r.run_id)),
        "keys": [(k.key_id, k.revoked_at) for k in s.list_api_keys(tenant)],
        "approvers": [(a.approver_id, a.public_key, a.revoked_at)
                      for a in s.list_approvers(tenant)],
        "secrets": [(x.source, x.secret) for x in s.list_intake_secrets(tenant)],
        "access": [(e.seq, e.run_id) for e in s.list_access(tenant, limit=1000)],
        "intake": s.get_intake(tenant, "evt-77"),
        "consents": s.consent_history(tenant, SUBJECT),
        "erasures": s.list_erasures(tenant),
    }


def test_no_key_of_another_tenant_reads_or_changes_anything(world: World) -> None:
    fx = acme(world)
    secrets = [k.token_hash for k in world.store.list_api_keys("acme")]
    acme_ids = [fx.run, fx.refund, fx.done, fx.spare_key, "alice", "bob", "billing",
                *(k.key_id for k in world.store.list_api_keys("acme")), "acme",
                CONSENT_REFERENCE]
    before = snapshot(world, "acme")
    checked = 0
    for e in endpoints(world):
        for role in ROLES:
            path, kwargs = SAMPLES[(e.method, e.path)](world, fx)
            r = world.call(e.method, path, tenant="globex", role=role, **kwargs)
            where = f"{e.method} {e.path} as a globex {role}"
            if role not in e.roles:
                assert r.status_code == 403, where
                continue
            assert r.status_code < 500, f"{where}: {r.text}"
            if "{" in e.path and e.method != "PUT":  # (a PUT creates in the key's tenant)
                assert r.status_code == 404, f"{where}: {r.status_code} {r.text}"
                assert r.json()["type"] == "urn:underway:problem:not-found"
            leaked = [x for x in acme_ids + secrets if x in r.text]
            assert leaked == [], f"{where} shows {leaked}"
            checked += 1
    assert checked >= len(SAMPLES)
    assert snapshot(world, "acme") == before


def test_each_role_gets_exactly_the_endpoints_documented_for_it(world: World) -> None:
    fx: Acme = acme(world)
    for e in endpoints(world):
        assert e.roles, f"{e.method} {e.path} names no role"
        for role in ROLES:
            path, kwargs = SAMPLES[(e.method, e.path)](world, fx)
            r = world.call(e.method, path, tenant="acme", role=role, **kwargs)
            where = f"{e.method} {e.path} as {role}: {r.status_code} {r.text[:200]}"
            if role in e.roles:
                assert r.status_code not in (401, 403) and r.status_code < 500, where
            else:
                assert r.status_code == 403, where
                assert r.json()["type"] == "urn:underway:problem:forbidden"


def test_a_request_without_a_valid_key_is_refused_everywhere(world: World) -> None:
    fx = acme(world)
    revoked = world.token["acme"]["viewer"]
    key_id = revoked[4:20]
    assert world.store.revoke_api_key("acme", key_id, at=world.clock.now())
    for e in endpoints(world):
        path, kwargs = SAMPLES[(e.method, e.path)](world, fx)
        headers = kwargs.pop("headers", {})
        for auth in ({}, {"Authorization": "Bearer nonsense"},
                     {"Authorization": f"Bearer {revoked}"},
                     {"Authorization": f"Bearer {world.token['acme']['admin']}x"}):
            r = world.http.request(e.method, path, headers={**headers, **auth}, **kwargs)
            assert r.status_code == 401, f"{e.method} {e.path} with {auth}: {r.text}"
            assert r.headers["content-type"] == "application/problem+json"
