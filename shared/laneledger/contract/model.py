"""Wire messages and stored objects (normative text: ``spec/object-model.md``
and ``spec/wire.md``).

Every message is a frozen msgspec Struct. Messages that share a subject form
a tagged union decoded by one prebuilt decoder and dispatched with ``match``.
``decode()`` turns msgspec's errors into typed ledger errors that name the
field path.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from laneledger.contract.errors import InvalidRequest, MalformedMessage, RequestTooLarge

if TYPE_CHECKING:
    # A type or a union of types (``ReplyOk | ReplyError``), as msgspec's own
    # stubs accept; only the checker needs it.
    from typing_extensions import TypeForm

# -- limits (spec/wire.md) ---------------------------------------------------------
MAX_REQUEST_BYTES = 1024 * 1024  # also NATS's default max_payload
MAX_EVENTS_PER_APPEND = 1000
MAX_ID_LENGTH = 256
# Integers on the wire are I-JSON's exact range (RFC 7493), which is also what
# SQLite and every JSON reader can hold: a larger seq or count is invalid_request.
MAX_WIRE_INT = 2**53 - 1
# Arrays and objects inside one another, the message itself counting as one.
# Far past what agents send, and well inside the recursion every reader of a
# committed event (decoders, canonical form, redaction) can afford.
MAX_NESTING = 128

Id = Annotated[str, Meta(min_length=1, max_length=MAX_ID_LENGTH)]
Seq = Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)]
WireCount = Seq  # a size, a duration: any I-JSON integer from 0
Hash = Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$")]
# RFC 3339 with a 'T', seconds, optional fraction, and an explicit offset. Kept
# as the producer's string: the ledger never re-renders it.
Timestamp = Annotated[
    str,
    Meta(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$"),
]
EventType = Annotated[str, Meta(min_length=3, max_length=128)]
# Producer-sent text that is not an id (spec/wire.md, "Field bounds"): far
# past what a harness sends, so the bound only ever stops an attack.
MAX_LABEL_LENGTH = 128
MAX_NAME_LENGTH = 1024
MAX_ATTRIBUTES = 256  # entries of an actor's attributes
MAX_ATTRIBUTES_BYTES = 64 * 1024  # their JSON
Label = Annotated[str, Meta(min_length=1, max_length=MAX_LABEL_LENGTH)]  # a kind, an effect, a version
Name = Annotated[str, Meta(max_length=MAX_NAME_LENGTH)]  # a display or action name, an idempotency key
MediaType = Annotated[str, Meta(min_length=1, max_length=256)]
Attributes = Annotated[dict[Id, Any], Meta(max_length=MAX_ATTRIBUTES)]


def check_attributes(attributes: dict[str, Any]) -> None:
    """``attributes`` within its byte bound. msgspec reports a ``ValueError``
    from ``__post_init__`` at the struct, so the message names the field's
    path the way msgspec's own do (``decode`` reads it from there)."""
    size = len(msgspec.json.encode(attributes))
    if size > MAX_ATTRIBUTES_BYTES:
        raise ValueError(
            f"attributes are {size} bytes of JSON, the limit is {MAX_ATTRIBUTES_BYTES} - at `$.attributes`"
        )


def timestamp_problem(value: str) -> str | None:
    """Why a string of ``Timestamp``'s shape names no real instant (a 30
    February, hour 99, offset +25:00), or None. The pattern checks only the
    shape; a leap second (``:60``) is a real instant and is accepted."""
    text = value[:17] + "59" + value[19:] if value[17:19] == "60" else value
    try:
        datetime.fromisoformat(text)
    except ValueError as exc:
        return str(exc)
    return None


# ed25519 in lowercase hex (laneledger.contract.signing): a 32-byte public key, a 64-byte signature.
PublicKey = Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$")]
Signature = Annotated[str, Meta(pattern=r"^[0-9a-f]{128}$")]
JsonObject = dict[str, Any]


class Frozen(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Base of every message: immutable, strict about unknown
    fields (a typo must be an error, not silently dropped data)."""


# -- events -------------------------------------------------------------------------


class ProposedEvent(Frozen, frozen=True, kw_only=True):
    """An event as a producer proposes it. The append digest and the hash
    chain cover these fields exactly as sent.

    Each event has exactly one JSON rendering of its fields: ``payload`` and
    ``extensions`` are always present and ``causation_id`` is absent or a
    string (never null). So decoding a committed event into this struct and
    encoding it again gives back the hashed object, and verification can work
    from typed events.
    """

    schema_version: Label
    id: Id
    lane_id: Id
    subject_id: Id
    event_type: EventType
    actor_id: Id
    occurred_at: Timestamp
    payload: JsonObject
    extensions: JsonObject
    causation_id: Id | UnsetType = UNSET
    # Whose personal data the event holds, if anyone's: a pseudonymous id the
    # producer chooses, by which an erasure finds the events (spec/erasure.md).
    data_subject: Id | UnsetType = UNSET
    # Absent unless the actor signs (spec/object-model.md, "Signed producers");
    # never null, so an unsigned event renders as it did before signatures.
    signature: Signature | UnsetType = UNSET


class ErasureMark(Frozen, frozen=True, kw_only=True):
    """What an erased event names: the erasure event that erased it
    (spec/erasure.md)."""

    position: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    event_id: Id


class CommittedEvent(ProposedEvent, frozen=True, kw_only=True):
    """An event as stored and published on the committed stream: the proposed
    fields plus the ledger-owned ones, all inside the hash chain except
    ``entry_hash`` itself.

    A sealed event (spec/canonical.md §3) carries ``content_salt``; once
    erased (spec/erasure.md) it carries instead ``content_digest`` and
    ``erased``, with an empty ``payload`` and ``extensions`` and no
    ``signature``. An event committed before sealing has none of the three."""

    tenant: Id
    session_id: Id
    run_id: Id
    seq: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    position: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    append_id: Id
    committed_at: Timestamp
    prev_hash: Hash
    entry_hash: Hash
    content_salt: Hash | UnsetType = UNSET
    content_digest: Hash | UnsetType = UNSET
    erased: ErasureMark | UnsetType = UNSET


LEDGER_OWNED_FIELDS = (
    "tenant",
    "session_id",
    "run_id",
    "seq",
    "position",
    "append_id",
    "committed_at",
    "prev_hash",
    "entry_hash",
    "content_salt",
    "content_digest",
    "erased",
)


# -- appends and receipts -----------------------------------------------------------


class AppendRequest(Frozen, frozen=True, kw_only=True):
    """Published to ``<prefix>.append.<tenant>.<lane>``. The events decode
    straight to ``ProposedEvent`` (a bad one is named by its path,
    ``$.events[2].occurred_at``); since each has one JSON rendering,
    ``msgspec.to_builtins`` gives back each object exactly as sent, and that is
    what the digest and the chain hash."""

    lane_id: Id
    expected_last_seq: Seq
    append_id: Id
    events: Annotated[list[ProposedEvent], Meta(min_length=1, max_length=MAX_EVENTS_PER_APPEND)]


class ErrorBody(Frozen, frozen=True, kw_only=True, omit_defaults=False):
    """A typed error (spec/errors.md), on NATS (a receipt's or a reply's
    ``error``) and over HTTP alike. All four fields are always sent; a
    reader takes a missing ``retryable`` as false and missing ``details`` as {}."""

    code: Annotated[str, Meta(description="stable code, spec/errors.md")]
    message: str
    retryable: bool = False
    details: JsonObject = {}


class AppendCommitted(Frozen, frozen=True, kw_only=True, tag="committed", tag_field="outcome"):
    append_id: Id
    lane_id: Id
    digest: Hash
    first_seq: int
    last_seq: int
    event_ids: list[str]
    positions: list[int]
    entry_hashes: list[str]
    committed_at: Timestamp
    replayed: bool = False


class AppendRejected(Frozen, frozen=True, kw_only=True, tag="rejected", tag_field="outcome"):
    error: ErrorBody
    append_id: str | None = None
    lane_id: str | None = None
    digest: str | None = None


Receipt = AppendCommitted | AppendRejected


# -- structure ----------------------------------------------------------------------


class Actor(Frozen, frozen=True, kw_only=True):
    id: Id
    tenant: Id
    key: Id
    kind: str
    display_name: str | None = None
    attributes: JsonObject = {}
    # Set: every event of this actor must carry a valid signature. Part of the
    # actor's identity: it never changes (a new key is a new actor).
    public_key: PublicKey | None = None
    created_at: Timestamp


class ForkPoint(Frozen, frozen=True, kw_only=True):
    """Where a fork starts: the origin lane and the seq of its last event the
    fork keeps (``CreateLane.fork_of``)."""

    lane_id: Id
    seq: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]


class ForkOrigin(Frozen, frozen=True, kw_only=True):
    """A forked lane's origin as the ledger resolved it: the fork references
    the origin's events up to ``seq`` instead of copying them."""

    lane_id: Id
    seq: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    position: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    event_id: Id
    entry_hash: Hash


class Lane(Frozen, frozen=True, kw_only=True):
    id: Id
    tenant: Id
    session_id: Id
    run_id: Id
    name: Id
    kind: str = "main"
    parent_lane_id: Id | None = None
    actor_id: Id | None = None
    created_at: Timestamp
    forked_from: ForkOrigin | None = None
    last_seq: Seq = 0
    head_hash: Hash = "0" * 64


class Turn(Frozen, frozen=True, kw_only=True):
    id: Id
    lane_id: Id
    turn_no: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    created_at: Timestamp


class Action(Frozen, frozen=True, kw_only=True):
    id: Id
    lane_id: Id
    turn_id: Id
    action_type: str
    name: str
    effect: str
    idempotency: str
    idempotency_key: str | None = None
    created_at: Timestamp


class Attempt(Frozen, frozen=True, kw_only=True):
    id: Id
    lane_id: Id
    action_id: Id
    attempt_no: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    created_at: Timestamp


# -- checkpoints ----------------------------------------------------------------------


class Anchor(Frozen, frozen=True, kw_only=True):
    """The last lane event a checkpoint has applied."""

    lane_id: Id
    seq: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    event_id: Id


class ArtifactRef(Frozen, frozen=True, kw_only=True):
    sha256: Hash
    size_bytes: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)]
    media_type: MediaType


class Checkpoint(Frozen, frozen=True, kw_only=True):
    id: Id
    key: Id
    revision: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    format: str
    digest: Hash
    session_id: Id | None = None
    run_id: Id | None = None
    tenant: Id | None = None
    # Whose personal data the state holds (spec/checkpoint.md, "Erasure"):
    # an erasure of that data subject in the ledger erases the revision.
    data_subject: Id | None = None
    state: Any = None
    artifact: ArtifactRef | None = None
    anchor: Anchor | None = None
    # Saved as the safe terminal boundary of its run: a
    # lane.framework.checkpoint.linked event is expected to name it
    # (spec/checkpoint.md, "The terminal pattern").
    terminal: bool = False
    created_at: Timestamp


# -- commands to the sequencer (request/reply on <prefix>.cmd.<op>) ------------------
#
# Every id is its tenant's own (spec/object-model.md, "Identity"): two tenants
# may use one id for different things. A command that looks something up by
# id carries ``tenant``, whose ids they are: on a tenant's subject
# (``<prefix>.cmd.<tenant>.<op>``) that tenant, and leaving it out means it;
# on the unscoped subject it may be left out while only one tenant uses the
# id (``invalid_request`` naming ``$.tenant`` otherwise).


class EnsureActor(Frozen, frozen=True, kw_only=True, tag="ensure_actor", tag_field="op"):
    tenant: Id
    key: Id
    kind: Label
    display_name: Name | None = None
    attributes: Attributes = {}
    public_key: PublicKey | None = None

    def __post_init__(self) -> None:
        check_attributes(self.attributes)


class CreateLane(Frozen, frozen=True, kw_only=True, tag="create_lane", tag_field="op"):
    tenant: Id
    session_id: Id
    run_id: Id
    name: Id
    kind: Label = "main"
    parent_lane_id: Id | None = None
    actor_id: Id | None = None
    id: Id | None = None
    # Fork an existing lane of the same session (any run) at one of its events.
    fork_of: ForkPoint | None = None


class CreateTurn(Frozen, frozen=True, kw_only=True, tag="create_turn", tag_field="op"):
    lane_id: Id
    turn_no: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    id: Id | None = None
    tenant: Id | None = None  # whose ids: see above


class CreateAction(Frozen, frozen=True, kw_only=True, tag="create_action", tag_field="op"):
    lane_id: Id
    turn_id: Id
    action_type: Label
    name: Name
    effect: Label
    idempotency: Label
    idempotency_key: Name | None = None
    id: Id | None = None
    tenant: Id | None = None  # whose ids: see above


class CreateAttempt(Frozen, frozen=True, kw_only=True, tag="create_attempt", tag_field="op"):
    lane_id: Id
    action_id: Id
    attempt_no: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    id: Id | None = None
    tenant: Id | None = None  # whose ids: see above


class GetLane(Frozen, frozen=True, kw_only=True, tag="get_lane", tag_field="op"):
    lane_id: Id
    tenant: Id | None = None  # whose ids: see above


class LoadLane(Frozen, frozen=True, kw_only=True, tag="load_lane", tag_field="op"):
    lane_id: Id
    after_seq: Seq = 0
    limit: Annotated[int, Meta(ge=1, le=10_000)] = 1000
    tenant: Id | None = None  # whose ids: see above


class LoadRun(Frozen, frozen=True, kw_only=True, tag="load_run", tag_field="op"):
    """One page of a run's events (``EventsPage``); its structure is ``load_structure``'s."""

    session_id: Id
    run_id: Id
    after_position: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)] = 0
    limit: Annotated[int, Meta(ge=1, le=10_000)] = 1000
    tenant: Id | None = None  # whose ids: see above


class LoadSession(Frozen, frozen=True, kw_only=True, tag="load_session", tag_field="op"):
    """One page of a session's events (``EventsPage``): the SDK's
    ``load_session`` reads them all, page by page, with the structure."""

    session_id: Id
    after_position: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)] = 0
    limit: Annotated[int, Meta(ge=1, le=10_000)] = 1000
    tenant: Id | None = None  # whose ids: see above


class StructureCursor(Frozen, frozen=True, kw_only=True):
    """Where a ``load_structure`` page ends: the last row read of each kind."""

    lanes: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)] = 0
    turns: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)] = 0
    actions: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)] = 0
    attempts: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)] = 0


class LoadStructure(Frozen, frozen=True, kw_only=True, tag="load_structure", tag_field="op"):
    """A session's (or one run's) lanes, turns, actions and attempts, page by
    page and without events: ``load_session`` for sessions too large for
    one reply."""

    session_id: Id
    run_id: Id | None = None
    after: StructureCursor = StructureCursor()
    limit: Annotated[int, Meta(ge=1, le=10_000)] = 1000
    tenant: Id | None = None  # whose ids: see above


class GetReceipt(Frozen, frozen=True, kw_only=True, tag="get_receipt", tag_field="op"):
    append_id: Id
    tenant: Id | None = None  # whose ids: see above


class Erase(Frozen, frozen=True, kw_only=True, tag="erase", tag_field="op"):
    """Erase the content of a session's sealed events, of one run's, of
    every event naming a data subject, or of every event of the tenant
    committed before a time (retention) (spec/erasure.md). The first request commits the erasure event (its id
    is ``erasure_id``) and every request erases the next ``limit`` events the
    erasure covers after ``after_position``; the same request again changes
    nothing more. ``dry_run``: count, erase nothing, commit nothing."""

    erasure_id: Id
    actor_id: Id  # who asks: an actor of the tenant
    reason: Annotated[str, Meta(min_length=1, max_length=MAX_NAME_LENGTH)]
    # The scope: a session (or one run of it), every event of a data subject,
    # or (retention) every event of the tenant committed before a time.
    session_id: Id | None = None
    run_id: Id | None = None
    data_subject: Id | None = None
    committed_before: Timestamp | None = None
    after_position: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)] = 0
    limit: Annotated[int, Meta(ge=1, le=500)] = 200
    dry_run: bool = False
    tenant: Id | None = None  # whose ids: see above


class ErasurePage(Frozen, frozen=True, kw_only=True, omit_defaults=False):
    """What one ``erase`` request did. ``erasure``: the erasure event's mark
    (None on a dry run of an erasure not yet committed). ``erased``: events
    of this page erased now; ``already_erased`` and ``unsealed`` (committed
    before sealing: they cannot be erased, spec/erasure.md) were left as
    they were. ``next_after_position``: send the request again with it while
    ``has_more``."""

    erasure_id: Id
    erasure: ErasureMark | None
    erased: int
    already_erased: int
    unsealed: int
    has_more: bool
    next_after_position: int
    dry_run: bool


Command = (
    EnsureActor
    | CreateLane
    | CreateTurn
    | CreateAction
    | CreateAttempt
    | GetLane
    | LoadLane
    | LoadRun
    | LoadSession
    | LoadStructure
    | GetReceipt
    | Erase
)


class ReplyOk(Frozen, frozen=True, kw_only=True, tag="ok", tag_field="status"):
    result: Any = None


class ReplyError(Frozen, frozen=True, kw_only=True, tag="error", tag_field="status"):
    error: ErrorBody


Reply = ReplyOk | ReplyError


# -- read views ---------------------------------------------------------------------


class LanePage(Frozen, frozen=True, kw_only=True):
    lane: Lane
    events: list[CommittedEvent]
    has_more: bool


class RunView(Frozen, frozen=True, kw_only=True):
    session_id: Id
    run_id: Id
    lanes: list[Lane]
    turns: list[Turn]
    actions: list[Action]
    attempts: list[Attempt]
    events: list[CommittedEvent]


class StructurePage(Frozen, frozen=True, kw_only=True):
    """One ``load_structure`` page: up to ``limit`` rows of each kind after
    the cursor; ``next`` is the cursor of the following page."""

    session_id: Id
    tenant: Id
    run_id: Id | None = None
    lanes: list[Lane]
    turns: list[Turn]
    actions: list[Action]
    attempts: list[Attempt]
    next: StructureCursor
    has_more: bool


class EventsPage(Frozen, frozen=True, kw_only=True):
    """One ``load_session`` / ``load_run`` page: the session's (run's) events
    after ``after_position`` by position, up to ``limit`` and half the
    server's max_payload of stored bytes (at least one event);
    ``next_position`` is the ``after_position`` of the next page."""

    session_id: Id
    tenant: Id
    run_id: Id | None = None
    events: list[CommittedEvent]
    next_position: int
    has_more: bool


class SessionView(Frozen, frozen=True, kw_only=True):
    session_id: Id
    tenant: Id
    run_ids: list[str]
    lanes: list[Lane]
    turns: list[Turn]
    actions: list[Action]
    attempts: list[Attempt]
    events: list[CommittedEvent]


# -- decoding -----------------------------------------------------------------------

T = TypeVar("T")

_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def decoder(kind: TypeForm[T]) -> msgspec.json.Decoder[T]:
    """The one prebuilt decoder for a message type (built on first use)."""
    found = _decoders.get(kind)
    if found is None:
        found = _decoders[kind] = msgspec.json.Decoder(kind)
    return found


_encoder = msgspec.json.Encoder()
encode = _encoder.encode


def decode(data: bytes, kind: TypeForm[T], *, max_bytes: int = MAX_REQUEST_BYTES) -> T:
    """Decode ``data`` as ``kind`` or raise a typed error naming what is wrong:
    ``RequestTooLarge``, ``MalformedMessage`` (not JSON), ``InvalidRequest``
    (JSON of the wrong shape; ``details['path']`` is the field path)."""
    if len(data) > max_bytes:
        raise RequestTooLarge(
            f"message is {len(data)} bytes, the limit is {max_bytes}",
            size_bytes=len(data),
            limit_bytes=max_bytes,
        )
    # Counting brackets is nearly free; only a message with more of them than
    # the limit is scanned for its real depth.
    if data.count(b"[") + data.count(b"{") > MAX_NESTING and nesting_depth(data) > MAX_NESTING:
        raise _too_deep()
    try:
        return decoder(kind).decode(data)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(str(exc), path=error_path(exc)) from exc
    except msgspec.DecodeError as exc:
        raise MalformedMessage(f"not valid JSON: {exc}") from exc
    except RecursionError:  # unreachable below MAX_NESTING; kept so it can never escape
        raise _too_deep() from None


def _too_deep() -> InvalidRequest:
    return InvalidRequest(
        f"arrays and objects nest deeper than {MAX_NESTING} levels", path="$", limit=MAX_NESTING
    )


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_A_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def nesting_depth(data: bytes) -> int:
    """How deep arrays and objects nest in JSON ``data``, strings skipped
    (for bytes that are not JSON, a number that is never too small)."""
    depth = deepest = 0
    for byte in _JSON_STRING.sub(b"", data).translate(None, _NOT_A_BRACKET):
        if byte == 0x5B or byte == 0x7B:  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def error_path(exc: msgspec.ValidationError) -> str:
    # msgspec ends its messages with " - at `$.field[0]`" when it knows where.
    text = str(exc)
    marker = " - at `"
    at = text.rfind(marker)
    if at < 0:
        return "$"
    path = text[at + len(marker) : -1]
    # A bad object key: "at `key` in `$.attributes`" names the object.
    return path.removeprefix("key` in `")


# =====================================================================================
# APPEND-ONLY: the checkpoint service (normative text: spec/checkpoint.md).
# Requests are served on <prefix>.checkpoint.<op>, answered by a Reply like the
# sequencer's commands. Add new structs below; do not change the ones above.
# =====================================================================================


class ProposedCheckpoint(Frozen, frozen=True, kw_only=True):
    """A checkpoint as a producer saves it. The service adds ``revision``,
    ``digest`` and ``created_at``. Its RFC 8785 bytes are its *content*: the
    same id with other content is an idempotency violation."""

    id: Id
    key: Id
    format: MediaType
    session_id: Id | None = None
    run_id: Id | None = None
    # The tenant whose tokens may read it; the service derives it from the
    # anchor's lane or the session's lanes and refuses a different one
    # (spec/checkpoint.md, "Tenants").
    tenant: Id | None = None
    # Whose personal data the state holds: a pseudonymous id, as an event's
    # ``data_subject`` (spec/erasure.md); erased with that subject's events.
    data_subject: Id | None = None
    state: Any = None  # inline state; leave it out when ``artifact`` is set
    artifact: ArtifactRef | None = None
    anchor: Anchor | None = None
    terminal: bool = False


class CheckpointInfo(Frozen, frozen=True, kw_only=True):
    """A checkpoint without its inline state: what lists and inspection show."""

    id: Id
    key: Id
    revision: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]
    format: str
    digest: Hash
    session_id: Id | None = None
    run_id: Id | None = None
    tenant: Id | None = None
    data_subject: Id | None = None
    artifact: ArtifactRef | None = None
    anchor: Anchor | None = None
    terminal: bool = False
    state_bytes: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)] = 0  # RFC 8785 size of the inline state
    created_at: Timestamp


# Checkpoint keys and ids are each tenant's own, like every id (spec/checkpoint.md,
# "Tenants"). A read by key or id carries ``tenant``, whose they are: on a
# tenant's subject (or with its token) that tenant, and leaving it out means
# it; for a trusted caller or the operator needed only when several tenants
# have the key or id (``invalid_request`` naming ``$.tenant`` otherwise).
# ``""`` names the checkpoints of no tenant (the operator's alone).
CheckpointTenant = Annotated[str, Meta(max_length=MAX_ID_LENGTH)]


class SaveCheckpoint(Frozen, frozen=True, kw_only=True, tag="save", tag_field="op"):
    expected_revision: Seq
    checkpoint: ProposedCheckpoint
    # How long to wait for an anchor the service has not consumed yet; at most
    # the service's own bound (its --anchor-wait-s), which is the default.
    anchor_wait_s: Annotated[float, Meta(ge=0)] | None = None


class GetCheckpoint(Frozen, frozen=True, kw_only=True, tag="get", tag_field="op"):
    checkpoint_id: Id
    tenant: CheckpointTenant | None = None  # whose id: see above


class LatestCheckpoint(Frozen, frozen=True, kw_only=True, tag="latest", tag_field="op"):
    key: Id
    tenant: CheckpointTenant | None = None  # whose key: see above


class ListRevisions(Frozen, frozen=True, kw_only=True, tag="revisions", tag_field="op"):
    key: Id
    after_revision: Seq = 0
    limit: Annotated[int, Meta(ge=1, le=1000)] = 100
    tenant: CheckpointTenant | None = None  # whose key: see above


class PlanRecovery(Frozen, frozen=True, kw_only=True, tag="recovery_plan", tag_field="op"):
    """By ``key`` (its latest revision), or by ``lane_id`` (the latest saved
    checkpoint anchored in that lane); ``session_id``/``run_id``, when given,
    must be the lane's."""

    key: Id | None = None
    session_id: Id | None = None
    run_id: Id | None = None
    lane_id: Id | None = None
    max_events: Annotated[int, Meta(ge=1, le=10_000)] = 1000
    tenant: CheckpointTenant | None = None  # whose key or lane: see above


class InspectRun(Frozen, frozen=True, kw_only=True, tag="inspect_run", tag_field="op"):
    session_id: Id
    run_id: Id
    tenant: CheckpointTenant | None = None  # whose session: see above


class ReconcileCheckpoints(Frozen, frozen=True, kw_only=True, tag="reconcile", tag_field="op"):
    session_id: Id | None = None
    run_id: Id | None = None
    key: Id | None = None
    limit: Annotated[int, Meta(ge=1, le=1000)] = 100
    # Read-your-writes: also wait for this ledger position (e.g. the last
    # position of a link append's receipt), which may not be on the stream yet.
    min_position: Seq = 0
    tenant: CheckpointTenant | None = None  # only this tenant's (a tenant's own always)


class CheckpointServiceStatus(Frozen, frozen=True, kw_only=True, tag="info", tag_field="op"):
    pass


class EraseCheckpoints(Frozen, frozen=True, kw_only=True, tag="erase", tag_field="op"):
    """Physically erase checkpoints: every revision of each of ``keys``, each
    of ``checkpoint_ids``, of ``run_ids``, under ``key_prefixes``, naming
    ``data_subject`` and created before ``created_before``
    (spec/checkpoint.md, "Erasure"). What is not there (or is another
    tenant's) is skipped, so a resend is harmless."""

    keys: Annotated[list[Id], Meta(max_length=1000)] = []
    checkpoint_ids: Annotated[list[Id], Meta(max_length=1000)] = []
    # Every revision saved with one of these run ids, of keys starting with
    # ``key_prefix`` when given (LangGraph's delete_for_runs).
    run_ids: Annotated[list[Id], Meta(max_length=1000)] = []
    key_prefix: Id | None = None
    # Every revision of every key that starts with one of these.
    key_prefixes: Annotated[
        list[Annotated[str, Meta(min_length=1, max_length=MAX_ID_LENGTH)]], Meta(max_length=100)
    ] = []
    # The scopes of a ledger erasure (spec/erasure.md): every revision naming
    # this data subject; every revision created before this time (retention).
    data_subject: Id | None = None
    created_before: Timestamp | None = None
    # Answer what would be erased, erasing nothing.
    dry_run: bool = False
    # At most this many revisions per request (a reply must fit one NATS
    # message); ``has_more`` says to send it again, a dry run from after the
    # last (key, revision) it listed.
    limit: Annotated[int, Meta(ge=1, le=1000)] = 500
    after_key: Id | None = None
    after_revision: Seq = 0
    # Whose checkpoints: see above; left out by a trusted caller, what it
    # selects must be one tenant's.
    tenant: CheckpointTenant | None = None


CheckpointCommand = (
    SaveCheckpoint
    | GetCheckpoint
    | LatestCheckpoint
    | ListRevisions
    | PlanRecovery
    | InspectRun
    | ReconcileCheckpoints
    | CheckpointServiceStatus
    | EraseCheckpoints
)


class ErasureReport(Frozen, frozen=True, kw_only=True):
    """What an erase removed: the revisions (as they were listed, without
    state) and the artifact blobs no remaining revision references."""

    erased: list[CheckpointInfo]
    artifacts_erased: list[Hash]
    has_more: bool = False


class RevisionPage(Frozen, frozen=True, kw_only=True):
    key: Id
    revisions: list[CheckpointInfo]
    has_more: bool


class UnresolvedAttempt(Frozen, frozen=True, kw_only=True):
    """An attempt with ``attempt.requested`` and no terminal event, with the
    retry-safety verdict of spec/checkpoint.md."""

    attempt_id: Id
    attempt_no: int
    action_id: Id
    lane_id: Id
    turn_id: Id | None = None
    action_type: str | None = None
    name: str | None = None
    effect: str | None = None
    idempotency: str | None = None
    idempotency_key: str | None = None
    requested_event_id: Id
    requested_seq: int
    requested_position: int
    retry_safe: bool
    reason: str


class RecoveryPlan(Frozen, frozen=True, kw_only=True):
    key: Id | None = None
    checkpoint: Checkpoint | None = None
    session_id: Id | None = None
    run_id: Id | None = None
    lane_id: Id | None = None
    after_seq: Seq = 0  # the anchor's seq in this lane, 0 without one
    head_seq: Seq = 0  # the lane's last seq when the plan was made
    events: list[CommittedEvent] = []  # seq > after_seq, ascending
    has_more: bool = False  # more events follow: page on with load_lane
    unresolved_attempts: list[UnresolvedAttempt] = []


class LinkedCheckpoint(Frozen, frozen=True, kw_only=True):
    event_id: Id
    lane_id: Id
    seq: int
    position: int
    checkpoint_id: str | None = None
    checkpoint: CheckpointInfo | None = None
    # None when the event names a stored checkpoint and agrees with it;
    # "unknown_checkpoint" or "mismatch" otherwise.
    problem: str | None = None


class RunInspection(Frozen, frozen=True, kw_only=True):
    session_id: Id
    run_id: Id
    as_of_position: int
    terminal_events: list[CommittedEvent]
    linked_checkpoints: list[LinkedCheckpoint]
    unresolved_attempts: list[UnresolvedAttempt]
    unlinked_revisions: list[CheckpointInfo]


class ReconcileReport(Frozen, frozen=True, kw_only=True):
    as_of_position: int
    caught_up: bool  # the service had applied the whole committed stream
    unlinked: list[CheckpointInfo]
    has_more: bool = False


class CheckpointServiceInfo(Frozen, frozen=True, kw_only=True):
    artifact_bucket: str
    max_inline_bytes: int
    anchor_wait_s: float
    applied_position: int
    stream_last_position: int
