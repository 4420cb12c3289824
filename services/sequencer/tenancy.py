"""Commands scoped to one tenant (``<prefix>.cmd.<tenant>.<op>``, spec/wire.md).

A tenant's producer user may publish commands on its own tenant's subject
only, so the sequencer answers such a command for that tenant alone:

* a command's ``tenant`` (which every command that creates or looks up
  something carries) must be the subject's, or be left out and is then set
  to it: ``tenant_mismatch`` otherwise, which reveals nothing (the caller
  chose both);
* every id is its tenant's own (spec/object-model.md, "Identity"), so with
  the tenant set every lookup the writer and reader make is among the
  tenant's own: another tenant's lane, session, turn, action or receipt of
  the same id is never looked at, and answers exactly as a missing one;
* the one thing looked up by a ledger-wide id is an actor (its id is minted
  by the ledger): another tenant's is answered as a missing one here.

Runs in the writer thread just before the command, so nothing changes in
between. Commands on ``<prefix>.cmd.<op>`` (trusted users) are not checked
here; the writer still refuses a lane and actor of different tenants.
"""

from __future__ import annotations

import msgspec

from laneledger.contract.errors import EntityNotFound, TenantMismatch
from laneledger.contract.model import Command, CreateLane, EnsureActor
from laneledger.store.reader import LedgerReader


def scope_command(cmd: Command, tenant: str, reader: LedgerReader) -> Command:
    """``cmd`` for ``tenant`` alone: its ``tenant`` set to the subject's
    (``tenant_mismatch`` when it names another), and an actor it names
    checked to be the tenant's."""
    named = cmd.tenant
    if named is not None and named != tenant:
        raise TenantMismatch(
            "the command names another tenant than its subject",
            what="command",
            tenant=named,
            subject_tenant=tenant,
        )
    if isinstance(cmd, CreateLane) and cmd.actor_id is not None:
        owner = reader.actor_tenant(cmd.actor_id)
        if owner is not None and owner != tenant:
            raise EntityNotFound("no such actor", kind="actor", id=cmd.actor_id)
    if isinstance(cmd, EnsureActor | CreateLane):
        return cmd  # tenant is required there, and checked above
    return msgspec.structs.replace(cmd, tenant=tenant)
