"""The audit's faults: how a position is named in a message, and the
``ChainFault``/``IntegrityError`` every check raises (their details always
hold ``kind`` and ``position``, and ``lane_id``/``seq`` when the fault is in
one lane; the message starts with ``position N``). ``spec/verify.md`` lists
the kinds."""

from __future__ import annotations

from typing import Any

import msgspec

from laneledger.contract.errors import ChainFault, IntegrityError


def _where(position: int | None, lane_id: str | None = None, seq: int | None = None) -> str:
    where = f"position {position}" if position is not None else "ledger"
    if lane_id is not None:
        where += f" (lane {lane_id}" + (f" seq {seq})" if seq is not None else ")")
    return where


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def chain_fault(
    kind: str, position: int, lane_id: str | None, seq: Any, fld: str, expected: Any, found: Any
) -> ChainFault:
    seq_detail = seq if type(seq) is int else None
    return ChainFault(
        f"{_where(position, lane_id, seq_detail)}: {kind} "
        f"({fld} expected {show(expected)}, found {show(found)})",
        kind=kind,
        position=position,
        lane_id=lane_id,
        seq=seq_detail,
        field=fld,
        expected=expected,
        found=found,
    )


def integrity_fault(
    kind: str,
    text: str,
    position: int | None,
    lane_id: str | None = None,
    seq: int | None = None,
    **details: Any,
) -> IntegrityError:
    return IntegrityError(
        f"{_where(position, lane_id, seq)}: {kind}: {text}",
        kind=kind,
        position=position,
        lane_id=lane_id,
        seq=seq,
        **details,
    )


def decode_body(body: bytes, position: int, lane_id: str | None = None, seq: Any = None) -> dict[str, Any]:
    """A stored committed event as a dict, or ``not_chained`` (field ``body``)
    at ``position``. Shared with the tail's verify endpoint."""
    try:
        record = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise chain_fault(
            "not_chained", position, lane_id, seq, "body", "a JSON object", f"undecodable: {exc}"
        ) from None
    if not isinstance(record, dict):
        raise chain_fault(
            "not_chained", position, lane_id, seq, "body", "a JSON object", type(record).__name__
        )
    return record


def position_gap(expected: int, found: Any, lane_id: str | None = None, seq: Any = None) -> ChainFault:
    """Positions must run 1, 2, …: ``broken_link`` (field ``position``) at the
    first missing one. Shared with the tail's verify endpoint."""
    return chain_fault("broken_link", expected, lane_id, seq, "position", expected, found)
