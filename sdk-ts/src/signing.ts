// Producer signatures (spec/object-model.md, "Signed producers"): ed25519
// over the canonical bytes of the proposed event without `signature` (a
// committed one also without the ledger's fields). Keys and signatures
// travel as lowercase hex. Mirrors laneledger.contract.signing.

import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from "node:crypto";
import { canonicalize } from "./canonical.js";
import { blobsOf, carrying, type Event } from "./content.js";
import { InvalidRequest } from "./errors.js";

const SIGNATURE_FIELD = "signature";
const LEDGER_OWNED_FIELDS = new Set(["tenant", "session_id", "run_id", "seq", "position", "append_id", "committed_at", "prev_hash", "entry_hash"]);
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex"); // then the 32-byte seed
const SPKI_ED25519_PREFIX = Buffer.from("302a300506032b6570032100", "hex"); // then the 32-byte key

/** The bytes a producer signs. */
export function signedBytes(event: Event): Buffer {
  return canonicalize(Object.fromEntries(Object.entries(event).filter(([k]) => k !== SIGNATURE_FIELD && !LEDGER_OWNED_FIELDS.has(k))));
}

/** A copy of the proposed event with its signature set (carrying the same blobs). */
export function signEvent(event: Event, privateKey: KeyObject): Event {
  const rest = Object.fromEntries(Object.entries(event).filter(([k]) => k !== SIGNATURE_FIELD));
  return carrying({ ...rest, [SIGNATURE_FIELD]: sign(null, signedBytes(rest), privateKey).toString("hex") }, blobsOf(event));
}

export function checkSignature(event: Event, publicKey: KeyObject): boolean {
  const signature = event[SIGNATURE_FIELD];
  if (typeof signature !== "string" || !/^[0-9a-f]{128}$/.test(signature)) return false;
  return verify(null, signedBytes(event), publicKey, Buffer.from(signature, "hex"));
}

export function generatePrivateKey(): KeyObject {
  return generateKeyPairSync("ed25519").privateKey;
}

/** A private key from the 64 hex digits of its seed, or a PEM (PKCS#8). */
export function loadPrivateKey(source: string): KeyObject {
  try {
    const text = source.trim();
    if (text.startsWith("-----BEGIN")) return createPrivateKey(text);
    if (!/^[0-9a-fA-F]{64}$/.test(text)) throw new Error("not 64 hex digits");
    return createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, Buffer.from(text, "hex")]), format: "der", type: "pkcs8" });
  } catch (err) {
    throw new InvalidRequest(`not an ed25519 private key (PEM or 64 hex digits): ${(err as Error).message}`, { path: "private_key" });
  }
}

/** A public key from its 64 hex digits. */
export function loadPublicKey(hex: string): KeyObject {
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) throw new InvalidRequest("not an ed25519 public key in hex", { path: "$.public_key", found: hex.slice(0, 80) });
  return createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, Buffer.from(hex, "hex")]), format: "der", type: "spki" });
}

/** The 64-hex-digit form ensureActor's publicKey takes. */
export function publicKeyHex(key: KeyObject): string {
  const spki = createPublicKey(key).export({ format: "der", type: "spki" });
  return spki.subarray(spki.length - 32).toString("hex");
}
