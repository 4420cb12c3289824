// Subjects, tokens, inboxes and buckets (spec/wire.md), as
// shared/laneledger/contract/subjects.py names them.

import { sha256Hex } from "./chain.js";

const VERBATIM = /^[A-Za-z0-9-]{1,64}$/;
export const REPLY_HEADER = "Ledger-Reply-To";
export const TENANT_HEADER = "Ledger-Tenant";
/** Where a tenant's producer, in its own NATS account, reaches the ledger account's JetStream API. */
export const TENANT_JS_API_PREFIX = "JS.LEDGER.API";

/** A host-supplied id as a subject token: verbatim when 1–64 of
 * [A-Za-z0-9-], else "_" and the first 32 hex digits of its SHA-256. */
export function token(value: string): string {
  return VERBATIM.test(value) ? value : "_" + sha256Hex(Buffer.from(value, "utf8")).slice(0, 32);
}

/** A tenant's reply inbox prefix: the only one its receipts may go to. */
export function inboxPrefix(tenant: string): string {
  return `_INBOX_${token(tenant)}`;
}

/** Python's urllib.parse.quote(value, safe=""): UTF-8, unreserved kept. */
function percentEncode(value: string): string {
  return [...Buffer.from(value, "utf8")]
    .map((b) => (/[A-Za-z0-9_.~-]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : "%" + b.toString(16).toUpperCase().padStart(2, "0")))
    .join("");
}

/** The headers of a request scoped to `tenant`: its name, when the subject's token is a hash. */
export function tenantHeaders(tenant: string | undefined): Record<string, string> | undefined {
  if (tenant === undefined || token(tenant) === tenant) return undefined;
  return { [TENANT_HEADER]: percentEncode(tenant) };
}

function bucketStem(prefix: string): string {
  return prefix.replace(/[^A-Za-z0-9]/g, "_").toUpperCase();
}

export class Subjects {
  constructor(readonly prefix = "ledger") {}

  append(tenant: string, laneId: string): string {
    return `${this.prefix}.append.${token(tenant)}.${token(laneId)}`;
  }

  command(op: string, tenant?: string): string {
    return tenant === undefined ? `${this.prefix}.cmd.${op}` : `${this.prefix}.cmd.${token(tenant)}.${op}`;
  }

  checkpoint(op: string, tenant?: string): string {
    return tenant === undefined ? `${this.prefix}.checkpoint.${op}` : `${this.prefix}.checkpoint.${token(tenant)}.${op}`;
  }

  /** The shared bucket of trusted writers' blobs (LEDGER_BLOBS). */
  get blobBucket(): string {
    return `${bucketStem(this.prefix)}_BLOBS`;
  }

  /** A tenant's uploads bucket (LEDGER_UPLOADS_<token>). */
  uploadsBucket(tenant: string): string {
    return `${bucketStem(this.prefix)}_UPLOADS_${token(tenant)}`;
  }

  /** A tenant's committed blobs (LEDGER_BLOBS_<token>), written by the sequencer only. */
  tenantBlobBucket(tenant: string): string {
    return `${bucketStem(this.prefix)}_BLOBS_${token(tenant)}`;
  }
}

/** A blob's object name: `<tenant token>/<hex sha256>`. */
export function objectName(tenant: string, ref: string): string {
  return `${token(tenant)}/${ref.replace(/^sha256:/, "")}`;
}
