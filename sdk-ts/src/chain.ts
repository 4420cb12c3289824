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

/** A committed event's entry hash: over its canonical bytes without
 * `entry_hash` and `signature`; HMAC-SHA256 when the sequencer has a key. */
export function entryHash(record: Record<string, unknown>, key?: Uint8Array | string): string {
  const preimage = canonicalize(Object.fromEntries(Object.entries(record).filter(([k]) => !EXCLUDED.has(k))));
  return key === undefined ? sha256Hex(preimage) : createHmac("sha256", key).update(preimage).digest("hex");
}

/** Verify one lane's chain from seq 1; the tip entry hash (genesis when
 * empty), or `ChainFault` at the first bad record: `not_chained`, then
 * `broken_link` (seq, then prev_hash), then `content_tampered`. */
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
