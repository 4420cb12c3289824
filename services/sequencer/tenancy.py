"""Commands scoped to one tenant (``<prefix>.cmd.<tenant>.<op>``, spec/wire.md).

A tenant's producer user may publish commands on its own tenant's subject
only, so the sequencer answers such a command for that tenant alone:

* a command that *names* a tenant (``ensure_actor``, ``create_lane``, a
  ``get_receipt`` naming one) must name the subject's: ``tenant_mismatch``
  otherwise, which reveals nothing (the caller chose both);
* a receipt is looked up among the tenant's own append ids (the reader's
  ``get_receipt`` with the tenant): another tenant's is not there;
* what a command *refers to* (a lane, session, run, actor, turn,
  action, a parent or forked lane) must be the subject's tenant's: something
  of another tenant is answered exactly as if it did not exist (``entity_not_found``
  with the reader's own message), so ids of other tenants cannot be probed;
* the one exception is a session id held by another tenant: a lane cannot be
  created in it, and saying so (``tenant_mismatch``, naming no tenant) is
  unavoidable since session ids are one namespace.

Runs in the writer thread just before the command, so nothing changes in
between. Commands on ``<prefix>.cmd.<op>`` (trusted users) are not checked
here; the writer still refuses a lane and actor of different tenants.
"""

from __future__ import annotations

from laneledger.contract.errors import EntityNotFound, TenantMismatch
from laneledger.contract.model import (
    Command,
    CreateAction,
    CreateAttempt,
    CreateLane,
    CreateTurn,
    EnsureActor,
    GetLane,
    GetReceipt,
    LoadLane,
    LoadRun,
    LoadSession,
    LoadStructure,
)
from laneledger.store.reader import LedgerReader


def check_command_tenant(cmd: Command, tenant: str, reader: LedgerReader) -> None:
    """Raise unless everything ``cmd`` names or refers to is ``tenant``'s."""

    def elsewhere(kind: str, entity_id: str) -> bool:
        owner = reader.tenant_of(kind, entity_id)
        return owner is not None and owner != tenant

    def lane(lane_id: str) -> None:
        if elsewhere("lane", lane_id):
            raise EntityNotFound("no such lane", kind="lane", id=lane_id)

    named = cmd.tenant if isinstance(cmd, EnsureActor | CreateLane | GetReceipt) else None
    if named is not None and named != tenant:
        raise TenantMismatch(
            "the command names another tenant than its subject",
            what="command",
            tenant=named,
            subject_tenant=tenant,
        )
    match cmd:
        case CreateLane():
            if elsewhere("session", cmd.session_id):
                raise TenantMismatch(
                    "session belongs to another tenant", what="lane", session_id=cmd.session_id, tenant=tenant
                )
            fork_lane_id = cmd.fork_of.lane_id if cmd.fork_of is not None else None
            for parent in dict.fromkeys(p for p in (cmd.parent_lane_id, fork_lane_id) if p is not None):
                lane(parent)
            if cmd.actor_id is not None and elsewhere("actor", cmd.actor_id):
                raise EntityNotFound("no such actor", kind="actor", id=cmd.actor_id)
        case CreateAction():
            lane(cmd.lane_id)
            if elsewhere("turn", cmd.turn_id):
                raise EntityNotFound("no such turn", kind="turn", id=cmd.turn_id)
        case CreateAttempt():
            lane(cmd.lane_id)
            if elsewhere("action", cmd.action_id):
                raise EntityNotFound("no such action", kind="action", id=cmd.action_id)
        case CreateTurn() | GetLane() | LoadLane():
            lane(cmd.lane_id)
        case LoadRun(session_id=session_id, run_id=run_id) if elsewhere("session", session_id):
            raise EntityNotFound("no such run", kind="run", id=run_id, session_id=session_id)
        case LoadSession(session_id=session_id) if elsewhere("session", session_id):
            raise EntityNotFound("no such session", kind="session", id=session_id)
        case LoadStructure(session_id=session_id) if elsewhere("session", session_id):
            raise EntityNotFound("no such session", kind="session", id=session_id)
