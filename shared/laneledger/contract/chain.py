"""Hash chains: the append digest, entry hashes, linking and verification.

A chained record carries ``prev_hash`` (the previous record's ``entry_hash``,
or ``GENESIS_HASH`` for the first) and ``entry_hash``: lowercase hex SHA-256
(HMAC-SHA256 when keyed) of the profile's canonical bytes of the record minus
``entry_hash`` and any signature field. ``prev_hash`` is in the preimage, so
rewriting a link also breaks that record's own hash.

A ``ChainProfile`` says how a format canonicalizes and which field orders the
records; ``LANELEDGER`` is ours, ``laneledger.compat.korg.KORG_LEDGER_V1`` is korg's.
Both hash with ``entry_hash`` here; ``LaneChains`` verifies laneledger's own
chains (dense seqs per lane), while a Korg journal is walked by
``laneledger.compat.korg.verify_journal`` as Korg's verifiers walk it (links in
file order, unique but not dense ``seq_id``s).

A *sealed* laneledger event (spec/canonical.md §3, "Sealed content") has its
content (``payload`` and ``extensions``) in the preimage only through
``content_digest``, an HMAC keyed by the event's own random ``content_salt``:
erasing the content and the salt (spec/erasure.md) leaves a chain that still
verifies and a hash that confirms no guess of what was erased.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from laneledger.contract.canonical import canonicalize
from laneledger.contract.errors import ChainFault

GENESIS_HASH = "0" * 64

# Sealed content (spec/canonical.md §3): what is erasable, the salt that keys
# its digest, the digest that stands for it in the preimage, and the mark an
# erasure leaves (outside the preimage: it is added after the hash).
CONTENT_FIELDS = ("extensions", "payload")
CONTENT_SALT = "content_salt"
CONTENT_DIGEST = "content_digest"
ERASED = "erased"
_NOT_SEALED_PREIMAGE = frozenset({*CONTENT_FIELDS, CONTENT_SALT, ERASED})

_HEX64 = re.compile(r"[0-9a-f]{64}")
_MISSING = object()  # tells an absent field from an explicit null in messages


@dataclass(frozen=True)
class ChainProfile:
    name: str
    canonical: Callable[[Any], bytes]
    order_field: str
    # Fields left out of the preimage: the hash itself and signatures over it.
    excluded: frozenset[str]


LANELEDGER = ChainProfile(
    name="laneledger",
    canonical=canonicalize,
    order_field="seq",
    excluded=frozenset({"entry_hash", "signature"}),
)


def append_digest(events: list[Any], *, admitted: bool = False) -> str:
    """Lowercase hex SHA-256 of the RFC 8785 bytes of a proposed-event batch,
    exactly as sent (a JSON array). ``admitted``: see ``canonicalize``."""
    return hashlib.sha256(canonicalize(events, admitted=admitted)).hexdigest()


def content_bytes(payload: Any, extensions: Any, *, admitted: bool = False) -> bytes:
    """The canonical bytes of an event's content: ``{"extensions", "payload"}``."""
    return canonicalize({"extensions": extensions, "payload": payload}, admitted=admitted)


def content_digest(salt_hex: str, content: bytes) -> str:
    """Lowercase hex HMAC-SHA256 of ``content`` (``content_bytes``) keyed by the
    32 bytes of ``salt_hex``: without the salt, no guess of the content can be
    checked against it.

    ``hmac.new``, not ``hmac.digest``: CPython's one-shot ``hmac.digest``
    releases the GIL around every call, whatever the size, so on the
    sequencer's writer thread each event's digest handed the GIL to the busy
    event loop and waited up to the switch interval (5 ms) to get it back;
    the HMAC object keeps it for inputs under 2 KiB."""
    return hmac.new(bytes.fromhex(salt_hex), content, "sha256").hexdigest()


def is_sealed(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` is a sealed event (its salt, or once erased its
    digest, is there); an event committed before sealing has neither."""
    return CONTENT_SALT in record or CONTENT_DIGEST in record


def preimage_fields(record: Mapping[str, Any], profile: ChainProfile = LANELEDGER) -> dict[str, Any]:
    """What ``entry_hash`` canonicalizes: ``record`` without the profile's
    excluded fields; for a sealed laneledger event, also without its content,
    salt and erasure mark, and with ``content_digest`` (recomputed from the
    salt while the content is there, as stored once it is erased)."""
    if profile is not LANELEDGER or not is_sealed(record):
        return {k: v for k, v in record.items() if k not in profile.excluded}
    fields = {k: v for k, v in record.items() if k not in profile.excluded and k not in _NOT_SEALED_PREIMAGE}
    salt = record.get(CONTENT_SALT)
    if isinstance(salt, str) and _HEX64.fullmatch(salt):
        content = content_bytes(record.get("payload"), record.get("extensions"))
        fields[CONTENT_DIGEST] = content_digest(salt, content)
    return fields


def sealed_form_problem(record: Mapping[str, Any]) -> tuple[str, str, Any] | None:
    """Why a sealed ``record`` is in neither of its two forms, as (field,
    expected, found), or None. Whole: a 64-hex ``content_salt``, no
    ``content_digest``, no ``erased``. Erased: no salt, no ``signature``, empty
    ``payload`` and ``extensions``, a 64-hex ``content_digest`` and an
    ``erased`` mark. (The digest stands for the content in the preimage, so
    content put back into an erased event would otherwise go unseen.)"""
    if CONTENT_SALT in record:
        salt = record[CONTENT_SALT]
        if not isinstance(salt, str) or not _HEX64.fullmatch(salt):
            return CONTENT_SALT, "64 lowercase hex", salt
        for field in (CONTENT_DIGEST, ERASED):
            if field in record:
                return field, "absent beside content_salt", record[field]
        return None
    digest = record.get(CONTENT_DIGEST)
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        return CONTENT_DIGEST, "64 lowercase hex", digest
    for field in CONTENT_FIELDS:
        if record.get(field, _MISSING) != {}:
            return field, "{} once erased", record.get(field, _MISSING)
    if "signature" in record:
        return "signature", "absent once erased", record["signature"]
    if not isinstance(record.get(ERASED), Mapping):
        return ERASED, "the erasure's mark", record.get(ERASED, _MISSING)
    return None


def erased_form(record: Mapping[str, Any], mark: Mapping[str, Any]) -> dict[str, Any]:
    """The erased form of a whole sealed ``record`` (spec/erasure.md): its
    content emptied, its salt and signature gone, its ``content_digest``
    kept and ``mark`` (the erasure event's position and id) added. Its
    ``entry_hash`` still verifies."""
    salt = record.get(CONTENT_SALT)
    if not isinstance(salt, str) or not _HEX64.fullmatch(salt):
        raise ValueError("only a whole sealed event (one with its content_salt) can be erased")
    digest = content_digest(salt, content_bytes(record.get("payload"), record.get("extensions")))
    out = {k: v for k, v in record.items() if k not in (CONTENT_SALT, "signature")}
    out.update(payload={}, extensions={}, content_digest=digest, erased=dict(mark))
    return out


def entry_hash(
    record: Mapping[str, Any], *, profile: ChainProfile = LANELEDGER, key: bytes | None = None
) -> str:
    """The entry hash of ``record`` under ``profile``; HMAC-SHA256 when ``key``
    is given (an empty key still means HMAC). A sealed event's content enters
    only through its ``content_digest`` (``preimage_fields``)."""
    preimage = profile.canonical(preimage_fields(record, profile))
    if key is None:
        return hashlib.sha256(preimage).hexdigest()
    return hmac.new(key, preimage, hashlib.sha256).hexdigest()


def link(
    record: Mapping[str, Any], prev_hash: str, *, profile: ChainProfile = LANELEDGER, key: bytes | None = None
) -> dict[str, Any]:
    """A copy of ``record`` with ``prev_hash`` set and ``entry_hash`` computed.
    The order field (``seq``) must already be set: it is part of the preimage."""
    linked = {k: v for k, v in record.items() if k != "entry_hash"}
    linked["prev_hash"] = prev_hash
    linked["entry_hash"] = entry_hash(linked, profile=profile, key=key)
    return linked


def verify_chain(
    records: Iterable[Mapping[str, Any]], *, profile: ChainProfile = LANELEDGER, key: bytes | None = None
) -> str:
    """Verify one chain from its first record; return the tip ``entry_hash``
    (``GENESIS_HASH`` when empty) or raise ``ChainFault`` at the first bad
    record (see ``LaneChains.check`` for the checks and their order)."""
    chains = LaneChains(profile=profile, key=key)
    for position, record in enumerate(records, start=1):
        chains.check(record, position=position)
    return chains.tip()


class LaneChains:
    """Verifies interleaved chains — one per lane — record by record, in the
    order they were committed. Memory: one (seq, hash) tip per lane.

    Each record is checked in this order, and the first failing check names it:

    1. ``not_chained``: the order field is not an integer, or ``prev_hash`` /
       ``entry_hash`` is missing or not 64 lowercase hex digits.
    2. ``broken_link``: the order field is not the lane's previous one + 1 (1
       first); a deleted or reordered record is reported at the seq that
       appears in its place.
    3. ``broken_link``: ``prev_hash`` is not the lane's previous ``entry_hash``.
    4. ``content_tampered``: a sealed event is in neither its whole nor its
       erased form (``sealed_form_problem``), or the recomputed hash differs
       from ``entry_hash`` (also what a wrong or missing HMAC key looks like).

    Links go before content because a rewritten ``prev_hash`` also changes the
    record's own hash; "the link is broken here" is the more useful report.
    The message reads ``seq N: <kind> (<field> expected X, found Y)`` for a
    single chain, ``position P (lane L seq N): …`` when lanes are named;
    ``details`` hold ``kind``, ``seq`` (None when not an integer),
    ``position``, ``lane_id`` (when named), ``field``, ``expected``, ``found``.
    """

    def __init__(self, *, profile: ChainProfile = LANELEDGER, key: bytes | None = None) -> None:
        self._profile = profile
        self._key = key
        self.tips: dict[Any, tuple[int, str]] = {}

    def tip(self, lane: Any = None) -> str:
        return self.tips.get(lane, (0, GENESIS_HASH))[1]

    def check(
        self, record: Mapping[str, Any], *, position: int, lane: Any = None, tenant: str | None = None
    ) -> None:
        """``lane`` names the chain; with ``tenant`` the chain is that
        tenant's lane (lane ids are each tenant's own), keyed ``(tenant, lane)``
        in ``tips``."""
        order = self._profile.order_field
        chain = lane if tenant is None else (tenant, lane)
        prev_seq, prev = self.tips.get(chain, (0, GENESIS_HASH))
        seq = record.get(order, _MISSING)
        if type(seq) is not int:  # bool is an int subclass; it is not a seq
            raise _fault("not_chained", position, None, order, "an integer", seq, lane)
        for field in ("prev_hash", "entry_hash"):
            value = record.get(field, _MISSING)
            if not isinstance(value, str) or not _HEX64.fullmatch(value):
                raise _fault("not_chained", position, seq, field, "64 lowercase hex", value, lane)
        if seq != prev_seq + 1:
            raise _fault("broken_link", position, seq, order, prev_seq + 1, seq, lane)
        if record["prev_hash"] != prev:
            raise _fault("broken_link", position, seq, "prev_hash", prev, record["prev_hash"], lane)
        if self._profile is LANELEDGER and is_sealed(record):
            problem = sealed_form_problem(record)
            if problem is not None:
                raise _fault("content_tampered", position, seq, *problem, lane)
        recomputed = entry_hash(record, profile=self._profile, key=self._key)
        if recomputed != record["entry_hash"]:
            raise _fault(
                "content_tampered", position, seq, "entry_hash", recomputed, record["entry_hash"], lane
            )
        self.tips[chain] = (seq, record["entry_hash"])


def _fault(
    kind: str, position: int, seq: int | None, field: str, expected: Any, found: Any, lane: Any = None
) -> ChainFault:
    if lane is not None:
        where = f"position {position} (lane {lane}" + (f" seq {seq})" if seq is not None else ")")
    else:
        where = f"seq {seq}" if seq is not None else f"position {position}"
    message = f"{where}: {kind} ({field} expected {expected}, found {_show(found)})"
    if found is _MISSING:
        found = None
    details: dict[str, Any] = dict(
        kind=kind, seq=seq, position=position, field=field, expected=expected, found=found
    )
    if lane is not None:
        details["lane_id"] = lane
    return ChainFault(message, **details)


def _show(value: Any) -> str:
    if value is _MISSING:
        return "nothing"
    if type(value) is int or (isinstance(value, str) and _HEX64.fullmatch(value)):
        return str(value)
    shown = json.dumps(value, ensure_ascii=True, default=repr)  # JSON spelling: null, "x"
    return shown if len(shown) <= 80 else shown[:77] + "..."
