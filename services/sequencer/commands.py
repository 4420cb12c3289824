"""What the sequencer does with each structure command and read: one function
of the writer and the command, with no NATS in it, so the request server
(service.py) and the store contract's in-process run (tests) decide every
command the same way."""

from __future__ import annotations

from typing import Any

from laneledger.contract.model import (
    Command,
    CreateAction,
    CreateAttempt,
    CreateLane,
    CreateTurn,
    EnsureActor,
    Erase,
    GetLane,
    GetReceipt,
    LoadLane,
    LoadRun,
    LoadSession,
    LoadStructure,
)
from laneledger.store import LedgerWriter


def decide_command(writer: LedgerWriter, cmd: Command, *, max_page_bytes: int) -> Any:
    """The result of ``cmd`` on ``writer`` (its tenant scoping already done);
    ``max_page_bytes``: how much one page of events or structure may hold."""
    r = writer.reader
    match cmd:
        case EnsureActor():
            return writer.ensure_actor(cmd)
        case CreateLane():
            return writer.create_lane(cmd)
        case CreateTurn():
            return writer.create_turn(cmd)
        case CreateAction():
            return writer.create_action(cmd)
        case CreateAttempt():
            return writer.create_attempt(cmd)
        case GetLane():
            return r.get_lane(cmd.lane_id, cmd.tenant)
        case LoadLane():
            return r.load_lane(cmd.lane_id, cmd.after_seq, cmd.limit, cmd.tenant)
        case LoadRun() | LoadSession():
            # A page of events (the structure is load_structure's): one
            # indexed range read and a reply within max_page_bytes, however
            # large the session.
            return r.events_page(
                cmd.session_id,
                cmd.run_id if isinstance(cmd, LoadRun) else None,
                cmd.after_position,
                cmd.limit,
                max_bytes=max_page_bytes,
                tenant=cmd.tenant,
            )
        case LoadStructure():
            return r.load_structure(
                cmd.session_id,
                cmd.run_id,
                cmd.after,
                cmd.limit,
                max_bytes=max_page_bytes,
                tenant=cmd.tenant,
            )
        case GetReceipt():
            return r.get_receipt(cmd.append_id, cmd.tenant)
        case Erase():
            report, _, _ = writer.erase(cmd)
            return report
