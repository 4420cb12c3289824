"""The korg-ledger-v1 journal format (New1Direction/korg): reading and verifying.

Canonical bytes are what Korg's reference implementation hashes, Python's
``json.dumps`` with sorted keys, no whitespace and ASCII output (non-ASCII as
``\\uXXXX``), not RFC 8785. A float is written as Python writes it (``repr``:
``0.1``, ``5.0``, ``1e-05``, ``1.5e+16``), so a journal with float costs hashes
as Korg's Python verifier hashes it; NaN and the infinities have no JSON form
and are refused. Integers must lie within ±(2^53−1) (beyond that Korg's
verifiers disagree among themselves). ``entry_hash`` and the optional
``event_sig`` are left out of the preimage.

A journal is JSON lines or one JSON array of records in chain order
(``read_journal``). ``verify_journal`` checks what Korg's verifiers check: the
chain, unique integer ``seq_id``s (in no particular order, gaps allowed: a
session's journal numbers its records by ledger position), the causal DAG
(every integer ``triggered_by`` names an existing, strictly smaller
``seq_id``) and, given a public key, every record's Ed25519 ``event_sig``.
Normative text: ``spec/korg-mapping.md``, "Verifying a Korg journal", and
``spec/canonical.md`` §4 and §5.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from cryptography.exceptions import InvalidSignature as _BadSignature

from laneledger.contract.chain import GENESIS_HASH, ChainProfile, entry_hash
from laneledger.contract.errors import ChainFault, IntegrityError, InvalidRequest, NotCanonicalizable
from laneledger.contract.signing import Ed25519PublicKey
from laneledger.contract.strictjson import decode_json

MAX_SAFE_INT = 2**53 - 1
SIGNATURE_FIELD = "event_sig"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_JSON_WHITESPACE = b" \t\r\n"
_MISSING = object()

# Fields every record must carry, with the type the verifier relies on.
REQUIRED_FIELDS: dict[str, tuple[type, str]] = {
    "seq_id": (int, "an integer"),
    "prev_hash": (str, "a string"),
    "entry_hash": (str, "a string"),
}


def check_value(value: Any, path: str = "$", *, floats: bool = False) -> None:
    """Raise ``NotCanonicalizable`` for anything the korg canonical form cannot
    encode, with ``path`` (JSONPath, as in ``laneledger.contract.canonical``) and a
    ``reason``: ``float_not_allowed`` (any float, unless ``floats``),
    ``non_finite_number``, ``integer_out_of_range``, ``non_string_key`` or
    ``unsupported_type``. ``floats=False`` is the subset every Korg verifier
    hashes alike (its JavaScript verifier refuses floats), which is what the
    export writes; reading accepts the finite floats Korg's Python hashes."""
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            return
        _refuse(path, "integer_out_of_range", f"integer {value} is outside ±(2^53−1)")
    if isinstance(value, float):
        if not math.isfinite(value):
            _refuse(path, "non_finite_number", f"{value!r} has no JSON form")
        if floats:
            return
        _refuse(path, "float_not_allowed", f"{value!r}: korg-ledger-v1 allows integers only, no floats")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                _refuse(path, "non_string_key", f"object key {key!r} is not a string")
            check_value(item, _child(path, key), floats=floats)
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            check_value(item, f"{path}[{index}]", floats=floats)
        return
    _refuse(path, "unsupported_type", f"a {type(value).__name__} is not a JSON value")


def korg_canonical(value: Any) -> bytes:
    """Korg's canonical bytes of ``value``: ``json.dumps(value, sort_keys=True,
    separators=(",", ":"))`` as Korg's reference computes it, floats included."""
    check_value(value, floats=True)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


# How Korg hashes and links records. laneledger's korg-ledger-v1 export numbers
# them 1, 2, 3 …, which ``verify_chain`` under this profile demands; a Korg
# journal in general is verified by ``verify_journal``, which does not.
KORG_LEDGER_V1 = ChainProfile(
    name="korg-ledger-v1",
    canonical=korg_canonical,
    order_field="seq_id",
    excluded=frozenset({"entry_hash", SIGNATURE_FIELD}),
)


# -- reading ----------------------------------------------------------------------


def read_journal(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a korg-ledger-v1 journal: one JSON array when the
    file's first non-whitespace byte is ``[`` (as Korg's JavaScript and Rust
    verifiers decide, and as Korg CI's ``.korg/journal.json`` is written),
    else JSON lines (``read_jsonl``). An array is read whole; errors name
    ``file`` and the record's ``index`` in it instead of a ``line``."""
    with open(path, "rb") as journal:
        is_array = _first_byte(journal) == b"["
    if not is_array:
        yield from read_jsonl(path)
        return
    name = str(path)
    document = decode_json(Path(path).read_bytes(), file=name)
    if not isinstance(document, list):  # "[" then valid JSON is an array; kept for the type
        raise InvalidRequest("expected a JSON array of records", file=name)
    for index, record in enumerate(document):
        yield _checked(record, file=name, index=index)


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a korg-ledger-v1 JSONL file, blank lines skipped.

    A malformed line raises a ``RequestError`` whose details name ``file``,
    ``line`` and, where there is one, ``field``: ``MalformedMessage`` for
    bytes that are not UTF-8 JSON, ``InvalidRequest`` for a record of the
    wrong shape, ``NotCanonicalizable`` for a value korg cannot hash.
    ``OSError`` from opening the file propagates unchanged.
    """
    name = str(path)
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if raw.strip():
                yield _checked(decode_json(raw, file=name, line=number), file=name, line=number)


def _first_byte(stream: BinaryIO) -> bytes:
    while chunk := stream.read(4096):
        rest = chunk.lstrip(_JSON_WHITESPACE)
        if rest:
            return rest[:1]
    return b""


def _checked(record: Any, *, file: str, line: int | None = None, index: int | None = None) -> dict[str, Any]:
    """``record`` if it is a record korg can verify. Where it sits: ``line``
    (JSONL) or ``index`` (an array, whose paths are then ``$[index]…``)."""
    where: dict[str, Any] = {"line": line} if index is None else {"index": index}
    root = "$" if index is None else f"$[{index}]"
    if not isinstance(record, dict):
        prefix = "" if index is None else f"{root}: "
        raise InvalidRequest(f"{prefix}expected a JSON object", file=file, **where)
    for field, (kind, spelled) in REQUIRED_FIELDS.items():
        name = field if index is None else f"{root}.{field}"
        if field not in record:
            raise InvalidRequest(f"field {name}: missing", file=file, field=field, **where)
        value = record[field]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InvalidRequest(f"field {name}: expected {spelled}", file=file, field=field, **where)
    try:
        check_value(record, root, floats=True)
    except NotCanonicalizable as exc:
        raise NotCanonicalizable(exc.message, file=file, **where, **exc.details) from None
    return record


# -- verifying --------------------------------------------------------------------


def verify_journal(
    records: Iterable[Mapping[str, Any]],
    *,
    key: bytes | None = None,
    public_key: Ed25519PublicKey | None = None,
) -> str:
    """Verify a korg-ledger-v1 journal from its first record; return the tip
    ``entry_hash`` (genesis when empty) or raise at the first fault.

    What Korg's verifiers (``verify_chain``, ``verify_dag``, ``event_sig``)
    check, reported in the order they list their errors:

    1. the chain, in file order: each record's ``prev_hash`` is the previous
       record's ``entry_hash`` (genesis first) and its ``entry_hash`` is the
       hash of its preimage (HMAC with ``key``); ``ChainFault`` of kind
       ``not_chained``, ``broken_link`` or ``content_tampered``, raised as soon
       as it is read. ``seq_id`` must be an integer and nothing more: Korg
       requires no order of seq_ids, so a session's journal whose seq_ids are
       ledger positions with gaps verifies (unlike ``verify_chain`` under
       ``KORG_LEDGER_V1``, which wants 1, 2, 3 …);
    2. unique ``seq_id``s: ``IntegrityError`` of kind ``duplicate_seq_id``
       for the first record that repeats one (``first_position`` names the
       record it repeats);
    3. the causal DAG: an integer ``triggered_by`` (top level, else
       ``metadata.triggered_by`` of a nested record) must name a ``seq_id``
       of the journal smaller than the record's own; ``IntegrityError`` of
       kind ``causation_unknown`` or ``causation_not_earlier`` for the first
       record, in file order, that breaks it. Anything else there (null,
       absent, not an integer) is no causal link, for Korg as here;
    4. with ``public_key``: every record's ``event_sig`` is that key's Ed25519
       signature (hex) over the record's canonical preimage;
       ``IntegrityError`` of kind ``signature_missing`` or
       ``signature_invalid`` for the first that is not (Korg refuses an
       unsigned record when a signer is required).

    Details: ``kind``, ``seq``, ``position`` (1-based record index),
    ``field``, and ``triggered_by`` for a DAG fault. Memory: the set of
    seq_ids, and the causal links not yet known good (a parent not read yet).
    """
    prev = GENESIS_HASH
    first_at: dict[int, int] = {}  # seq_id -> position of the first record carrying it
    duplicate: IntegrityError | None = None
    links: list[tuple[int, int, str, int]] = []  # seq, position, field, triggered_by: decided at the end
    bad_signature: IntegrityError | None = None
    for position, record in enumerate(records, start=1):
        seq = _check_link(record, position, prev, key)
        prev = record["entry_hash"]
        if seq not in first_at:
            first_at[seq] = position
        elif duplicate is None:
            duplicate = _duplicate_fault(seq, position, first_at[seq])
        field, parent = _parent(record)
        # A parent already read and smaller is good for good; any other may be
        # read later (Korg looks it up among all seq_ids) or is bad: keep it.
        if type(parent) is int and not (parent < seq and parent in first_at):
            links.append((seq, position, field, parent))
        if public_key is not None and bad_signature is None:
            bad_signature = _signature_fault(record, seq, position, public_key)
    if duplicate is not None:
        raise duplicate
    for seq, position, field, parent in links:
        if parent not in first_at or parent >= seq:
            raise _dag_fault(seq, position, field, parent, known=parent in first_at)
    if bad_signature is not None:
        raise bad_signature
    return prev


def _check_link(record: Mapping[str, Any], position: int, prev: str, key: bytes | None) -> int:
    """The record's ``seq_id`` once its chain link holds, else ``ChainFault``:
    the checks of ``LaneChains.check`` (``canonical.md`` §5) minus the seq
    order, which is laneledger's rule, not Korg's."""
    seq = record.get("seq_id", _MISSING)
    if type(seq) is not int:  # bool is an int subclass; it is not a seq_id
        raise _chain_fault("not_chained", position, None, "seq_id", "an integer", seq)
    for field in ("prev_hash", "entry_hash"):
        value = record.get(field, _MISSING)
        if not isinstance(value, str) or not _HEX64.fullmatch(value):
            raise _chain_fault("not_chained", position, seq, field, "64 lowercase hex", value)
    if record["prev_hash"] != prev:
        raise _chain_fault("broken_link", position, seq, "prev_hash", prev, record["prev_hash"])
    recomputed = entry_hash(record, profile=KORG_LEDGER_V1, key=key)
    if recomputed != record["entry_hash"]:
        raise _chain_fault("content_tampered", position, seq, "entry_hash", recomputed, record["entry_hash"])
    return seq


def _chain_fault(
    kind: str, position: int, seq: int | None, field: str, expected: Any, found: Any
) -> ChainFault:
    where = f"seq {seq}" if seq is not None else f"position {position}"
    shown = "nothing" if found is _MISSING else _show(found)
    found = None if found is _MISSING else found
    return ChainFault(
        f"{where}: {kind} ({field} expected {expected}, found {shown})",
        kind=kind,
        seq=seq,
        position=position,
        field=field,
        expected=expected,
        found=found,
    )


def _show(value: Any) -> str:
    if type(value) is int or (isinstance(value, str) and _HEX64.fullmatch(value)):
        return str(value)
    shown = json.dumps(value, ensure_ascii=True, default=repr)  # JSON spelling: null, "x"
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _duplicate_fault(seq: int, position: int, first_position: int) -> IntegrityError:
    return IntegrityError(
        f"seq {seq}: duplicate_seq_id (the record at position {position} repeats the seq_id of "
        f"position {first_position}; seq_ids must be unique)",
        kind="duplicate_seq_id",
        seq=seq,
        position=position,
        field="seq_id",
        first_position=first_position,
    )


def _parent(record: Mapping[str, Any]) -> tuple[str, Any]:
    """Where the record names its causal parent (Korg SPEC §9.3): the flat
    ``triggered_by``, else a nested record's ``metadata.triggered_by``."""
    if "triggered_by" in record:
        return "triggered_by", record["triggered_by"]
    metadata = record.get("metadata")
    if isinstance(metadata, dict):
        return "metadata.triggered_by", metadata.get("triggered_by")
    return "triggered_by", None


def _dag_fault(seq: int, position: int, field: str, parent: int, *, known: bool) -> IntegrityError:
    if known:
        kind = "causation_not_earlier"
        why = "the record itself" if parent == seq else "a later seq_id"
        message = f"seq {seq}: {kind} ({field} {parent} names {why}; it must be strictly earlier)"
    else:
        kind = "causation_unknown"
        message = f"seq {seq}: {kind} ({field} {parent} names no seq_id of the journal)"
    return IntegrityError(message, kind=kind, seq=seq, position=position, field=field, triggered_by=parent)


def _signature_fault(
    record: Mapping[str, Any], seq: int, position: int, public_key: Ed25519PublicKey
) -> IntegrityError | None:
    signature = record.get(SIGNATURE_FIELD, _MISSING)
    if signature is _MISSING:
        return IntegrityError(
            f"seq {seq}: signature_missing (no {SIGNATURE_FIELD}, and a public key requires every record "
            "to be signed)",
            kind="signature_missing",
            seq=seq,
            position=position,
            field=SIGNATURE_FIELD,
        )
    if isinstance(signature, str) and _signed_by(record, signature, public_key):
        return None
    return IntegrityError(
        f"seq {seq}: signature_invalid ({SIGNATURE_FIELD} does not verify under the public key)",
        kind="signature_invalid",
        seq=seq,
        position=position,
        field=SIGNATURE_FIELD,
    )


def _signed_by(record: Mapping[str, Any], signature: str, public_key: Ed25519PublicKey) -> bool:
    preimage = korg_canonical({k: v for k, v in record.items() if k not in KORG_LEDGER_V1.excluded})
    try:
        public_key.verify(bytes.fromhex(signature), preimage)
    except (_BadSignature, ValueError):
        return False
    return True


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENTIFIER.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def _refuse(path: str, reason: str, message: str) -> None:
    raise NotCanonicalizable(message, path=path, reason=reason)
