// The bulk decision page (/approvals/bulk): one decision per ticked run, each signed in
// this browser with the approver's key by signing.js (the single decision's code), then
// posted together with the session's CSRF token. Each run's nonce is the one Python's
// `request_nonce` gives, so signing a request again makes the same decision.
import { jcs } from "./jcs.js";
import { csrf, requestNonce, signDecision, signedText } from "./signing.js";

const $ = (id) => document.getElementById(id);

export class BulkDecider {
  constructor(section, keys) {
    this.section = section;
    this.keys = keys;
    this.action = section.dataset.action;
    this.kind = section.dataset.kind;
    this.query = section.dataset.query;
    this.question = section.dataset.question ?? "";
    this.runs = JSON.parse($("bulk-fields").textContent);
    this.rows = new Map([...document.querySelectorAll("#bulk-runs tr[data-run]")]
      .map((tr) => [tr.dataset.run, tr]));
    // The exact text signed and sent for each run, once it is.
    this.sent = new Map();
    this.expired = false;
    this.busy = false;
    this.shown = 0;
    this.buttons = [...section.querySelectorAll("button[data-decision]")];
    for (const b of this.buttons) b.addEventListener("click", () => this.send(b.dataset.decision));
    for (const el of [section, $("bulk-runs")]) {
      el?.addEventListener("input", () => this.update());
      el?.addEventListener("change", () => this.update());
    }
    $("bulk-all")?.addEventListener("change", (e) => {
      for (const tr of this.rows.values()) tr.querySelector("input.pick").checked = e.target.checked;
      this.update();
    });
  }

  picked() {
    return this.runs.filter((f) => this.rows.get(f.run_id)?.querySelector("input.pick")?.checked);
  }

  answer() {
    if (this.kind !== "question") return null;
    const text = $("answer").value;
    if (!text.trim()) throw new Error("write the answer first");
    try {
      return JSON.parse(text);
    } catch {
      return text; // not JSON: plain text, as `underway approvals answer` takes it
    }
  }

  // Every field of one run's decision but its signature, as the run will check them.
  async unsigned(f, decision, answer) {
    const approverId = this.keys.record.approverId;
    return {
      request_id: f.request_id,
      run_id: f.run_id,
      tenant_id: f.tenant_id,
      tool: f.tool,
      args_hash: f.args_hash,
      decision,
      expires_at: f.expires_at,
      nonce: await requestNonce(f.run_id, f.request_id, approverId),
      approver_id: approverId,
      comment: $("comment").value,
      answer,
    };
  }

  async preview() {
    const turn = ++this.shown;
    const decision = this.buttons[0]?.dataset.decision ?? this.action;
    let answer = null;
    let problem = "";
    try {
      answer = this.answer();
    } catch (err) {
      problem = `(${err.message})`;
    }
    for (const f of this.runs) {
      const out = this.rows.get(f.run_id)?.querySelector("pre.signed");
      if (!out) continue;
      let text;
      if (this.sent.has(f.run_id)) {
        text = this.sent.get(f.run_id);
        out.dataset.state = "signed";
      } else {
        out.dataset.state = "unsigned";
        if (!this.keys.record) text = "(a key is needed)";
        else if (problem) text = problem;
        else text = signedText(await this.unsigned(f, decision, answer));
      }
      if (turn !== this.shown) return; // a newer preview is on its way
      out.textContent = text;
    }
  }

  update(expired) {
    if (expired !== undefined) this.expired = expired;
    const n = this.picked().length;
    const ok = this.keys.ready && !this.busy && n > 0 && this.sent.size === 0;
    for (const b of this.buttons) {
      b.disabled = !ok;
      b.textContent = `${b.dataset.label} ${n} run${n === 1 ? "" : "s"}`;
    }
    $("bulk-selected").textContent = String(n);
    const state = $("decide-state");
    if (!this.keys.record) state.textContent = "Generate your signing key (below) to decide.";
    else if (!this.keys.ready) state.textContent = "Your key must be registered before you decide.";
    else state.textContent = `You sign as approver ${this.keys.record.approverId}, in this `
      + "browser: one decision per ticked run.";
    this.preview();
  }

  result(text, tone) {
    const el = $("bulk-result");
    el.textContent = text;
    el.dataset.tone = tone;
  }

  async send(decision) {
    if (!this.keys.ready || this.busy || this.sent.size) return;
    this.busy = true;
    this.update();
    try {
      const answer = this.answer();
      const picked = this.picked();
      const bodies = [];
      const texts = new Map();
      for (const f of picked) {
        const { text, body } = await signDecision(this.keys.record,
          await this.unsigned(f, decision, answer));
        bodies.push(body);
        texts.set(f.run_id, text);
      }
      let head = `{"action":${JSON.stringify(decision)}`;
      if (decision === "answer") {
        head += `,"question":${JSON.stringify(this.question)},"answer":${jcs(answer)}`;
      }
      const r = await fetch(`/approvals/bulk?${this.query}`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json",
          "X-CSRF-Token": csrf() },
        body: `${head},"decisions":[${bodies.join(",")}]}`,
      });
      const report = (r.headers.get("content-type") ?? "").includes("json")
        ? await r.json() : { detail: `${r.status} ${r.statusText}` };
      if (r.status !== 200) {
        this.result(`Refused: ${report.detail ?? r.statusText}`, "bad");
        return;
      }
      this.sent = texts;
      this.show(report, picked.length);
    } catch (err) {
      this.result(`Not sent: ${err.message ?? err}`, "bad");
    } finally {
      this.busy = false;
      this.update();
    }
  }

  show(report, signed) {
    const counts = { done: 0, failed: 0, skipped: 0 };
    for (const item of report.runs) {
      const tr = this.rows.get(item.run_id);
      if (!tr || !this.sent.has(item.run_id)) continue;
      counts[item.outcome] = (counts[item.outcome] ?? 0) + 1;
      const cell = tr.querySelector(".outcome");
      cell.dataset.outcome = item.outcome;
      cell.textContent = item.reason ? `${item.outcome}: ${item.reason}` : item.outcome;
    }
    const el = $("bulk-result");
    el.replaceChildren();
    const part = (label, outcome) => {
      const strong = document.createElement("strong");
      strong.dataset.count = outcome;
      strong.textContent = String(counts[outcome]);
      el.append(label, strong);
    };
    part(`Signed ${signed} decisions as ${this.keys.record.approverId} and sent them: done `,
      "done");
    part(", failed ", "failed");
    part(", skipped ", "skipped");
    el.append(". Each run verifies its decision when a worker picks it up.");
    el.dataset.tone = counts.done === signed ? "ok" : "warn";
    $("bulk-state").textContent = "Signed and sent: each run's outcome is below.";
  }
}
