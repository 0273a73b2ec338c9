"""The console in a real headless Chromium (the system's, driven by Playwright): an approver
signs in, makes an Ed25519 key in the browser, an admin registers it, the approver approves
the held refund in the browser, and the run completes; the RFC 8785 (JCS) JSON the browser
signs is Python's byte for byte; forged decisions posted directly are refused with nothing
stored.

A screenshot of every page visited is saved under the test's directory, or under
``UNDERWAY_SCREENSHOTS`` when set (``scripts/console-screenshots`` writes docs/img)."""

from __future__ import annotations

import base64
import json
import os
import random
import re
import struct
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from fakes.service_world import World
from underway.guard.approvals import (
    ApproverRecord,
    SignedDecision,
    sign_decision,
    verify_decision,
)
from underway.guard.approvals.decision import DOMAIN, ApprovalCheck
from underway.guard.approvals.keys import decode_public_key

CHROMIUM = os.environ.get("UNDERWAY_CHROMIUM", "/usr/bin/chromium")
T = TypeVar("T")
WAIT = 15_000
"""How long (ms) a condition may take to show on a page before the test fails."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the module (the system's: browsers are never downloaded)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: run scripts/ensure-chromium "
                    "(make test does)", pytrace=False)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where this test's screenshots go."""
    target = Path(os.environ.get("UNDERWAY_SCREENSHOTS") or tmp_path / "screenshots")
    target.mkdir(parents=True, exist_ok=True)
    return target


@pytest.fixture
def sqlite_world(sqlite_url: str) -> Iterator[World]:
    w = World(sqlite_url)
    yield w
    w.close()


def shoot(page: Page, shots: Path, name: str) -> None:
    page.screenshot(path=str(shots / f"console-{name}.png"), full_page=True)


def context_for(browser: Browser, world: World) -> BrowserContext:
    """A fresh browser profile (its own cookies and IndexedDB) on the world's server."""
    return browser.new_context(base_url=world.server.url,
                               viewport={"width": 1360, "height": 900})


def sign_in(page: Page, world: World, role: str, shots: Path | None = None) -> None:
    page.goto("/login")
    if shots is not None:
        shoot(page, shots, "login")
    page.fill("#token", world.token["acme"][role])
    page.click("main button[type=submit]")
    expect(page).to_have_url(re.compile(r"/runs$"))


def generate_key(page: Page, approver_id: str) -> str:
    """Make the signing key on the approvals page; its public key as shown."""
    page.goto("/approvals")
    expect(page.locator("#key-status")).to_contain_text("No signing key", timeout=WAIT)
    page.fill("#key-approver", approver_id)
    page.click("#key-new button[type=submit]")
    expect(page.locator("#key-status")).to_contain_text("not registered yet", timeout=WAIT)
    public_key = page.locator("#key-public").inner_text().strip()
    assert len(base64.b64decode(public_key, validate=True)) == 32
    expect(page.locator("#key-command")).to_have_text(
        f"underway approvers add {approver_id} --public-key {public_key} --role ROLE "
        "--tenant acme")
    return public_key


def aside(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on another thread: Playwright's sync API keeps an event loop in this
    one, and the world's worker runs its own (``asyncio.run``)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result()


def start(world: World, invoice: str) -> str:
    return aside(world.start, "refunds", invoice)


def drive(world: World) -> None:
    aside(world.drive)


def events(world: World, run_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = world.call("GET", f"/v1/runs/{run_id}/events").json()
    return found


# -- the whole flow ------------------------------------------------------------------------
def test_an_approver_signs_in_the_browser_and_the_held_refund_runs(
        browser: Browser, world: World, shots: Path) -> None:
    refund = start(world, "INV-2")
    [pending] = world.client_pending(refund)
    approver = context_for(browser, world)
    page = approver.new_page()
    try:
        sign_in(page, world, "approver", shots)
        expect(page.locator("#runs")).to_contain_text(refund)
        shoot(page, shots, "runs")

        # The run's timeline: held for approval, with the request's event in it.
        page.goto(f"/runs/{refund}")
        expect(page.locator("#run-status")).to_have_text("waiting")
        expect(page.locator("#timeline")).to_contain_text("ApprovalRequested")

        public_key = generate_key(page, "alice")
        page.goto(f"/approvals/{refund}")
        expect(page.locator("#key-status")).to_contain_text("not registered yet")
        expect(page.locator("#approve")).to_be_disabled()

        # An admin, in another browser, registers the key the approver sends them (the
        # panel's link fills in the form).
        link = page.locator("#key-register-link").get_attribute("href")
        assert link is not None
        admin = context_for(browser, world)
        admin_page = admin.new_page()
        try:
            sign_in(admin_page, world, "admin")
            admin_page.goto(link)
            expect(admin_page.locator("#approver_id")).to_have_value("alice")
            expect(admin_page.locator("#public_key")).to_have_value(public_key)
            admin_page.fill("#roles", "finance")
            admin_page.click("#register-form button[type=submit]")
            expect(admin_page.locator("#registered")).to_contain_text("alice")
            expect(admin_page.locator("#approvers tr[data-approver=alice]")).to_contain_text(
                "finance")
            shoot(admin_page, shots, "approvers")
            admin_page.goto(f"/approvals/{refund}")
            expect(admin_page.locator("#read-only")).to_contain_text("may not decide")
            expect(admin_page.locator("#approve")).to_have_count(0)
        finally:
            admin.close()

        page.goto("/approvals")
        row = page.locator(f"#requests tr[data-run='{refund}']")
        expect(row).to_contain_text("refund")
        expect(row).to_contain_text("finance")
        expect(row.locator(".time-left")).to_have_text(re.compile(r"^in (59|60)m$"))
        expect(page.locator("#key-status")).to_contain_text("registered, roles finance",
                                                            timeout=WAIT)
        shoot(page, shots, "approvals")

        page.click(f"#requests tr[data-run='{refund}'] a >> nth=0")
        expect(page).to_have_url(re.compile(f"/approvals/{refund}$"))
        expect(page.locator("#tool")).to_have_text("refund")
        expect(page.locator("#args-hash")).to_have_text(pending["args_hash"])
        assert json.loads(page.locator("#args").inner_text()) == {"invoice": "INV-2",
                                                                 "amount": 5}
        assert json.loads(page.locator("#evidence").inner_text()) == {"invoice": "INV-2",
                                                                     "paid_twice": True}
        expect(page.locator("#risks li")).to_have_text(["money leaves the company",
                                                        "a refund cannot be undone"])
        expect(page.locator("#policy-rule")).to_contain_text("refunds")
        expect(page.locator("#required-role")).to_have_text("finance")
        expect(page.locator("#time-left")).to_have_text(re.compile(r"^in (59|60)m$"))
        expect(page.locator("#approve")).to_be_enabled(timeout=WAIT)
        comment = "checked against INV-2 — « paid twice » ✓"
        page.fill("#comment", comment)
        page.locator(".signed-bytes summary").click()
        expect(page.locator("#signed-preview")).to_contain_text('"decision":"approve"')
        shoot(page, shots, "approval")

        page.click("#approve")
        expect(page.locator("#decision-result")).to_contain_text(
            "Approval signed by alice and sent", timeout=WAIT)
        assert len(world.store.pending_signals("acme", refund)) == 1
        # The run's page follows the run live: the worker moves it, the page's stream adds
        # the events and the status without a reload.
        page.goto(f"/runs/{refund}")
        expect(page.locator("#live")).to_be_visible()
        before = page.locator("#timeline > li").count()
        drive(world)
        expect(page.locator("#run-status")).to_have_text("completed", timeout=WAIT)
        expect(page.locator("#timeline")).to_contain_text("RunCompleted", timeout=WAIT)
        assert page.locator("#timeline > li").count() > before
        # Picking an event shows the state after it and its patch, fetched by the script.
        granted_seq = page.locator("#timeline > li", has_text="ApprovalGranted") \
            .get_attribute("data-seq")
        page.locator(f"#e-{granted_seq} a[href*='at=']").first.click()
        expect(page.locator("#state-title")).to_contain_text(
            f"State after event {granted_seq}", timeout=WAIT)
        expect(page.locator("#state-json")).not_to_be_empty()
        shoot(page, shots, "run")

        page.goto("/runs?status=completed")
        expect(page.locator("#runs")).to_contain_text(refund)
        page.goto("/approvals")
        expect(page.locator("#requests")).to_contain_text("No run waits for a person")
        page.click("header nav a:has-text('Metrics')")
        expect(page).to_have_url(re.compile("/charts$"))
        expect(page.locator("main")).to_contain_text("Runs created per day")
        shoot(page, shots, "charts")
    finally:
        approver.close()

    # The journal holds the decision exactly as the browser signed it, and it verifies.
    log = events(world, refund)
    [granted] = [e for e in log if e["type"] == "ApprovalGranted"]
    decision = SignedDecision.model_validate(granted["data"]["decision"])
    assert (decision.approver_id, decision.comment) == ("alice", comment)
    assert decision.args_hash == pending["args_hash"]
    check = ApprovalCheck(request_id=pending["request_id"], run_id=refund, tenant_id="acme",
                          tool="refund", args_hash=pending["args_hash"],
                          required_role="finance", expires_at=pending["expires_at"])
    assert verify_decision(decision, check=check, approver=world.store.get_approver(
        "acme", "alice"), now=world.clock.now()) is None
    assert log[-1]["type"] == "RunCompleted"
    assert world.call("GET", f"/v1/runs/{refund}").json()["status"] == "completed"


# -- forgeries ---------------------------------------------------------------------------
SIGN_IN_PAGE = """async ([fields, tenant]) => {
  const { signedText } = await import("/static/signing.js");
  const db = await new Promise((ok, no) => {
    const r = indexedDB.open("underway-console", 1);
    r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error);
  });
  const record = await new Promise((ok, no) => {
    const r = db.transaction("signing-keys").objectStore("signing-keys").get(tenant);
    r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error);
  });
  db.close();
  const bytes = new TextEncoder().encode(signedText(fields));
  const sig = new Uint8Array(await crypto.subtle.sign("Ed25519", record.privateKey, bytes));
  let text = ""; for (const b of sig) text += String.fromCharCode(b);
  let exported = null;
  try { await crypto.subtle.exportKey("pkcs8", record.privateKey); exported = "exported"; }
  catch (e) { exported = e.name; }
  return { signature: btoa(text), exported };
}"""

POST_FROM_PAGE = """async ([runId, body, withCsrf]) => {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const headers = { "Content-Type": "application/json" };
  if (withCsrf) headers["X-CSRF-Token"] = csrf;
  const r = await fetch(`/approvals/${runId}/decision`, { method: "POST", headers, body });
  return { status: r.status, text: await r.text() };
}"""


def test_forged_decisions_are_refused_by_the_console_and_the_api(
        browser: Browser, sqlite_world: World) -> None:
    world = sqlite_world
    refund = start(world, "INV-2")
    other = start(world, "INV-3")
    [pending] = world.client_pending(refund)
    [pending_other] = world.client_pending(other)
    context = context_for(browser, world)
    page = context.new_page()
    try:
        sign_in(page, world, "approver")
        public_key = generate_key(page, "alice")
        r = world.call("POST", "/v1/approvers", json={"approver_id": "alice",
                                                     "public_key": public_key,
                                                     "roles": ["finance"]})
        assert r.status_code == 201, r.text
        page.goto(f"/approvals/{refund}")
        expect(page.locator("#approve")).to_be_enabled(timeout=WAIT)

        def fields(p: dict[str, Any] = pending, **changes: Any) -> dict[str, Any]:
            base = {"request_id": p["request_id"], "run_id": p["run_id"], "tenant_id": "acme",
                    "tool": p["tool"], "args_hash": p["args_hash"], "decision": "approve",
                    "expires_at": p["expires_at"], "nonce": os.urandom(16).hex(),
                    "approver_id": "alice", "comment": "", "answer": None}
            return {**base, **changes}

        def browser_signed(unsigned: dict[str, Any]) -> dict[str, Any]:
            out = page.evaluate(SIGN_IN_PAGE, [unsigned, "acme"])
            # The private key cannot be read out of the browser, not even by the page.
            assert out["exported"] == "InvalidAccessError"
            return {**unsigned, "canon": "jcs", "signature": out["signature"]}

        def python_signed(key: Ed25519PrivateKey, unsigned: dict[str, Any]) -> dict[str, Any]:
            d = {k: v for k, v in unsigned.items() if k != "signature"}
            return sign_decision(key, **d).model_dump(mode="json")

        genuine = browser_signed(fields())
        stranger = Ed25519PrivateKey.generate()
        forgeries = {
            "altered after signing": {**genuine, "comment": "approved by the CFO"},
            "for other arguments": browser_signed(fields(args_hash="0" * 64)),
            "for another request": browser_signed(fields(request_id="apr:other")),
            "for another run": browser_signed(fields(pending_other)),
            "on another run's request, named for this run":
                browser_signed(fields(pending_other, run_id=refund)),
            "by an unregistered key in alice's name": python_signed(stranger, fields()),
            "by an unregistered approver": python_signed(stranger,
                                                         fields(approver_id="mallory")),
            "an answer instead of an approval": browser_signed(fields(decision="answer",
                                                                      answer="yes")),
            "outliving the request": browser_signed(
                fields(expires_at=pending["expires_at"] + 60)),
            "garbage": {"decision": "approve"},
        }
        for what, forged in forgeries.items():
            body = json.dumps(forged)
            console = page.evaluate(POST_FROM_PAGE, [refund, body, True])
            api = world.call("POST", f"/v1/approvals/{refund}/decision", role="approver",
                             content=body, headers={"Content-Type": "application/json"})
            assert console["status"] == 422, (what, console)
            assert api.status_code == 422, (what, api.text)
            assert world.store.pending_signals("acme", refund) == [], what
        assert world.store.pending_signals("acme", other) == []

        # The genuine decision without the session's CSRF token, or from a key that may
        # not decide, is refused too.
        no_csrf = page.evaluate(POST_FROM_PAGE, [refund, json.dumps(genuine), False])
        assert no_csrf["status"] == 403
        for role in ("viewer", "operator", "admin"):
            other_page = context_for(browser, world)
            try:
                p = other_page.new_page()
                sign_in(p, world, role)
                p.goto(f"/approvals/{refund}")
                expect(p.locator("#read-only")).to_be_visible()
                refused = p.evaluate(POST_FROM_PAGE, [refund, json.dumps(genuine), True])
                assert refused["status"] == 403, (role, refused)
            finally:
                other_page.close()
        assert world.store.pending_signals("acme", refund) == []
        drive(world)
        assert world.call("GET", f"/v1/runs/{refund}").json()["status"] == "waiting"
        assert not [e for e in events(world, refund) if e["type"].startswith("Approval")
                    and e["type"] != "ApprovalRequested"]

        # What the forgers could not do, the key's owner does, once.
        accepted = page.evaluate(POST_FROM_PAGE, [refund, json.dumps(genuine), True])
        assert accepted["status"] == 202 and json.loads(accepted["text"])["delivered"]
        drive(world)
        assert world.call("GET", f"/v1/runs/{refund}").json()["status"] == "completed"
        replay = world.call("POST", f"/v1/approvals/{refund}/decision", role="approver",
                            json=genuine)
        assert replay.json().get("delivered") is not True
    finally:
        context.close()


def test_only_a_registered_key_in_this_browser_signs_a_rejection_then_a_resumption(
        browser: Browser, sqlite_world: World) -> None:
    world = sqlite_world
    refund = start(world, "INV-2")
    context = context_for(browser, world)
    page = context.new_page()
    try:
        sign_in(page, world, "approver")
        page.goto(f"/approvals/{refund}")
        expect(page.locator("#key-status")).to_contain_text("No signing key", timeout=WAIT)
        expect(page.locator("#decide-state")).to_contain_text("Generate your signing key")
        expect(page.locator("#approve")).to_be_disabled()
        expect(page.locator("#reject")).to_be_disabled()
        public_key = generate_key(page, "bob")
        # Registered with another key: the page says so and keeps the buttons off.
        world.approver("acme", "bob", "finance")
        page.goto(f"/approvals/{refund}")
        expect(page.locator("#key-status")).to_contain_text("another public key", timeout=WAIT)
        expect(page.locator("#approve")).to_be_disabled()
        world.call("POST", "/v1/approvers", json={"approver_id": "bob",
                                                 "public_key": public_key,
                                                 "roles": ["finance"]})
        page.reload()
        expect(page.locator("#reject")).to_be_enabled(timeout=WAIT)
        page.fill("#comment", "customer was already refunded")
        page.click("#reject")
        expect(page.locator("#decision-result")).to_contain_text("Rejection signed by bob")
        drive(world)
        rejected = [e for e in events(world, refund) if e["type"] == "ApprovalRejected"]
        assert rejected and rejected[0]["data"]["approver_id"] == "bob"

        # The refused refund left the run dead: a signed resolution resumes it, and the
        # call asks for a new approval.
        page.goto(f"/approvals/{refund}")
        expect(page.locator("h1")).to_contain_text("Resume dead run")
        expect(page.locator("#time-left")).to_have_text("no expiry")
        expect(page.locator("#resolve")).to_be_enabled(timeout=WAIT)
        page.click("#resolve")
        expect(page.locator("#decision-result")).to_contain_text("Resolution signed by bob")
        drive(world)
        resumed = [e for e in events(world, refund) if e["type"] == "RunResumed"]
        assert resumed and resumed[0]["data"]["by"] == "bob"
        assert resumed[0]["data"]["decision"]["answer"] == {"resolution": "resume",
                                                            "step": None}
        [again] = world.client_pending(refund)
        assert again["kind"] == "approval" and again["request_id"].startswith("apr2:")
        # Forgetting the key takes it out of this browser.
        page.goto("/approvals")
        page.on("dialog", lambda d: d.accept())
        page.click("#key-forget")
        expect(page.locator("#key-status")).to_contain_text("No signing key")
        page.reload()
        expect(page.locator("#key-status")).to_contain_text("No signing key", timeout=WAIT)
    finally:
        context.close()


# -- the browser's JCS is RFC 8785's, as Python's rfc8785 writes it ------------------------
def _tricky_floats(rng: random.Random) -> list[float]:
    found = [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(5000)]
    found = [f for f in found if f == f and abs(f) != float("inf")]
    found += [1700000000.0, 1767225600.123456, 0.1, 0.30000000000000004, 1e16, 1e15,
              9999999999999998.0, 1e-5, 1e-4, 0.0001234, 5e-324, 2.2250738585072014e-308,
              1.7976931348623157e308, -0.0, 0.0, 1e22, 1e21, 123456789012345680.0, 2.5,
              100.0, -1.5, 1e100, 1.5e-7, 9.999999999999997e-7, 333333333.33333325,
              1424953923781206.2, 295147905179352830000.0]
    for e in range(-25, 25):
        found += [10.0 ** e, 1.5 * 10.0 ** e, rng.random() * 10.0 ** e]
    return found


def _tricky_payloads() -> list[Any]:
    rng = random.Random(20261201)
    return [
        _tricky_floats(rng),
        {"\U0001F600": 1, "\uffff": 2, "\ue000": 3, "\ud7ff": 4, "a": 5, "": 6, "B": 7,
         "\ufb33": 8, "\u20ac": 9, "\r": 10, "\u0080": 11,
         "__proto__": {"x": [1, 2 ** 53 - 1, -(2 ** 53 - 1), -0, 0]},
         "é": "é\u2028\u2029\x7f\x00\x1f\"\\/\b\f\n\r\t 😀 ﷽ 𝄞 </script>"},
        [[], {}, [[]], [{}], True, False, None, 0, "", -1.0, 3, 1e2, {"z": {"y": {"x": []}}}],
        "".join(chr(c) for c in range(0xD800)),
        {"request_id": "apr:r:0:pay:0", "run_id": "r", "tenant_id": "acme", "tool": "refund",
         "args_hash": "ab" * 32, "decision": "approve", "expires_at": 1767225600.0,
         "nonce": "00" * 16, "approver_id": "alice", "comment": "ok ✓", "answer": None,
         "canon": "jcs"},
        {"resolution": "succeeded", "result": {"receipt": "r-1", "amount": 12.5, "n": 10}},
        "plain text",
        9007199254740991,
        -0.0,
    ]


def test_the_browsers_jcs_is_rfc8785s_byte_for_byte(
        browser: Browser, sqlite_world: World) -> None:
    rng = random.Random(7)
    texts = []
    for payload in _tricky_payloads():
        texts.append(json.dumps(payload, ensure_ascii=True))
        texts.append(json.dumps(payload, ensure_ascii=False, indent=rng.choice([None, 2])))
    expected = [rfc8785.dumps(json.loads(t)) for t in texts]
    context = context_for(browser, sqlite_world)
    page = context.new_page()
    try:
        page.goto("/login")
        got = page.evaluate("""async (texts) => {
          const { jcs } = await import("/static/jcs.js");
          const enc = new TextEncoder();
          return texts.map((t) => Array.from(enc.encode(jcs(JSON.parse(t)))));
        }""", texts)
        for text, want, have in zip(texts, expected, got, strict=True):
            assert bytes(have) == want, text[:200]

        # A whole expiry is written without a fraction, as JCS writes every double.
        assert page.evaluate("""async () => {
          const { jcs } = await import("/static/jcs.js");
          return [jcs(1767225600), jcs(JSON.parse("1767225600.0")), jcs(JSON.parse("1E2")),
                  jcs(-0)];
        }""") == ["1767225600", "1767225600", "100", "0"]

        # What JCS cannot hold is refused, and so is a whole number past 2^53 before it is
        # signed: the run would read it as an integer that JCS cannot sign exactly.
        refused = page.evaluate("""async () => {
          const { jcs } = await import("/static/jcs.js");
          const { signedText } = await import("/static/signing.js");
          const out = [];
          for (const bad of [() => jcs("\\ud800"), () => jcs({ "\\udc00": 1 }),
                             () => jcs(NaN), () => jcs(Infinity), () => jcs({ f: () => 1 }),
                             () => jcs(undefined), () => signedText({ answer: 2 ** 53 }),
                             () => signedText({ answer: [JSON.parse("12345678901234567890")] }),
                             () => signedText({ answer: { n: -1e20 } })]) {
            try { bad(); out.push("accepted"); } catch (e) { out.push(e.name); }
          }
          out.push(signedText({ answer: [2 ** 53 - 1, -1e300, 1e21] }));
          return out;
        }""")
        assert refused[:-1] == ["RangeError"] * 4 + ["TypeError"] * 2 + ["RangeError"] * 3
        assert refused[-1] == ('underway-approval-v2\n'
                               '{"answer":[9007199254740991,-1e+300,1e+21],"canon":"jcs"}')
    finally:
        context.close()


def test_a_decision_signed_by_the_browser_verifies_in_python(
        browser: Browser, sqlite_world: World) -> None:
    """The signature scheme end to end, without a run: WebCrypto's Ed25519 signature over
    the console's signed text verifies with ``cryptography`` over Python's bytes."""
    context = context_for(browser, sqlite_world)
    page = context.new_page()
    try:
        page.goto("/login")
        out = page.evaluate("""async () => {
          const { signedText, signDecision } = await import("/static/signing.js");
          const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, false,
                                                       ["sign", "verify"]);
          const raw = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
          const fields = { request_id: "q-7", run_id: "r-1", tenant_id: "acme", tool: "",
            args_hash: "", decision: "answer", expires_at: 1767225600.123456,
            nonce: "ff".repeat(16), approver_id: "carol", comment: "ünïcode \\u2028 ok 😀",
            answer: JSON.parse('{"warehouse": "B", "qty": 3, "w": 2.0, "tiny": 1e-7, ' +
                               '"huge": 1e300, "safe": 9007199254740991, ' +
                               '"\\ufb33": {"\\ud83d\\ude00": [0.1, 1e21]}}') };
          const { text, body } = await signDecision({ privateKey: pair.privateKey }, fields);
          const b64 = (u) => btoa(String.fromCharCode(...u));
          return { publicKey: b64(raw), text, body, again: signedText(fields),
                   extractable: pair.privateKey.extractable, isSecure: window.isSecureContext };
        }""")
    finally:
        context.close()
    assert out["isSecure"] is True and out["extractable"] is False
    decision = SignedDecision.model_validate_json(out["body"])
    assert decision.canon == "jcs"
    assert decision.answer == {"warehouse": "B", "qty": 3, "w": 2, "tiny": 1e-7, "huge": 1e300,
                               "safe": 9007199254740991, "\ufb33": {"😀": [0.1, 1e21]}}
    # The text the page showed is what Python rebuilds, and the signature holds over it.
    assert out["text"] == out["again"]
    assert out["text"].encode("utf-8") == decision.signed_bytes()
    assert decision.signed_bytes().startswith(DOMAIN)
    decode_public_key(out["publicKey"]).verify(base64.b64decode(decision.signature),
                                               decision.signed_bytes())
    check = ApprovalCheck(request_id="q-7", run_id="r-1", tenant_id="acme", tool="",
                          args_hash="", required_role=None, expires_at=1767225600.123456)
    carol = ApproverRecord("acme", "carol", out["publicKey"], (), 0.0)
    assert verify_decision(decision, check=check, approver=carol, now=1_700_000_000.0) is None
    tampered = decision.model_copy(update={"comment": "ünïcode ok"})
    assert verify_decision(tampered, check=check, approver=carol,
                           now=1_700_000_000.0) == "bad_signature"
