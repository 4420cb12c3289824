"""Erasure over HTTP: ``POST /api/v1/erasures`` (spec/erasure.md, "Over HTTP").

A tenant's token erases the content of one of its own sessions (or of one
run of it), of its events naming a data subject, or of what it committed
before a time (the erase command's scopes, spec/erasure.md): the gateway
sends the sequencer's ``erase`` command on that tenant's subjects
(``<prefix>.cmd.<tenant>.erase``), so another tenant's session is 404
``entity_not_found`` exactly as over NATS. The operator's token (or an open
service) names the tenant in the body.

Who asks is an actor of the tenant: ``actor_id`` names one that exists, or
``actor_key`` (``human:dpo``) one the gateway registers if new, its kind by
its prefix as ``laneledger rewind --actor`` does.

One request sends pages until the erasure is done or its budget is spent
(``MAX_PAGES`` pages, ``BUDGET_S`` seconds), so a huge session holds no
request for minutes: an answer with ``has_more`` is continued by sending
the same body again with its ``erasure_id`` and ``after_position`` set to
the answer's ``next_after_position``.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from aiohttp import web
from msgspec import Meta
from nats.aio.client import Client as NATS

from laneledger.compat.korg_append import actor_kind_of
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import MAX_NAME_LENGTH, MAX_WIRE_INT, Id, Timestamp, decode
from laneledger.contract.subjects import Subjects
from laneledger.runtime.access import scope_of
from laneledger.runtime.httpjson import json_response
from laneledger.sdk.client import LedgerClient

from .bodies import body_bytes, no_query

ERASURES_PATH = "/api/v1/erasures"
PAGE_LIMIT = 200  # events a page (the erase command's default)
MAX_PAGES = 20  # pages a request: at most 4000 events
BUDGET_S = 10.0  # no further page is sent once a request has taken this long


class EraseRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """An erasure asked over HTTP: the ``erase`` command's fields
    (spec/wire.md) but its page size, and who asks by ``actor_id`` or
    ``actor_key`` (exactly one)."""

    reason: Annotated[str, Meta(min_length=1, max_length=MAX_NAME_LENGTH)]
    # One scope, as the erase command has it (its errors name the field).
    session_id: Id | None = None
    run_id: Id | None = None
    data_subject: Id | None = None
    committed_before: Timestamp | None = None
    actor_id: Id | None = None
    actor_key: Id | None = None
    erasure_id: Id | None = None
    after_position: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)] = 0
    dry_run: bool = False
    tenant: Id | None = None


class HttpErasures:
    def __init__(self, nc: NATS, subjects: Subjects, timeout_s: float) -> None:
        self._nc = nc
        self._subjects = subjects
        self._timeout_s = timeout_s

    def routes(self) -> list[web.RouteDef]:
        return [web.post(ERASURES_PATH, self.erase, name="erasures")]

    async def erase(self, request: web.Request) -> web.Response:
        no_query(request)
        asked = decode(await body_bytes(request), EraseRequest)
        tenant = scope_of(request).narrow(asked.tenant)
        if tenant is None:
            raise InvalidRequest("this token sees every tenant: name the erasure's tenant", path="$.tenant")
        if (asked.actor_id is None) == (asked.actor_key is None):
            raise InvalidRequest("name who asks: exactly one of actor_id and actor_key", path="$.actor_id")
        # Commands on the tenant's own subjects (<prefix>.cmd.<tenant>.<op>):
        # the sequencer answers them for that tenant alone. The client holds
        # nothing but for appends, so one is made per request.
        ledger = LedgerClient(self._nc, subjects=self._subjects, timeout=self._timeout_s, tenant=tenant)
        try:
            actor_id = asked.actor_id
            if asked.actor_key is not None:
                actor = await ledger.ensure_actor(tenant, asked.actor_key, actor_kind_of(asked.actor_key))
                actor_id = actor.id
            assert actor_id is not None
            done = await ledger.erase(
                asked.session_id,
                actor_id=actor_id,
                reason=asked.reason,
                run_id=asked.run_id,
                data_subject=asked.data_subject,
                committed_before=asked.committed_before,
                erasure_id=asked.erasure_id,
                after_position=asked.after_position,
                limit=PAGE_LIMIT,
                dry_run=asked.dry_run,
                max_pages=MAX_PAGES,
                budget_s=BUDGET_S,
            )
            return json_response(done)
        finally:
            await ledger.close()
