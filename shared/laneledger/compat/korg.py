"""The korg-ledger-v1 chain format (New1Direction/korg), read-only.

Canonical bytes are Python's ``json.dumps`` with sorted keys, no whitespace and
ASCII output (non-ASCII as ``\\uXXXX``), not RFC 8785: korg has no floats, so
the two differ only in string escaping and in where non-BMP keys sort. Values are restricted to what that
encoding spells unambiguously: integers within ±(2^53−1), no floats at all.
Records are JSON lines ordered by ``seq_id``; ``entry_hash`` and the optional
``event_sig`` are left out of the preimage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from laneledger.contract.chain import ChainProfile
from laneledger.contract.errors import InvalidRequest, NotCanonicalizable
from laneledger.contract.strictjson import decode_json

MAX_SAFE_INT = 2**53 - 1
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Fields every record must carry, with the type the verifier relies on.
REQUIRED_FIELDS: dict[str, tuple[type, str]] = {
    "seq_id": (int, "an integer"),
    "prev_hash": (str, "a string"),
    "entry_hash": (str, "a string"),
}


def check_value(value: Any, path: str = "$") -> None:
    """Raise ``NotCanonicalizable`` for anything korg's canonical form cannot
    encode, with ``path`` (JSONPath, as in ``laneledger.contract.canonical``) and a
    ``reason``: ``float_not_allowed``, ``integer_out_of_range``,
    ``non_string_key`` or ``unsupported_type``."""
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            return
        _refuse(path, "integer_out_of_range", f"integer {value} is outside ±(2^53−1)")
    if isinstance(value, float):
        _refuse(path, "float_not_allowed", f"{value!r}: korg-ledger-v1 allows integers only, no floats")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                _refuse(path, "non_string_key", f"object key {key!r} is not a string")
            check_value(item, _child(path, key))
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            check_value(item, f"{path}[{index}]")
        return
    _refuse(path, "unsupported_type", f"a {type(value).__name__} is not a JSON value")


def korg_canonical(value: Any) -> bytes:
    check_value(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


KORG_LEDGER_V1 = ChainProfile(
    name="korg-ledger-v1",
    canonical=korg_canonical,
    order_field="seq_id",
    excluded=frozenset({"entry_hash", "event_sig"}),
)


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
                yield _parse_line(raw, name, number)


def _parse_line(raw: bytes, file: str, line: int) -> dict[str, Any]:
    record = decode_json(raw, file=file, line=line)
    if not isinstance(record, dict):
        raise InvalidRequest("expected a JSON object", file=file, line=line)
    for field, (kind, spelled) in REQUIRED_FIELDS.items():
        if field not in record:
            raise InvalidRequest(f"field {field}: missing", file=file, line=line, field=field)
        value = record[field]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InvalidRequest(f"field {field}: expected {spelled}", file=file, line=line, field=field)
    try:
        check_value(record)
    except NotCanonicalizable as exc:
        raise NotCanonicalizable(exc.message, file=file, line=line, **exc.details) from None
    return record


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENTIFIER.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def _refuse(path: str, reason: str, message: str) -> None:
    raise NotCanonicalizable(message, path=path, reason=reason)
