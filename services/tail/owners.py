"""Whose session or lane a request names.

Every id is its tenant's own (spec/object-model.md, "Identity"): two
tenants may each have a session ``s1``. A route that names a session or a
lane answers for one tenant: a tenant token's own; for the operator token
(or an open service) the one its ``tenant`` parameter names, or else the
only tenant the read model knows with that id — and when several have it,
``invalid_request`` asking for the parameter (the operator sees every
tenant, so naming them reveals nothing). With no tenant known (nothing
committed yet) the scope stays as it was and the sequencer, asked by the
route, resolves the id the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from laneledger.contract.errors import InvalidRequest
from laneledger.runtime.access import Scope, scope_of

from .projections.session_index import tenants_with
from .readmodel import ReadModel

TENANT_PARAMETER = "tenant"

Read = Callable[..., Awaitable[Any]]


async def owner_scope(
    request: Any, tenant: str | None, read: Read, model: ReadModel, kind: str, entity_id: str
) -> Scope:
    """The request's scope narrowed to the tenant whose ``kind`` ``entity_id``
    it means (see the module docstring), ``tenant`` the parameter's value;
    ``read`` runs a query on a reader thread."""
    scope = scope_of(request)
    named = scope.narrow(tenant)
    if named is not None:
        return Scope(named, operator=scope.operator)
    tenants = await read(tenants_with, model, kind, entity_id)
    if len(tenants) > 1:
        raise InvalidRequest(
            f"several tenants have a {kind} with this id: name one with the tenant parameter",
            parameter=TENANT_PARAMETER,
            kind=kind,
            id=entity_id,
            tenants=sorted(tenants),
        )
    return Scope(tenants[0], operator=scope.operator) if tenants else scope
