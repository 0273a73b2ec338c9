// Signing a decision in the browser: the one code the single decision (approvals.js) and
// the bulk decisions (bulk_decide.js) both sign with.
//
// A decision is signed over "underway-approval-v1\n" + the canonical JSON of its fields
// (canonical.js writes it byte for byte as Python does), with the approver's Ed25519 key
// held by this browser (non-extractable, in IndexedDB).
import { canonical } from "./canonical.js";

export const DOMAIN = "underway-approval-v1\n";

export const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content ?? "";

export function base64(bytes) {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text);
}

// The exact text a decision with these fields (all but its signature) signs.
export function signedText(fields) {
  return DOMAIN + canonical(fields);
}

// Sign `fields` with the key `record` holds: the signed text and the decision's JSON body.
export async function signDecision(record, fields) {
  const text = signedText(fields);
  const message = new TextEncoder().encode(text);
  const signature = await crypto.subtle.sign({ name: "Ed25519" }, record.privateKey, message);
  const body = canonical({ ...fields, signature: base64(new Uint8Array(signature)) });
  return { text, body };
}

// The nonce of approver `approverId`'s decision on a run's request, as Python's
// `request_nonce` makes it: two signings of one request are one decision.
export async function requestNonce(runId, requestId, approverId) {
  const raw = new TextEncoder().encode(`${runId}\u0000${requestId}\u0000${approverId}`);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", raw));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("").slice(0, 32);
}
