// Content references (spec/content.md, "Content references"): a payload
// value whose canonical bytes exceed 1 KiB is replaced by
// {"_ref": "sha256:<hex>", "size_bytes": n} and its bytes become a blob.
// Leaves first; paths (file_path, path, filepath) stay verbatim, and so does
// any container holding one. Mirrors laneledger.contract.contentref.

import { canonicalize, isPlainObject } from "./canonical.js";
import { sha256Hex } from "./chain.js";
import { InvalidRequest } from "./errors.js";

export const THRESHOLD_BYTES = 1024;
export const REFS_FIELD = "payload_refs";
const PATH_KEYS = new Set(["file_path", "path", "filepath"]);
const JSON_MEDIA_TYPE = "application/json";
const TEXT_MEDIA_TYPE = "text/plain; charset=utf-8";
const REF = /^sha256:[0-9a-f]{64}$/;
const HEX = /^[0-9a-f]{64}$/;

type Json = unknown;
type Obj = Record<string, Json>;

export interface Descriptor {
  sha256: string;
  size_bytes: number;
  label: string;
  media_type: string;
}

export interface Externalized {
  payload: Obj;
  blobs: Map<string, Buffer>; // "sha256:<hex>" -> bytes
  descriptors: Descriptor[];
}

/** A string is its UTF-8; any other value its RFC 8785 bytes. */
export function canonicalBytes(value: Json): Buffer {
  return typeof value === "string" ? Buffer.from(value, "utf8") : canonicalize(value);
}

export function refOf(data: Uint8Array): string {
  return "sha256:" + sha256Hex(data);
}

export function isRef(value: Json): value is { _ref: string; size_bytes: number } {
  if (!isPlainObject(value) || Object.keys(value).length !== 2) return false;
  const ref = value["_ref"];
  const size = value["size_bytes"];
  return typeof ref === "string" && REF.test(ref) && Number.isInteger(size) && (size as number) >= 0;
}

/** The payload with its oversized values replaced (a new object; `payload`
 * is left as it was), the blobs' bytes and the descriptors added. */
export function externalize(payload: Obj, threshold = THRESHOLD_BYTES): Externalized {
  // JSON.stringify writes a JSON value's canonical bytes but for the key
  // order, so its length is theirs: a cheap first look at a small payload.
  if (Buffer.byteLength(JSON.stringify(payload) ?? "") <= threshold || canonicalBytes(payload).length <= threshold) {
    return { payload, blobs: new Map(), descriptors: [] };
  }
  const blobs = new Map<string, Buffer>();
  const descriptors: Descriptor[] = [];
  const out: [string, Json][] = [];
  for (const [key, value] of Object.entries(payload)) {
    if (key === REFS_FIELD || PATH_KEYS.has(key)) out.push([key, value]);
    else out.push([key, walk(value, key, threshold, blobs, descriptors)[0]]);
  }
  const result = Object.fromEntries(out) as Obj;
  if (descriptors.length) {
    const existing = payload[REFS_FIELD] ?? [];
    if (!Array.isArray(existing)) {
      throw new InvalidRequest(`payload.${REFS_FIELD} must be an array of descriptors`, { path: `$.payload.${REFS_FIELD}` });
    }
    const seen = new Set(existing.map((d) => canonicalKey(d)));
    result[REFS_FIELD] = [...existing, ...descriptors.filter((d) => !seen.has(canonicalKey(d)))];
  }
  return { payload: result, blobs, descriptors };
}

function canonicalKey(value: Json): string {
  try {
    return canonicalBytes(value).toString("utf8");
  } catch {
    return String(Math.random()); // not canonical: equal to nothing
  }
}

function walk(value: Json, label: string, threshold: number, blobs: Map<string, Buffer>, descriptors: Descriptor[]): [Json, boolean] {
  if (isRef(value)) return [value, false];
  let holdsPath = false;
  if (Array.isArray(value) || isPlainObject(value)) {
    if (canonicalBytes(value).length <= threshold) return [value, hasPath(value)];
    if (Array.isArray(value)) {
      value = value.map((item, i) => {
        const [walked, inner] = walk(item, `${label}[${i}]`, threshold, blobs, descriptors);
        holdsPath ||= inner;
        return walked;
      });
    } else {
      const entries: [string, Json][] = [];
      for (const [key, item] of Object.entries(value as Obj)) {
        if (PATH_KEYS.has(key)) {
          entries.push([key, item]);
          holdsPath = true;
        } else {
          const [walked, inner] = walk(item, `${label}.${key}`, threshold, blobs, descriptors);
          entries.push([key, walked]);
          holdsPath ||= inner;
        }
      }
      value = Object.fromEntries(entries);
    }
    if (holdsPath) return [value, true];
  }
  const raw = canonicalBytes(value);
  if (raw.length <= threshold) return [value, holdsPath];
  const ref = refOf(raw);
  if (!blobs.has(ref)) blobs.set(ref, raw);
  descriptors.push({
    sha256: ref.slice("sha256:".length),
    size_bytes: raw.length,
    label,
    media_type: typeof value === "string" ? TEXT_MEDIA_TYPE : JSON_MEDIA_TYPE,
  });
  return [{ _ref: ref, size_bytes: raw.length }, false];
}

function hasPath(value: Json): boolean {
  if (Array.isArray(value)) return value.some(hasPath);
  if (isPlainObject(value)) return Object.entries(value).some(([k, v]) => PATH_KEYS.has(k) || hasPath(v));
  return false;
}

/** Every (ref, size) a payload depends on, each once, in order: its
 * sentinels, then the well-formed descriptors of its payload_refs. */
export function refsIn(payload: Json): [string, number][] {
  const found = new Map<string, [string, number]>();
  const add = (ref: string, size: number) => {
    const key = `${ref} ${size}`;
    if (!found.has(key)) found.set(key, [ref, size]);
  };
  const visit = (value: Json): void => {
    if (isRef(value)) add(value._ref, value.size_bytes);
    else if (Array.isArray(value)) value.forEach(visit);
    else if (isPlainObject(value)) Object.values(value).forEach(visit);
  };
  visit(payload);
  if (isPlainObject(payload) && Array.isArray(payload[REFS_FIELD])) {
    for (const d of payload[REFS_FIELD] as Json[]) {
      if (isPlainObject(d) && typeof d["sha256"] === "string" && HEX.test(d["sha256"]) && Number.isInteger(d["size_bytes"]) && (d["size_bytes"] as number) >= 0) {
        add("sha256:" + d["sha256"], d["size_bytes"] as number);
      }
    }
  }
  return [...found.values()];
}
