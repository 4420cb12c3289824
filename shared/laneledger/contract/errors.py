"""Every error laneledger raises or puts on the wire.

Each error has a stable ``code`` (snake_case, part of the contract in
``spec/errors.md``), a human ``message``, ``details`` naming the fields and
values involved, and ``retryable``: whether sending the same thing again can
ever succeed without changing it.

The tree::

    LedgerError
    ├── RequestError                    the request itself is wrong; do not resend it
    │   ├── MalformedMessage            malformed_message      undecodable bytes
    │   ├── InvalidRequest              invalid_request        wrong schema; names the field path
    │   ├── RequestTooLarge             request_too_large      over the size or event-count limit
    │   ├── NotCanonicalizable          not_canonicalizable    a value RFC 8785 cannot encode
    │   ├── UnknownEventType            unknown_event_type     not core, not a namespaced extension
    │   ├── InvalidPayload              invalid_payload        a core payload of the wrong shape
    │   └── Unauthorized                unauthorized           no valid bearer token (HTTP reads)
    ├── StoreError                      the store refused; the ledger is unchanged
    │   ├── LaneConflict                lane_conflict          expected head != actual head
    │   ├── IdempotencyViolation        idempotency_violation  same id, other content
    │   ├── EntityNotFound              entity_not_found       lane, actor, turn, … does not exist
    │   ├── DuplicateEvent              duplicate_event        event id already committed
    │   ├── SubjectMismatch             subject_mismatch       subject not in the target lane
    │   ├── EntityConflict              entity_conflict        same key, other attributes
    │   ├── CausationViolation          causation_violation    causation outside session / not earlier
    │   ├── TenantMismatch              tenant_mismatch        a cross-tenant write
    │   ├── SignatureRequired           signature_required     a keyed actor's event is unsigned
    │   ├── InvalidSignature            invalid_signature      a signature that does not verify
    │   └── BlobMissing                 blob_missing           a referenced blob is not stored yet
    ├── IntegrityError                  integrity_failure      a chain or blob check failed
    │   └── ChainFault                  chain_fault            first bad position/seq and fault kind
    ├── QuotaExceeded                   quota_exceeded         a tenant's limit is reached (resend later)
    ├── TransportError                  the request may or may not have arrived
    │   ├── LedgerTimeout               timeout                no answer in time (resend same id)
    │   └── LedgerUnavailable           unavailable            no server / stream (resend later)
    └── InternalError                   internal               a bug or a broken disk; retryable

The checkpoint refusals (``spec/checkpoint.md``) are subclasses that keep
their parent's code and are told apart on the wire by ``details["reason"]``
(their ``reason``); ``error_from_wire`` picks them by code, then reason::

    EntityConflict   RevisionConflict     revision_conflict
                     AnchorMismatch       anchor_mismatch
                     ArtifactMismatch     artifact_mismatch
    EntityNotFound   AnchorNotCommitted   anchor_not_committed
                     ArtifactMissing      artifact_missing

The transparency log's failed checks (``laneledger.tlog``, spec/tlog.md) are
subclasses of ``IntegrityError`` in the same way::

    IntegrityError   ProofInvalid         proof_invalid
                     NoteUnverified       note_unverified
                     NoteSignatureInvalid note_signature_invalid

``http_status`` is the status of an error's code over HTTP (``spec/errors.md``,
"HTTP status"), inherited from the branch unless a leaf has its own: 500 for
the root (an unknown code), internal and integrity failures.

Foreign errors (sqlite3, nats) are translated where they are caught, one place
each, with ``raise ... from exc``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class LedgerError(Exception):
    code: ClassVar[str] = "ledger_error"
    retryable: ClassVar[bool] = False
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, /, **details: Any) -> None:
        # ``message`` is positional-only so a details key named "message" (or
        # "self") from the wire cannot collide with it.
        super().__init__(message)
        self.message = message
        self.details = details

    def __str__(self) -> str:
        if not self.details:
            return f"{self.code}: {self.message}"
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(self.details.items()))
        return f"{self.code}: {self.message} ({shown})"

    def to_wire(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "details": self.details,
        }


# -- the request is wrong ---------------------------------------------------


class RequestError(LedgerError):
    code = "request_error"
    http_status = 400


class MalformedMessage(RequestError):
    code = "malformed_message"


class InvalidRequest(RequestError):
    code = "invalid_request"


class RequestTooLarge(RequestError):
    code = "request_too_large"
    http_status = 413


class NotCanonicalizable(RequestError):
    code = "not_canonicalizable"


class UnknownEventType(RequestError):
    code = "unknown_event_type"
    http_status = 422


class InvalidPayload(RequestError):
    code = "invalid_payload"
    http_status = 422


class Unauthorized(RequestError):
    """No bearer token, or one no tenant or operator is configured with
    (HTTP 401; ``laneledger.runtime.access``)."""

    code = "unauthorized"
    http_status = 401


# -- the store refused --------------------------------------------------------


class StoreError(LedgerError):
    code = "store_error"
    http_status = 409


class LaneConflict(StoreError):
    """The lane head moved: reload the lane and decide again."""

    code = "lane_conflict"


class IdempotencyViolation(StoreError):
    code = "idempotency_violation"


class EntityNotFound(StoreError):
    code = "entity_not_found"
    http_status = 404


class DuplicateEvent(StoreError):
    code = "duplicate_event"


class SubjectMismatch(StoreError):
    code = "subject_mismatch"
    http_status = 422


class EntityConflict(StoreError):
    code = "entity_conflict"


class CausationViolation(StoreError):
    code = "causation_violation"
    http_status = 422


class TenantMismatch(StoreError):
    code = "tenant_mismatch"
    http_status = 403


class SignatureRequired(StoreError):
    """The event's actor is registered with a public key; the event has no
    ``signature``."""

    code = "signature_required"
    http_status = 403


class InvalidSignature(StoreError):
    """``details['reason']``: ``forged`` (does not verify under the actor's
    key) or ``unregistered_key`` (the actor has no key to check it with)."""

    code = "invalid_signature"
    http_status = 403


class BlobMissing(StoreError):
    """An event references a content blob (``{"_ref": …}`` or a
    ``payload_refs`` descriptor) that the lane's tenant has not stored, or
    stored with another size. ``details``: ``event_id``, ``ref``,
    ``size_bytes``, ``path``. Store the blob, then resend."""

    code = "blob_missing"
    http_status = 422


# -- integrity ----------------------------------------------------------------


class IntegrityError(LedgerError):
    code = "integrity_failure"


class ChainFault(IntegrityError):
    """A hash chain does not verify. ``details`` holds ``seq`` (or ``position``)
    of the first bad record and ``kind``: one of ``broken_link``,
    ``content_tampered``, ``not_chained``."""

    code = "chain_fault"


# -- limits -------------------------------------------------------------------


class QuotaExceeded(LedgerError):
    """One of a tenant's limits (its tenants file entry, spec/wire.md
    "Tenants and limits") is reached: nothing was stored. ``details``:
    ``limit`` (``append_backlog``, ``append_backlog_bytes``, ``blob_bytes``,
    ``artifact_bytes``, ``inline_bytes``, ``checkpoint_state_bytes``),
    ``tenant``, and where known the stream or bucket, or the tenant's
    ``used_bytes``, ``request_bytes`` and ``limit_bytes``.
    Retryable: the same request succeeds once the backlog drains or space is
    freed; resend it later, more slowly."""

    code = "quota_exceeded"
    retryable = True
    http_status = 429


# -- transport ----------------------------------------------------------------


class TransportError(LedgerError):
    code = "transport_error"
    retryable = True
    http_status = 503


class LedgerTimeout(TransportError):
    code = "timeout"
    http_status = 504


class LedgerUnavailable(TransportError):
    code = "unavailable"


class InternalError(LedgerError):
    code = "internal"
    retryable = True


# -- checkpoint refusals (spec/checkpoint.md, "Errors") ---------------------


class RevisionConflict(EntityConflict):
    """``expected_revision`` is not the key's latest revision. Details:
    ``kind`` ``checkpoint``, ``key``, ``expected_revision``, ``actual_revision``."""

    reason: ClassVar[str] = "revision_conflict"


class AnchorNotCommitted(EntityNotFound):
    """The anchored lane event was not committed (as far as the service has
    consumed the committed stream) within the bounded wait. Details: ``kind``
    ``event``, ``id``, ``lane_id``, ``seq``, ``lane_last_seq``, ``waited_s``."""

    reason: ClassVar[str] = "anchor_not_committed"


class AnchorMismatch(EntityConflict):
    """The anchored seq holds another event (or the lane is in another session
    or run than the checkpoint says). Details: ``kind`` ``anchor``,
    ``lane_id``, ``seq``, ``fields``, ``event_id``, ``committed_event_id``."""

    reason: ClassVar[str] = "anchor_mismatch"


class ArtifactMissing(EntityNotFound):
    """The referenced blob is not in the artifact bucket. Details: ``kind``
    ``artifact``, ``id`` (the sha256)."""

    reason: ClassVar[str] = "artifact_missing"


class ArtifactMismatch(EntityConflict):
    """The blob stored under that sha256 has another size than the reference
    says. Details: ``kind`` ``artifact``, ``id``, ``fields``, ``size_bytes``,
    ``stored_size_bytes``."""

    reason: ClassVar[str] = "artifact_mismatch"


# -- transparency log checks (spec/tlog.md) ----------------------------------


class ProofInvalid(IntegrityError):
    """An inclusion or consistency proof does not verify. Details: ``kind``
    (``inclusion`` or ``consistency``) and the sizes and index checked."""

    reason: ClassVar[str] = "proof_invalid"


class NoteUnverified(IntegrityError):
    """A signed note carries no signature from any key the verifier trusts.
    Details: ``signers`` (the ``name+hash`` of each signature it does carry)."""

    reason: ClassVar[str] = "note_unverified"


class NoteSignatureInvalid(IntegrityError):
    """A signature by a trusted key (its name and key hash match) does not
    verify: the note or the signature was changed. Details: ``key``
    (``name+hash``)."""

    reason: ClassVar[str] = "note_signature_invalid"


# -- from the wire ------------------------------------------------------------


def _all_subclasses(cls: type[LedgerError]) -> list[type[LedgerError]]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_all_subclasses(sub))
    return found


_TREE: list[type[LedgerError]] = [LedgerError, *_all_subclasses(LedgerError)]
# The classes of the wire codes; a subclass without a code of its own (a
# checkpoint refusal, natsserver's NatsServerError) is not one.
ERRORS_BY_CODE: dict[str, type[LedgerError]] = {cls.code: cls for cls in _TREE if "code" in vars(cls)}
# The subclasses one code covers, by (code, details["reason"]).
ERRORS_BY_REASON: dict[tuple[str, str], type[LedgerError]] = {
    (cls.code, vars(cls)["reason"]): cls for cls in _TREE if "reason" in vars(cls)
}


def error_from_wire(
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    retryable: bool | None = None,
) -> LedgerError:
    """Rebuild the typed exception a receipt or reply carries
    (``error_from_wire(**body)`` for an ``ErrorBody``): the class of the code,
    or its subclass that ``details["reason"]`` names (``ERRORS_BY_REASON``).
    An unknown code (from a newer server) becomes a plain LedgerError that
    keeps the code and the wire's ``retryable``; a known code takes
    ``retryable`` from its class."""
    details = details or {}
    cls = ERRORS_BY_CODE.get(code)
    reason = details.get("reason")
    if isinstance(reason, str):
        cls = ERRORS_BY_REASON.get((code, reason), cls)
    if cls is None:
        err = LedgerError(message, **details)
        err.code = code  # type: ignore[misc]
        if retryable is not None:
            err.retryable = retryable  # type: ignore[misc]
        return err
    return cls(message, **details)
