// RFC 8785 canonical JSON (spec/canonical.md): the bytes every digest and
// entry hash is taken over. JSON.stringify already writes strings and
// numbers exactly as RFC 8785 asks (it is ECMAScript's Number::toString and
// string escaping); what is left is the key order (UTF-16 code units, the
// order of `<` on strings) and the refusals, named as Python names them.

import { NotCanonicalizable } from "./errors.js";

export const MAX_SAFE_INTEGER = Number.MAX_SAFE_INTEGER; // 2^53 - 1
const UNSAFE_WHOLE_FLOATS_END = 1e21; // whole numbers in [2^53, 1e21) print as integers
const MAX_DEPTH = 1000; // Python's recursion limit, roughly: refused as too_deep

class Refused extends Error {
  where: (string | number)[] = [];
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

/** The canonical form of `value` as a string; `NotCanonicalizable`
 * (details `path`, `reason`) when it has none. */
export function canonicalString(value: unknown): string {
  const out: string[] = [];
  try {
    write(value, out, new Set());
  } catch (err) {
    if (err instanceof Refused) {
      throw new NotCanonicalizable(err.message, { path: jsonPath(err.where.reverse()), reason: err.reason });
    }
    throw err;
  }
  return out.join("");
}

/** The canonical UTF-8 bytes of `value`. */
export function canonicalize(value: unknown): Buffer {
  return Buffer.from(canonicalString(value), "utf8");
}

function write(value: unknown, out: string[], open: Set<object>): void {
  if (value === null) {
    out.push("null");
  } else if (typeof value === "boolean") {
    out.push(value ? "true" : "false");
  } else if (typeof value === "number") {
    out.push(number(value));
  } else if (typeof value === "string") {
    out.push(string(value));
  } else if (Array.isArray(value)) {
    enter(value, open);
    out.push("[");
    value.forEach((item, index) => {
      if (index) out.push(",");
      nested(() => write(item, out, open), index);
    });
    out.push("]");
    open.delete(value);
  } else if (isPlainObject(value)) {
    enter(value, open);
    const keys = Object.keys(value);
    for (const key of keys) {
      if (!key.isWellFormed()) nested(() => { throw loneSurrogate(key); }, key);
    }
    keys.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)); // UTF-16 code units (RFC 8785 3.2.3)
    out.push("{");
    keys.forEach((key, index) => {
      if (index) out.push(",");
      out.push(JSON.stringify(key), ":");
      nested(() => write((value as Record<string, unknown>)[key], out, open), key);
    });
    out.push("}");
    open.delete(value);
  } else {
    const kind = typeof value === "object" ? (value as object).constructor?.name ?? "object" : typeof value;
    throw new Refused("unsupported_type", `${kind} is not a JSON type`);
  }
}

function enter(value: object, open: Set<object>): void {
  if (open.has(value) || open.size >= MAX_DEPTH) {
    throw new Refused("too_deep", "value nests too deeply (or contains itself)");
  }
  open.add(value);
}

function nested(step: () => void, where: string | number): void {
  try {
    step();
  } catch (err) {
    if (err instanceof Refused && err.reason !== "too_deep") err.where.push(where);
    throw err;
  }
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function string(text: string): string {
  if (!text.isWellFormed()) throw loneSurrogate(text);
  return JSON.stringify(text);
}

function loneSurrogate(text: string): Refused {
  const code = [...text].find((c) => c.length === 1 && c >= "\ud800" && c <= "\udfff") ?? "\ud800";
  const hex = code.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0");
  return new Refused("lone_surrogate", `string contains a lone surrogate U+${hex}, which has no UTF-8 form`);
}

function number(value: number): string {
  if (!Number.isFinite(value)) {
    throw new Refused("non_finite_number", `${value} has no JSON form (RFC 8785 forbids NaN and Infinity)`);
  }
  const magnitude = Math.abs(value);
  if (Number.isInteger(value) && magnitude > MAX_SAFE_INTEGER && magnitude < UNSAFE_WHOLE_FLOATS_END) {
    // Written without an exponent, it would read back as an integer beyond
    // ±(2^53−1): refused, never rounded (spec/canonical.md, "Integer range").
    throw new Refused(
      "integer_out_of_range",
      `${value} is a whole number beyond ±(2^53−1) that RFC 8785 writes without an exponent; send it as a string`,
    );
  }
  return String(value); // ECMAScript Number::toString; -0 prints as "0"
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A JSONPath-like location, as Python writes it: `$.a["b c"][3]`. */
export function jsonPath(where: Iterable<string | number>): string {
  let path = "$";
  for (const step of where) {
    if (typeof step === "number") path += `[${step}]`;
    else if (IDENTIFIER.test(step)) path += "." + step;
    else path += "[" + asciiJson(step) + "]";
  }
  return path;
}

/** JSON.stringify with every non-ASCII code unit escaped (Python's json.dumps). */
export function asciiJson(text: string): string {
  return JSON.stringify(text).replace(/[\u0080-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}
