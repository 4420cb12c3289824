"""The multi-tenant deployment works as rendered (issue 34, item 1): on the
config ``laneledger nats-config --tenants-file`` renders, with every service
as its own deploy user and the tenants file (``rendered_deployment``), both
tenants' appends are committed and acknowledged once: the append streams are
empty after the commit, nothing is redelivered or left pending, each receipt
arrives once; and the same holds after the active sequencer is killed and
the standby takes over. nats-server refuses no deploy user anything."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import aiohttp
import msgspec
import nats
from polling import eventually
from rendered_deployment import RenderedDeployment

from laneledger.contract.model import AppendCommitted, Receipt
from laneledger.contract.subjects import Subjects, inbox_prefix, token
from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.streams import SEQUENCER_CONSUMER

SUBJECTS = Subjects()
APPENDS = 4  # per tenant, before and after the failover
_receipts = msgspec.json.Decoder(list[Receipt])


class InboxWatch:
    """Every receipt that reaches a tenant's inbox (``_INBOX_<tenant>.>``,
    subscribed as its producer user), counted by append id."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._nc: Any = None

    async def start(self, d: RenderedDeployment, tenant: str) -> InboxWatch:
        self._nc = await nats.connect(d.url(f"producer-{tenant}"), inbox_prefix=inbox_prefix(tenant))
        await self._nc.subscribe(f"{inbox_prefix(tenant)}.>", cb=self._on_message)
        return self

    async def _on_message(self, msg: Any) -> None:
        try:
            receipts = _receipts.decode(msg.data)
        except msgspec.DecodeError:
            return  # a command's reply or a PubAck, not receipts
        self.seen.update(r.append_id for r in receipts if r.append_id is not None)

    async def close(self) -> None:
        await self._nc.close()


async def append_all(client: LedgerClient, lane: Any, actor_id: str, first: int, ids: list[str]) -> None:
    """``APPENDS`` appends, one event each, from lane seq ``first``; one
    carries a payload large enough to go by blob (the tenant's buckets)."""
    for n in range(first, first + APPENDS):
        payload = {"n": n, "text": "x" * 2048 if n == first else "short"}
        event = make_event(lane.id, "stream.text_delta", actor_id=actor_id, payload=payload)
        append_id = f"{lane.id}-{n}"
        receipt = await client.append(lane, n, [event], append_id=append_id, retries=20, timeout=5.0)
        assert isinstance(receipt, AppendCommitted) and receipt.last_seq == n + 1
        ids.append(append_id)


async def settled(d: RenderedDeployment, watches: dict[str, InboxWatch], ids: dict[str, list[str]]) -> None:
    """Each tenant's append stream empty, its consumer with nothing pending
    or redelivered, and each of its appends receipted exactly once."""
    async with d.admin() as nc:
        js = nc.jetstream()
        for tenant in d.tenants:
            stream = SUBJECTS.tenant_append_stream(token(tenant))
            await eventually(
                lambda stream=stream: js.stream_info(stream),
                until=lambda info: info.state.messages == 0,
                what=f"{stream} empty (every request acknowledged)",
            )
            consumer = await js.consumer_info(stream, SEQUENCER_CONSUMER)
            assert (consumer.num_redelivered, consumer.num_ack_pending, consumer.num_pending) == (0, 0, 0)
    for tenant in d.tenants:
        want = Counter(ids[tenant])
        await eventually(
            lambda tenant=tenant: dict(watches[tenant].seen),
            until=lambda seen, want=want: seen == want,
            what=f"{tenant}'s receipts, one per append",
        )
    await asyncio.sleep(0.5)  # a redelivery would re-send a receipt: none may come
    for tenant in d.tenants:
        assert dict(watches[tenant].seen) == Counter(ids[tenant])


async def tail_sessions(d: RenderedDeployment, tenant: str) -> Any:
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {d.token(tenant)}"}) as http,
        http.get(f"{d.tail.http_url}/api/v1/sessions") as resp,
    ):
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def test_the_rendered_deployment_commits_each_append_once_before_and_after_a_failover(
    rendered_deployment: RenderedDeployment,
) -> None:
    d = rendered_deployment
    watches = {t: await InboxWatch().start(d, t) for t in d.tenants}
    ids: dict[str, list[str]] = {t: [] for t in d.tenants}
    lanes = {}
    try:
        for tenant in d.tenants:
            client = await d.connect(tenant, timeout=5.0)
            actor = await client.ensure_actor(tenant, f"agent:{tenant}@1", "agent")
            lane = await client.create_lane(tenant, "s-1", "r-1", "main", actor_id=actor.id)
            lanes[tenant] = (client, lane, actor.id)
        await asyncio.gather(*(append_all(c, lane, a, 0, ids[t]) for t, (c, lane, a) in lanes.items()))
        await settled(d, watches, ids)

        # The checkpoint service and the tail serve each tenant as deployed.
        client, lane, _ = lanes["acme"]
        saved = await CheckpointClient(client).save(
            "k-1", expected_revision=0, format="test/v1", state={"at": 1}, session_id="s-1", run_id="r-1"
        )
        assert saved.revision == 1
        page = await eventually(
            lambda: tail_sessions(d, "globex"),
            until=lambda page: [s["session_id"] for s in page["sessions"]] == ["s-1"],
            what="globex's session in the tail's index (its token: its own only)",
        )
        assert {s["tenant"] for s in page["sessions"]} == {"globex"}

        await d.fail_over()
        await asyncio.gather(*(append_all(c, lane, a, APPENDS, ids[t]) for t, (c, lane, a) in lanes.items()))
        await settled(d, watches, ids)
    finally:
        for watch in watches.values():
            await watch.close()

    verified = await d.verify()
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert d.permission_violations() == []
