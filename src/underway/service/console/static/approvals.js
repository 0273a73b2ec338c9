// The approvals pages: time left, the approver's signing key, and decisions signed here.
//
// The key is an Ed25519 pair made with WebCrypto as non-extractable: the private half can
// sign in this browser and can never be read out, not by this script, not by the server.
// The pair is kept in IndexedDB (one per tenant), its public half shown as base64 of the
// raw 32 bytes, the form `underway approvers add --public-key` takes.
//
// A decision is signed by signing.js (the one signing code of the single and the bulk
// decisions) and posted with the session's CSRF token; the server checks it and hands it
// to the run, which verifies it again. Bulk decisions: bulk_decide.js.
import { BulkDecider } from "./bulk_decide.js";
import { base64, csrf, signDecision, signedText } from "./signing.js";

const DB_NAME = "underway-console";
const DB_STORE = "signing-keys";
const POLL_MS = 2000;
const POLL_FOR_MS = 10 * 60 * 1000;
const FINISHED = new Set(["completed", "failed", "cancelled", "dead"]);

const $ = (id) => document.getElementById(id);

function show(el, visible) {
  if (el) el.classList.toggle("hidden", !visible);
}

function randomHex(n) {
  const bytes = crypto.getRandomValues(new Uint8Array(n));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// -- time left -------------------------------------------------------------------------
export function timeLeft(at, now) {
  const left = at - now;
  const span = Math.abs(left);
  let text;
  if (span < 120) text = `${Math.round(span)}s`;
  else if (span < 2 * 3600) text = `${Math.round(span / 60)}m`;
  else if (span < 2 * 86400) text = `${(span / 3600).toFixed(1)}h`;
  else text = `${(span / 86400).toFixed(1)}d`;
  return left > 0 ? `in ${text}` : `expired ${text} ago`;
}

// The server's clock (data-now) moved on by this page's own monotonic clock: the run
// judges expiry by the server's time, not by this machine's.
function startCountdowns(onTick) {
  const cells = [...document.querySelectorAll("[data-expires-at]")];
  const started = performance.now();
  const tick = () => {
    const elapsed = (performance.now() - started) / 1000;
    let expired = false;
    for (const el of cells) {
      const now = Number(el.dataset.now) + elapsed;
      const at = Number(el.dataset.expiresAt);
      el.textContent = timeLeft(at, now);
      el.classList.toggle("expired", at <= now);
      expired = expired || at <= now;
    }
    onTick(expired);
  };
  tick();
  if (cells.length) setInterval(tick, 1000);
}

// -- the key in IndexedDB ---------------------------------------------------------------
function openDb() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(DB_STORE);
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

async function inStore(mode, act) {
  const db = await openDb();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(DB_STORE, mode);
      const req = act(tx.objectStore(DB_STORE));
      tx.oncomplete = () => resolve(req.result);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

const loadKey = (tenant) => inStore("readonly", (s) => s.get(tenant));
const saveKey = (tenant, record) => inStore("readwrite", (s) => s.put(record, tenant));
const forgetKey = (tenant) => inStore("readwrite", (s) => s.delete(tenant));

async function generateKey(approverId) {
  const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"]);
  // A public key is always exportable, whatever `extractable` says of the private one.
  const raw = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
  return {
    approverId,
    publicKey: base64(raw),
    privateKey: pair.privateKey,
    verifyKey: pair.publicKey,
    createdAt: new Date().toISOString(),
  };
}

async function registration(record) {
  const url = `/approvers/${encodeURIComponent(record.approverId)}/status`
    + `?public_key=${encodeURIComponent(record.publicKey)}`;
  const r = await fetch(url, { headers: { Accept: "application/json" } });
  if (!r.ok) return { status: "unknown", roles: [] };
  return r.json();
}

// -- the key panel -----------------------------------------------------------------------
class KeyPanel {
  constructor(panel, onChange) {
    this.panel = panel;
    this.tenant = panel.dataset.tenant;
    this.requiredRole = panel.dataset.requiredRole;
    this.onChange = onChange;
    this.record = null;
    this.status = "none";
    this.roles = [];
    $("key-new").addEventListener("submit", (e) => {
      e.preventDefault();
      this.create($("key-approver").value.trim());
    });
    $("key-forget").addEventListener("click", () => this.forget());
  }

  say(text, tone) {
    const el = $("key-status");
    el.textContent = text;
    el.dataset.tone = tone;
  }

  async load() {
    if (!window.isSecureContext || !crypto.subtle) {
      this.say("This page is not a secure context (https, or http on localhost): the browser "
        + "offers no signing keys here.", "bad");
      return;
    }
    try {
      this.record = (await loadKey(this.tenant)) ?? null;
    } catch (err) {
      this.say(`This browser's storage cannot keep a key: ${err}`, "bad");
      return;
    }
    await this.refresh();
  }

  async create(approverId) {
    if (!approverId || /\s/.test(approverId)) {
      this.say("An approver id is needed, without spaces.", "bad");
      return;
    }
    try {
      const record = await generateKey(approverId);
      await saveKey(this.tenant, record);
      this.record = record;
    } catch (err) {
      this.say(`This browser could not make an Ed25519 key: ${err}`, "bad");
      return;
    }
    await this.refresh();
  }

  async forget() {
    if (!window.confirm("Forget this key? Decisions can no longer be signed with it here; "
      + "its registration stays until an admin revokes it.")) return;
    await forgetKey(this.tenant);
    this.record = null;
    await this.refresh();
  }

  async refresh() {
    const r = this.record;
    show($("key-new"), !r);
    show($("key-some"), Boolean(r));
    if (!r) {
      this.status = "none";
      this.say("No signing key in this browser yet: generate one, then have an admin "
        + "register its public key.", "warn");
      this.onChange();
      return;
    }
    $("key-approver-id").textContent = r.approverId;
    $("key-public").textContent = r.publicKey;
    $("key-created").textContent = r.createdAt;
    const role = this.requiredRole || "ROLE";
    $("key-command").textContent = `underway approvers add ${r.approverId} --public-key `
      + `${r.publicKey} --role ${role} --tenant ${this.tenant}`;
    $("key-register-link").href = `/approvers?approver_id=${encodeURIComponent(r.approverId)}`
      + `&public_key=${encodeURIComponent(r.publicKey)}`;
    const found = await registration(r);
    this.status = found.status;
    this.roles = found.roles ?? [];
    const who = `approver ${r.approverId}`;
    const texts = {
      registered: [`Key of ${who}: registered, roles ${this.roles.join(", ")}.`, "ok"],
      unregistered: [`Key of ${who}: not registered yet. An admin registers its public key `
        + "(below) with your roles.", "warn"],
      other_key: [`${who} is registered with another public key: an admin must register `
        + "this one (it replaces the other).", "warn"],
      revoked: [`${who} has been revoked: an admin registers this key again to lift it.`,
        "bad"],
    };
    const [text, tone] = texts[this.status] ?? ["Could not ask whether this key is "
      + "registered.", "warn"];
    this.say(text, tone);
    if (this.status === "registered" && this.requiredRole
      && !this.roles.includes(this.requiredRole)) {
      this.say(`${text} This request needs role ${this.requiredRole}, which it lacks.`, "warn");
    }
    this.onChange();
  }

  get ready() {
    return this.record !== null && this.status === "registered";
  }
}

// -- signing and sending a decision -------------------------------------------------------
class Decider {
  constructor(section, keys) {
    this.section = section;
    this.keys = keys;
    this.kind = section.dataset.kind;
    this.fields = JSON.parse($("decision-fields").textContent);
    this.nonce = randomHex(16);
    // The exact text of the decision signed and sent from this page, once it is: the
    // preview then shows it, never a decision that was not signed.
    this.sent = null;
    this.expired = false;
    this.busy = false;
    this.buttons = [...section.querySelectorAll("button[data-decision]")];
    for (const b of this.buttons) {
      b.addEventListener("click", () => this.send(b.dataset.decision));
    }
    section.addEventListener("input", () => this.preview());
    section.addEventListener("change", () => this.preview());
  }

  answer() {
    if (this.kind === "question") {
      const text = $("answer").value;
      try {
        return JSON.parse(text);
      } catch {
        return text; // not JSON: plain text, as `underway approvals answer` takes it
      }
    }
    if (this.kind === "resolution" && this.fields.dead) {
      return { resolution: "resume", step: $("step").value.trim() || null };
    }
    if (this.kind === "resolution") {
      const outcome = $("outcome").value;
      const text = $("result").value.trim();
      if (text && outcome !== "succeeded") throw new Error("a result goes with succeeded only");
      let result = null;
      if (text) {
        try {
          result = JSON.parse(text);
        } catch (err) {
          throw new Error(`the result is not JSON: ${err.message}`);
        }
      }
      return { resolution: outcome, result };
    }
    return null;
  }

  // Every field of the decision but its signature, as the run will check them.
  unsigned(decision) {
    const f = this.fields;
    return {
      request_id: f.request_id,
      run_id: f.run_id,
      tenant_id: f.tenant_id,
      tool: f.tool,
      args_hash: f.args_hash,
      decision,
      expires_at: f.expires_at,
      nonce: this.nonce,
      approver_id: this.keys.record.approverId,
      comment: $("comment").value,
      answer: this.answer(),
    };
  }

  preview() {
    const out = $("signed-preview");
    const note = $("signed-note");
    if (this.sent !== null) {
      out.textContent = this.sent;
      out.dataset.state = "signed";
      note.textContent = "Signed and sent: these exact bytes, with this nonce.";
      return;
    }
    out.dataset.state = "unsigned";
    if (!this.keys.record) {
      out.textContent = "(a key is needed)";
      note.textContent = "";
      return;
    }
    const decision = this.buttons[0]?.dataset.decision ?? "approve";
    const others = this.buttons.slice(1).map((b) => `“${b.textContent.trim()}”`).join(", ");
    note.textContent = `What “${this.buttons[0]?.textContent.trim() ?? decision}” signs`
      + (others ? ` (${others} differs only in its decision)` : "")
      + ". The nonce is the one it will be signed with.";
    try {
      out.textContent = signedText(this.unsigned(decision));
    } catch (err) {
      out.textContent = String(err.message);
    }
  }

  update(expired) {
    if (expired !== undefined) this.expired = expired;
    const ok = this.keys.ready && !this.expired && !this.busy;
    for (const b of this.buttons) b.disabled = !ok;
    const state = $("decide-state");
    if (this.expired) state.textContent = "This request has expired: a decision can no longer pass.";
    else if (!this.keys.record) state.textContent = "Generate your signing key (below) to decide.";
    else if (!this.keys.ready) state.textContent = "Your key must be registered before you decide.";
    else state.textContent = `You sign as approver ${this.keys.record.approverId}, in this browser.`;
    this.preview();
  }

  result(text, tone) {
    const el = $("decision-result");
    el.textContent = text;
    el.dataset.tone = tone;
  }

  async send(decision) {
    if (!this.keys.ready || this.busy) return;
    this.busy = true;
    this.update();
    try {
      const fields = this.unsigned(decision);
      const { text, body } = await signDecision(this.keys.record, fields);
      const r = await fetch(`/approvals/${encodeURIComponent(this.fields.run_id)}/decision`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json",
          "X-CSRF-Token": csrf() },
        body,
      });
      const answer = (r.headers.get("content-type") ?? "").includes("json")
        ? await r.json() : { detail: `${r.status} ${r.statusText}` };
      if (r.status === 202) {
        const what = { approve: "Approval", reject: "Rejection", answer: "Answer",
          resolve: "Resolution" }[decision];
        this.result(`${what} signed by ${fields.approver_id} and sent (nonce ${fields.nonce}). `
          + (answer.delivered ? "The run verifies it when a worker picks it up."
            : answer.note), "ok");
        this.sent = text;
        for (const b of this.buttons) b.classList.add("hidden");
        pollRun(this.fields.run_id);
      } else {
        this.result(`Refused: ${answer.detail ?? r.statusText}`, "bad");
      }
    } catch (err) {
      this.result(`Not sent: ${err.message ?? err}`, "bad");
    } finally {
      this.busy = false;
      this.update();
    }
  }
}

// After a decision the page follows the run's status until it finishes (or moves on).
function pollRun(runId) {
  const badge = $("run-status");
  const until = Date.now() + POLL_FOR_MS;
  const poll = async () => {
    try {
      const r = await fetch(`/approvals/${encodeURIComponent(runId)}/status`,
        { headers: { Accept: "application/json" } });
      if (r.ok) {
        const { status } = await r.json();
        badge.textContent = status;
        badge.className = `status ${status}`;
        if (FINISHED.has(status)) return;
      }
    } catch {
      // the next poll tries again
    }
    if (Date.now() < until) setTimeout(poll, POLL_MS);
  };
  setTimeout(poll, POLL_MS);
}

async function main() {
  const panel = $("key-panel");
  const section = $("decide");
  const bulk = $("bulk-decide");
  let decider = null;
  const keys = panel ? new KeyPanel(panel, () => decider?.update()) : null;
  if (keys && section && $("decision-fields")) decider = new Decider(section, keys);
  if (keys && bulk && $("bulk-fields")) decider = new BulkDecider(bulk, keys);
  startCountdowns((expired) => decider?.update(expired));
  if (keys) await keys.load();
}

main();
