"""Redaction in the console: the KYC runs of :mod:`fakes.sensitive_flows` (a PAN and a phone
number in sensitive fields, an API token typed as a secret). No canary is in any page, any
state after an event, the page's state JSON or its live tail for a session that may not
see it; an admin who ticks "show sensitive fields" sees them (never the secret), an
approver sees the exact arguments of the request it decides; each read is in the access
log with the page's purpose."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.console_browser import sign_in
from fakes.sensitive_flows import PAN, PHONE, SENSITIVE, TOKEN, leaks
from fakes.sensitive_world import KycRuns, kyc_runs, read_stream
from fakes.service_world import World


@pytest.fixture
def kyc(world: World) -> Iterator[KycRuns]:
    runs = kyc_runs(world)
    yield runs
    runs.close()


def pages(kyc: KycRuns, query: str = "") -> list[str]:
    """Every console page that shows the runs' data (``query`` added to each)."""
    found = ["/runs", "/approvals", f"/approvals/{kyc.waiting}", f"/approvals/{kyc.failed}"]
    for run_id in (kyc.waiting, kyc.failed):
        row = kyc.world.store.get_run("acme", run_id)
        assert row is not None
        found.append(f"/runs/{run_id}")
        for seq in range(1, row.last_seq + 1):
            found += [f"/runs/{run_id}?at={seq}", f"/runs/{run_id}/state?at={seq}"]
    sep = {True: "&", False: "?"}
    return [p + sep["?" in p] + query if query else p for p in found]


@pytest.mark.parametrize("role", ["viewer", "operator", "approver", "admin"])
def test_no_page_shows_a_canary_to_a_session_that_did_not_reveal(kyc: KycRuns,
                                                                 role: str) -> None:
    with sign_in(kyc.world, role=role) as browser:
        for path in pages(kyc):
            r = browser.get(path)
            assert r.status_code == 200, (path, r.text[:300])
            assert leaks(r.text) == [], (role, path)
        row = kyc.world.store.get_run("acme", kyc.waiting)
        assert row is not None
        tail = read_stream(browser, f"/runs/{kyc.waiting}/events/stream?after=0",
                           last_seq=row.last_seq)
        assert f"id: {row.last_seq}" in tail and leaks(tail) == []
        page = browser.get(f"/runs/{kyc.waiting}").text
    assert "[redacted]" in page and 'id="reading"' in page
    assert ('id="reveal"' in page) == (role == "admin")


def test_an_admin_who_reveals_sees_the_sensitive_fields_never_the_secret(kyc: KycRuns) -> None:
    with sign_in(kyc.world, role="admin") as browser:
        shown = ""
        for path in pages(kyc, "reveal=1&purpose=audit"):
            r = browser.get(path)
            assert r.status_code == 200, path
            assert TOKEN not in r.text, path
            shown += r.text
        assert set(leaks(shown)) == set(SENSITIVE)
        page = browser.get(f"/runs/{kyc.waiting}?reveal=1&purpose=audit").text
        assert PHONE in page and 'checked' in page
        assert f"/runs/{kyc.waiting}/state?purpose=audit&amp;reveal=1" in page
        assert "&amp;purpose=audit&amp;reveal=1#state" in page
        row = kyc.world.store.get_run("acme", kyc.waiting)
        assert row is not None
        tail = read_stream(browser, f"/runs/{kyc.waiting}/events/stream?reveal=1",
                           last_seq=row.last_seq)
        assert PAN in tail and PHONE in tail and TOKEN not in tail
    entries = kyc.world.store.list_access("acme", who="acme-admin", purpose="audit",
                                          limit=10_000)
    assert entries and all(e.revealed for e in entries)


def test_an_approver_reveals_only_the_request_it_decides(kyc: KycRuns) -> None:
    with sign_in(kyc.world, role="approver") as browser:
        request = browser.get(f"/approvals/{kyc.waiting}")
        assert 'id="args-redacted"' in request.text and 'id="reveal"' in request.text
        shown = browser.get(f"/approvals/{kyc.waiting}?reveal=1&purpose=deciding")
        assert shown.status_code == 200 and PHONE in shown.text and PAN in shown.text
        assert TOKEN not in shown.text
        for path in (f"/runs/{kyc.waiting}?reveal=1", "/approvals?reveal=1",
                     f"/runs/{kyc.waiting}/state?at=3&reveal=1"):
            r = browser.get(path)
            assert r.status_code == 403 and leaks(r.text) == [], path
    [entry] = kyc.world.store.list_access("acme", who="acme-approver", purpose="deciding")
    assert (entry.run_id, entry.revealed, entry.endpoint) == (
        kyc.waiting, True, "GET /approvals/{run_id}")


def test_a_bad_purpose_is_a_page_naming_it(kyc: KycRuns) -> None:
    with sign_in(kyc.world, role="viewer") as browser:
        before = len(kyc.world.store.list_access("acme", limit=1000))
        r = browser.get(f"/runs/{kyc.waiting}", params={"purpose": "x\ny"})
        assert r.status_code == 422 and "control characters" in r.text
        assert len(kyc.world.store.list_access("acme", limit=1000)) == before
        browser.get(f"/runs/{kyc.waiting}", params={"purpose": "support"})
    [entry] = kyc.world.store.list_access("acme", purpose="support")
    assert (entry.key_name, entry.endpoint) == ("acme-viewer", "GET /runs/{run_id}")
