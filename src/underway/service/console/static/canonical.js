// Canonical JSON exactly as underway's Python `canonical_json` writes it:
//   json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
//              allow_nan=False).encode("utf-8")
// The bytes a signed decision covers are these, so this module must agree with Python
// byte for byte (tests/integration/console/test_console_browser.py compares them in
// Chromium). What differs between the two languages, and how it is settled here:
// - Numbers: Python tells an int (`1`) from a float (`1.0`); JavaScript does not. `parse`
//   keeps every number's literal as a `JsonNumber`, an int when it has no ".", "e" or
//   "E" (what Python's json.loads decides), so ints of any size stay exact. A float is
//   written like Python's `repr(float)`: the shortest digits that round-trip (the same
//   digits in both languages), with ".0" on whole numbers, exponents outside
//   1e-4 <= |x| < 1e16 written "1e+16", "1e-05", and "-0.0" kept.
// - Key order: Python sorts keys by code point, JavaScript's sort by UTF-16 code unit;
//   they differ for characters above U+FFFF against U+E000..U+FFFF.
// - Strings: JSON.stringify escapes exactly what Python does with ensure_ascii=False
//   (quote, backslash, controls below U+0020, lowercase \u00xx); a lone surrogate, which
//   Python cannot encode as UTF-8, is refused.

/** A JSON number as written: `int` when its literal has no fraction or exponent. */
export class JsonNumber {
  constructor(text, isFloat) {
    this.text = String(text);
    this.isFloat = isFloat === undefined ? /[.eE]/.test(this.text) : Boolean(isFloat);
  }
}

/** A float, however whole it is: `asFloat(1700000000)` is written `1700000000.0`. */
export function asFloat(x) {
  if (x instanceof JsonNumber) return new JsonNumber(x.text, true);
  return new JsonNumber(String(x), true);
}

/** Python's `repr` of a finite float. */
export function floatRepr(x) {
  if (typeof x !== "number" || !Number.isFinite(x)) {
    throw new RangeError(`not a finite number: ${x} (canonical JSON has no NaN or Infinity)`);
  }
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  // toExponential() without an argument gives the shortest digits that read back as x.
  const [mantissa, exponent] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const exp = Number(exponent);
  const point = exp + 1; // x = 0.<digits> * 10^point, as Python's dtoa counts it
  let body;
  if (point < -3 || point > 16) {
    const rest = digits.slice(1);
    body = `${digits[0]}${rest ? "." + rest : ""}e${exp < 0 ? "-" : "+"}`
      + String(Math.abs(exp)).padStart(2, "0");
  } else if (point <= 0) {
    body = `0.${"0".repeat(-point)}${digits}`;
  } else if (point >= digits.length) {
    body = `${digits}${"0".repeat(point - digits.length)}.0`;
  } else {
    body = `${digits.slice(0, point)}.${digits.slice(point)}`;
  }
  return sign + body;
}

function numberText(n) {
  if (n instanceof JsonNumber) {
    if (n.isFloat) return floatRepr(Number(n.text));
    if (!/^-?(0|[1-9][0-9]*)$/.test(n.text)) throw new SyntaxError(`not an integer: ${n.text}`);
    return BigInt(n.text).toString();
  }
  if (typeof n === "bigint") return n.toString();
  if (Number.isInteger(n)) {
    if (!Number.isSafeInteger(n)) {
      throw new RangeError(`${n} is past 2^53: give it as a BigInt or a JsonNumber`);
    }
    return String(n === 0 ? 0 : n);
  }
  return floatRepr(n);
}

function stringText(s) {
  const wellFormed = typeof s.isWellFormed === "function"
    ? s.isWellFormed() : !/[\uD800-\uDFFF]/.test(s.replace(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g, ""));
  if (!wellFormed) throw new RangeError("a string holds a lone surrogate (not UTF-8)");
  return JSON.stringify(s);
}

// Code point order: at the first differing UTF-16 unit, surrogates (U+D800..U+DFFF, which
// only start characters above U+FFFF) rank above U+E000..U+FFFF.
function unitRank(u) {
  if (u >= 0xd800 && u <= 0xdfff) return u + 0x2000;
  if (u >= 0xe000) return u - 0x800;
  return u;
}

/** Compare two strings by code point, as Python's `sorted` does. */
export function compareCodePoints(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return unitRank(x) - unitRank(y);
  }
  return a.length - b.length;
}

function entriesOf(value) {
  return value instanceof Map ? [...value.entries()] : Object.keys(value).map((k) => [k, value[k]]);
}

/** The canonical JSON text of `value` (null, booleans, strings, numbers, JsonNumber,
 * BigInt, arrays, plain objects and Maps with string keys). */
export function canonical(value) {
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "string") return stringText(value);
  if (typeof value === "number" || typeof value === "bigint" || value instanceof JsonNumber) {
    return numberText(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (typeof value === "object") {
    const entries = entriesOf(value);
    for (const [k] of entries) {
      if (typeof k !== "string") throw new TypeError(`a key is not a string: ${String(k)}`);
    }
    entries.sort((x, y) => compareCodePoints(x[0], y[0]));
    return `{${entries.map(([k, v]) => `${stringText(k)}:${canonical(v)}`).join(",")}}`;
  }
  throw new TypeError(`not JSON: ${typeof value}`);
}

/** The UTF-8 bytes of `canonical(value)`. */
export function canonicalBytes(value) {
  return new TextEncoder().encode(canonical(value));
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;

/** Parse JSON text keeping every number's literal (`JsonNumber`) and objects as
 * null-prototype objects (so "__proto__" is a key like any other; a repeated key keeps its
 * last value, as in Python). Throws SyntaxError on anything that is not JSON. */
export function parse(text) {
  let i = 0;
  const fail = (what) => {
    throw new SyntaxError(`${what} at offset ${i}`);
  };
  const space = () => {
    while (i < text.length && " \t\n\r".includes(text[i])) i++;
  };
  const value = () => {
    space();
    const c = text[i];
    if (c === "{") {
      i++;
      const obj = Object.create(null);
      space();
      if (text[i] === "}") {
        i++;
        return obj;
      }
      for (;;) {
        space();
        if (text[i] !== "\"") fail("expected a key");
        const key = string();
        space();
        if (text[i] !== ":") fail("expected ':'");
        i++;
        obj[key] = value();
        space();
        if (text[i] === ",") {
          i++;
        } else if (text[i] === "}") {
          i++;
          return obj;
        } else {
          fail("expected ',' or '}'");
        }
      }
    }
    if (c === "[") {
      i++;
      const list = [];
      space();
      if (text[i] === "]") {
        i++;
        return list;
      }
      for (;;) {
        list.push(value());
        space();
        if (text[i] === ",") {
          i++;
        } else if (text[i] === "]") {
          i++;
          return list;
        } else {
          fail("expected ',' or ']'");
        }
      }
    }
    if (c === "\"") return string();
    for (const [word, v] of [["true", true], ["false", false], ["null", null]]) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) fail("expected a value");
    i += m[0].length;
    return new JsonNumber(m[0]);
  };
  const string = () => {
    STRING.lastIndex = i;
    const m = STRING.exec(text);
    if (!m) fail("bad string");
    i += m[0].length;
    return JSON.parse(m[0]);
  };
  const result = value();
  space();
  if (i !== text.length) fail("unexpected text after the value");
  return result;
}
