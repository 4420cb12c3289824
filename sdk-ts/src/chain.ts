// The append digest and the entry hash chain (spec/canonical.md, 2 and 3).

import { createHash, createHmac } from "node:crypto";
import { canonicalize } from "./canonical.js";
import { ChainFault } from "./errors.js";

export const GENESIS_HASH = "0".repeat(64);
const EXCLUDED = new Set(["entry_hash", "signature"]); // not in the preimage
const HEX64 = /^[0-9a-f]{64}$/;

export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

/** Lowercase hex SHA-256 of the canonical bytes of a batch of proposed
 * events, exactly as sent: what the receipt's `digest` must equal. */
export function appendDigest(events: readonly unknown[]): string {
  return sha256Hex(canonicalize(events));
}

// Sealed content (spec/canonical.md §3): the content enters the preimage only
// through `content_digest`, an HMAC keyed by the event's own `content_salt`.
const NOT_IN_SEALED_PREIMAGE = new Set(["extensions", "payload", "content_salt", "erased"]);

function isSealed(record: Record<string, unknown>): boolean {
  return "content_salt" in record || "content_digest" in record;
}

/** Lowercase hex HMAC-SHA256 of an event's content (`{"extensions",
 * "payload"}`, canonical) keyed by the 32 bytes of its salt. */
export function contentDigest(saltHex: string, payload: unknown, extensions: unknown): string {
  return createHmac("sha256", Buffer.from(saltHex, "hex")).update(canonicalize({ extensions, payload })).digest("hex");
}

/** A committed event's entry hash: over its canonical bytes without
 * `entry_hash` and `signature` (a sealed event's content, salt and erasure
 * mark out, its `content_digest` in); HMAC-SHA256 when the sequencer has a key. */
export function entryHash(record: Record<string, unknown>, key?: Uint8Array | string): string {
  const fields = Object.fromEntries(
    Object.entries(record).filter(([k]) => !EXCLUDED.has(k) && !(isSealed(record) && NOT_IN_SEALED_PREIMAGE.has(k))),
  );
  const salt = record["content_salt"];
  if (typeof salt === "string" && HEX64.test(salt)) {
    fields["content_digest"] = contentDigest(salt, record["payload"], record["extensions"]);
  }
  const preimage = canonicalize(fields);
  return key === undefined ? sha256Hex(preimage) : createHmac("sha256", key).update(preimage).digest("hex");
}

/** Why a sealed record is neither whole (a salt, no digest, no mark) nor
 * erased (no salt, no signature, empty content, a digest and a mark), as
 * [field, expected, found]; undefined when it is one of them. */
function sealedFormProblem(record: Record<string, unknown>): [string, string, unknown] | undefined {
  if ("content_salt" in record) {
    const salt = record["content_salt"];
    if (typeof salt !== "string" || !HEX64.test(salt)) return ["content_salt", "64 lowercase hex", salt];
    for (const field of ["content_digest", "erased"]) {
      if (field in record) return [field, "absent beside content_salt", record[field]];
    }
    return undefined;
  }
  const digest = record["content_digest"];
  if (typeof digest !== "string" || !HEX64.test(digest)) return ["content_digest", "64 lowercase hex", digest];
  for (const field of ["extensions", "payload"]) {
    const value = record[field];
    const empty = typeof value === "object" && value !== null && !Array.isArray(value) && Object.keys(value).length === 0;
    if (!empty) return [field, "{} once erased", value];
  }
  if ("signature" in record) return ["signature", "absent once erased", record["signature"]];
  const mark = record["erased"];
  if (typeof mark !== "object" || mark === null || Array.isArray(mark)) return ["erased", "the erasure's mark", mark];
  return undefined;
}

/** Verify one lane's chain from seq 1; the tip entry hash (genesis when
 * empty), or `ChainFault` at the first bad record: `not_chained`, then
 * `broken_link` (seq, then prev_hash), then `content_tampered` (a sealed
 * event in neither of its forms, or a hash that differs). */
export function verifyChain(records: Iterable<Record<string, unknown>>, key?: Uint8Array | string): string {
  let prevSeq = 0;
  let prev = GENESIS_HASH;
  let position = 0;
  for (const record of records) {
    position += 1;
    const seq = record["seq"];
    if (typeof seq !== "number" || !Number.isInteger(seq)) {
      throw fault("not_chained", position, null, "seq", "an integer", seq);
    }
    for (const field of ["prev_hash", "entry_hash"]) {
      const value = record[field];
      if (typeof value !== "string" || !HEX64.test(value)) {
        throw fault("not_chained", position, seq, field, "64 lowercase hex", value);
      }
    }
    if (seq !== prevSeq + 1) throw fault("broken_link", position, seq, "seq", prevSeq + 1, seq);
    if (record["prev_hash"] !== prev) throw fault("broken_link", position, seq, "prev_hash", prev, record["prev_hash"]);
    if (isSealed(record)) {
      const problem = sealedFormProblem(record);
      if (problem !== undefined) throw fault("content_tampered", position, seq, ...problem);
    }
    const recomputed = entryHash(record, key);
    if (recomputed !== record["entry_hash"]) {
      throw fault("content_tampered", position, seq, "entry_hash", recomputed, record["entry_hash"]);
    }
    prevSeq = seq;
    prev = recomputed;
  }
  return prev;
}

function fault(kind: string, position: number, seq: number | null, field: string, expected: unknown, found: unknown) {
  const where = seq !== null ? `seq ${seq}` : `position ${position}`;
  return new ChainFault(`${where}: ${kind} (${field} expected ${String(expected)}, found ${JSON.stringify(found) ?? "nothing"})`, {
    kind, seq, position, field, expected, found: found ?? null,
  });
}
