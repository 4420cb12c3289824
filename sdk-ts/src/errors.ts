// The error tree of spec/errors.md: the same codes, classes and `retryable`
// as the Python SDK (shared/laneledger/contract/errors.py). Clients branch on
// `code`, never on `message`.

export type Details = Record<string, unknown>;

/** The wire form of an error (`ErrorBody` in model.py). */
export interface ErrorBody {
  code: string;
  message: string;
  retryable?: boolean;
  details?: Details;
}

export class LedgerError extends Error {
  static readonly code: string = "ledger_error";
  static readonly retryable: boolean = false;
  code: string;
  retryable: boolean;
  details: Details;

  constructor(message: string, details: Details = {}) {
    super(message);
    const cls = new.target as unknown as { code: string; retryable: boolean; name: string };
    this.name = cls.name;
    this.code = cls.code;
    this.retryable = cls.retryable;
    this.details = details;
  }

  toWire(): Required<ErrorBody> {
    return { code: this.code, message: this.message, retryable: this.retryable, details: this.details };
  }
}

// -- the request itself is wrong; do not resend it
export class RequestError extends LedgerError {
  static override readonly code: string = "request_error";
}
export class MalformedMessage extends RequestError {
  static override readonly code: string = "malformed_message";
}
export class InvalidRequest extends RequestError {
  static override readonly code: string = "invalid_request";
}
export class RequestTooLarge extends RequestError {
  static override readonly code: string = "request_too_large";
}
export class NotCanonicalizable extends RequestError {
  static override readonly code: string = "not_canonicalizable";
}
export class UnknownEventType extends RequestError {
  static override readonly code: string = "unknown_event_type";
}
export class InvalidPayload extends RequestError {
  static override readonly code: string = "invalid_payload";
}
export class Unauthorized extends RequestError {
  static override readonly code: string = "unauthorized";
}

// -- the store refused; the ledger is unchanged
export class StoreError extends LedgerError {
  static override readonly code: string = "store_error";
}
export class LaneConflict extends StoreError {
  static override readonly code: string = "lane_conflict";
}
export class IdempotencyViolation extends StoreError {
  static override readonly code: string = "idempotency_violation";
}
export class EntityNotFound extends StoreError {
  static override readonly code: string = "entity_not_found";
}
export class DuplicateEvent extends StoreError {
  static override readonly code: string = "duplicate_event";
}
export class SubjectMismatch extends StoreError {
  static override readonly code: string = "subject_mismatch";
}
export class EntityConflict extends StoreError {
  static override readonly code: string = "entity_conflict";
}
export class CausationViolation extends StoreError {
  static override readonly code: string = "causation_violation";
}
export class TenantMismatch extends StoreError {
  static override readonly code: string = "tenant_mismatch";
}
export class SignatureRequired extends StoreError {
  static override readonly code: string = "signature_required";
}
export class InvalidSignature extends StoreError {
  static override readonly code: string = "invalid_signature";
}
export class BlobMissing extends StoreError {
  static override readonly code: string = "blob_missing";
}

export class IntegrityError extends LedgerError {
  static override readonly code: string = "integrity_failure";
}
export class ChainFault extends IntegrityError {
  static override readonly code: string = "chain_fault";
}

export class QuotaExceeded extends LedgerError {
  static override readonly code: string = "quota_exceeded";
  static override readonly retryable: boolean = true;
}

// -- the request may or may not have arrived: resend with the same id
export class TransportError extends LedgerError {
  static override readonly code: string = "transport_error";
  static override readonly retryable: boolean = true;
}
export class LedgerTimeout extends TransportError {
  static override readonly code: string = "timeout";
}
export class LedgerUnavailable extends TransportError {
  static override readonly code: string = "unavailable";
}

export class InternalError extends LedgerError {
  static override readonly code: string = "internal";
  static override readonly retryable: boolean = true;
}

type ErrorClass = (new (message: string, details?: Details) => LedgerError) & { code: string };

const TREE: ErrorClass[] = [
  LedgerError, RequestError, MalformedMessage, InvalidRequest, RequestTooLarge, NotCanonicalizable,
  UnknownEventType, InvalidPayload, Unauthorized, StoreError, LaneConflict, IdempotencyViolation,
  EntityNotFound, DuplicateEvent, SubjectMismatch, EntityConflict, CausationViolation, TenantMismatch,
  SignatureRequired, InvalidSignature, BlobMissing, IntegrityError, ChainFault, QuotaExceeded,
  TransportError, LedgerTimeout, LedgerUnavailable, InternalError,
];

/** The class of each wire code (spec/errors.md, "Codes"). */
export const ERRORS_BY_CODE: ReadonlyMap<string, ErrorClass> = new Map(TREE.map((cls) => [cls.code, cls]));

/** The typed error an ErrorBody carries. An unknown code (a newer server)
 * is a plain LedgerError that keeps the wire's code and `retryable`. */
export function errorFromWire(body: ErrorBody): LedgerError {
  const details = isRecord(body.details) ? body.details : {};
  const cls = ERRORS_BY_CODE.get(body.code);
  if (cls === undefined) {
    const err = new LedgerError(String(body.message), details);
    err.code = String(body.code);
    if (typeof body.retryable === "boolean") err.retryable = body.retryable;
    return err;
  }
  return new cls(String(body.message), details);
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
