"""Strict I-JSON reading of files and documents: what the CLI and the file
formats (korg-ledger-v1, laneledger exports) accept as input."""

from __future__ import annotations

import json
from typing import Any

from laneledger.contract.errors import MalformedMessage


def decode_json(data: bytes, *, file: str, line: int | None = None) -> Any:
    """Strict I-JSON decode of UTF-8 ``data``: no duplicate object keys, no
    NaN/Infinity. Raises ``MalformedMessage`` with ``file`` and ``line``
    details: ``line`` as given (a JSONL line) or, for a whole document, the
    line the error position falls on (unknown for duplicate keys and
    constants, which the decoder reports without a position)."""
    try:
        return json.loads(
            data.decode("utf-8"),
            parse_float=float,
            parse_int=int,
            parse_constant=_no_constant,
            object_pairs_hook=_unique_keys,
        )
    except UnicodeDecodeError as exc:
        where = line or data.count(b"\n", 0, exc.start) + 1
        raise MalformedMessage("not UTF-8", file=file, line=where) from None
    except json.JSONDecodeError as exc:
        where = line or exc.lineno
        raise MalformedMessage(f"bad JSON: {exc.msg} (column {exc.colno})", file=file, line=where) from None
    except ValueError as exc:  # from the hooks, or int() past Python's digit limit
        raise MalformedMessage(f"bad JSON: {exc}", file=file, line=line) from None
    except RecursionError:
        raise MalformedMessage("bad JSON: nested too deeply", file=file, line=line) from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:  # the first repeated key is the one named
            if key in seen:
                raise ValueError(f"duplicate object key {json.dumps(key)}")
            seen.add(key)
    return record


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
