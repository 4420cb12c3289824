import { createHash, randomBytes } from "node:crypto";

let lastMs = 0;
let counter = 0;

/** A fresh lowercase UUIDv7 (RFC 9562), time-ordered within the process. */
export function newId(): string {
  let ms = Date.now();
  if (ms <= lastMs) {
    counter = (counter + 1) & 0xfff;
    if (counter === 0) lastMs += 1;
    ms = lastMs;
  } else {
    lastMs = ms;
    counter = randomBytes(2).readUInt16BE() & 0x7ff;
  }
  const bytes = randomBytes(16);
  bytes.writeUIntBE(ms, 0, 6);
  bytes[6] = 0x70 | (counter >> 8);
  bytes[7] = counter & 0xff;
  bytes[8] = 0x80 | ((bytes[8] as number) & 0x3f);
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** RFC 3339 UTC with microseconds and a 'Z', the form the ledger writes. */
export function now(): string {
  return new Date().toISOString().replace("Z", "000Z");
}

/** A deterministic UUIDv7-shaped id (laneledger.contract.ids.derived_id):
 * the 48-bit time field `atMs`, the rest from SHA-256 of `parts`. */
export function derivedId(parts: string[], atMs = 0): string {
  const digest = createHash("sha256").update(parts.join("\x1f"), "utf8").digest();
  const bytes = Buffer.alloc(16);
  bytes.writeUIntBE(atMs, 0, 6);
  digest.copy(bytes, 6, 0, 10);
  bytes[6] = 0x70 | ((bytes[6] as number) & 0x0f);
  bytes[8] = 0x80 | ((bytes[8] as number) & 0x3f);
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
