// RFC 8785 (JCS) canonical JSON: the text a decision signs, after its domain tag.
// JSON.stringify already writes strings and numbers as JCS asks (ECMAScript's shortest
// round-trip numbers, JCS's escapes), and JavaScript's sort orders strings by UTF-16 code
// units, as JCS orders keys. So only the key order, and what JCS cannot hold, are handled
// here. tests/integration/console/test_console_browser.py compares it in Chromium with
// Python's rfc8785, byte for byte.

/** The JCS text of `value`: null, booleans, finite numbers, strings, arrays and plain
 * objects (as JSON.parse makes them). */
export function jcs(value) {
  if (value === null || typeof value === "boolean") return String(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new RangeError(`JSON has no ${value}`);
    return JSON.stringify(value);
  }
  if (typeof value === "string") {
    // JCS text is UTF-8, which cannot hold a lone surrogate.
    if (/\p{Cs}/u.test(value)) throw new RangeError("a string holds a lone surrogate");
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(jcs).join(",")}]`;
  if (typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${jcs(k)}:${jcs(value[k])}`).join(",")}}`;
  }
  throw new TypeError(`not JSON: ${typeof value}`);
}
