// Signing a decision in the browser: the one code the single decision (approvals.js) and
// the bulk decisions (bulk_decide.js) both sign with.
//
// A decision is signed over "underway-approval-v2\n" + the RFC 8785 (JCS) JSON of its
// fields, "canon": "jcs" among them (jcs.js), with the approver's Ed25519 key held by
// this browser (non-extractable, in IndexedDB).
import { jcs } from "./jcs.js";

export const DOMAIN = "underway-approval-v2\n";
export const CANON = "jcs";

export const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content ?? "";

export function base64(bytes) {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text);
}

// JSON writes a whole number below 1e21 without a fraction or exponent, so the run reads
// it as an integer, and JCS signs integers only up to 2^53 (its numbers are IEEE doubles).
// Such a number past 2^53 is refused here, before signing, not later as a bad signature.
function refuseInexact(value) {
  if (typeof value === "number" && Number.isInteger(value) && !Number.isSafeInteger(value)
    && Math.abs(value) < 1e21) {
    throw new RangeError(`${value} is a whole number past 2^53, which a signature cannot `
      + "hold exactly: write it as a string");
  }
  if (value !== null && typeof value === "object") Object.values(value).forEach(refuseInexact);
}

// The exact text a decision with these fields (all but its signature and canon) signs.
export function signedText(fields) {
  const signed = { ...fields, canon: CANON };
  refuseInexact(signed);
  return DOMAIN + jcs(signed);
}

// Sign `fields` with the key `record` holds: the signed text and the decision's JSON body.
export async function signDecision(record, fields) {
  const text = signedText(fields);
  const message = new TextEncoder().encode(text);
  const signature = await crypto.subtle.sign({ name: "Ed25519" }, record.privateKey, message);
  const body = jcs({ ...fields, canon: CANON, signature: base64(new Uint8Array(signature)) });
  return { text, body };
}

// The nonce of approver `approverId`'s decision on a run's request, as Python's
// `request_nonce` makes it: two signings of one request are one decision.
export async function requestNonce(runId, requestId, approverId) {
  const raw = new TextEncoder().encode(`${runId}\u0000${requestId}\u0000${approverId}`);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", raw));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("").slice(0, 32);
}
