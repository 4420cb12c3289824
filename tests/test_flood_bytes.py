"""A flood of the largest requests (1 MiB, the server's max_payload) from one
tenant, while another appends: the sequencer, a real process as deployed
with a tenants file, is never dropped by nats-server as a slow consumer,
never loses its lease, and commits every request of both (spec/wire.md,
"Tenants and limits", *Fairness*)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import pytest
from failure_logs import show_log_on_failure
from metrics_support import parse, scrape, total
from polling import eventually
from sequencer_process import SequencerProcess

from laneledger.contract.ids import new_id
from laneledger.contract.model import MAX_REQUEST_BYTES
from laneledger.contract.subjects import REPLY_HEADER, Subjects, inbox_prefix
from laneledger.sdk.client import LedgerClient, make_event

pytestmark = pytest.mark.nats

FLOOD = 80  # requests of about 1 MiB: 80 MiB, above nats-server's 64 MiB max_pending
GLOBEX_APPENDS = 40


@pytest.mark.slow
async def test_a_flood_of_1_mib_requests_never_drops_the_sequencer(
    nats_server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tenants = tmp_path / "tenants.toml"
    # acme's rate unlimited: only the byte bounds stand between its flood and the sequencer.
    tenants.write_text("[tenants.acme]\nappend_rate = 1000000\nappend_burst = 1000000\n[tenants.globex]\n")
    seq = SequencerProcess(
        nats_server.url, tmp_path / "ledger.db", log_dir=tmp_path, extra_args=("--tenants-file", str(tenants))
    )
    show_log_on_failure(request, seq)
    with seq.start():
        async with await LedgerClient.connect(nats_server.url, timeout=60.0, tenant_inboxes=True) as client:
            lanes = {}
            for tenant in ("acme", "globex"):
                actor = await client.ensure_actor(tenant, f"agent:{tenant}", "agent")
                lane = await client.create_lane(tenant, f"s-{tenant}", "r1", "main", actor_id=actor.id)
                lanes[tenant] = (actor, lane)
            flooder = await nats.connect(
                nats_server.url, name="acme-flood", inbox_prefix=inbox_prefix("acme")
            )
            try:
                flooded = await _flood(flooder, *lanes["acme"])
                latencies = await _globex_appends(client, *lanes["globex"])
                # Every one of acme's requests commits too, in order.
                await eventually(
                    lambda: len(flooded.receipts), until=lambda n: n == FLOOD, what="receipts", timeout=120
                )
            finally:
                await flooder.close()
            for tenant, expected in (("acme", FLOOD), ("globex", GLOBEX_APPENDS)):
                lane = await client.get_lane(lanes[tenant][1].id, tenant=tenant)
                assert lane.last_seq == expected, tenant
        assert [r["outcome"] for r in flooded.receipts] == ["committed"] * FLOOD
        samples = parse(await scrape(seq.http_url))
        assert total(samples, "laneledger_sequencer_lease_lost_total") == 0
    assert "Slow Consumer" not in nats_server.log_text()
    assert "disconnected" not in seq.log_text().lower()
    # How long globex waited is bench/fairness.py's to measure; shown with -s.
    print(f"globex latencies under the flood (ms): {sorted(round(x * 1000) for x in latencies)}")


class _Flood:
    def __init__(self) -> None:
        self.receipts: list[dict[str, object]] = []


async def _flood(nc, actor, lane) -> _Flood:
    """Publish FLOOD requests of close to 1 MiB (one event each) on acme's
    lane, each waiting for its PubAck only; receipts collected."""
    flood = _Flood()
    inbox = nc.new_inbox()

    async def on_receipts(msg) -> None:
        flood.receipts.extend(json.loads(msg.data))

    await nc.subscribe(inbox, cb=on_receipts)
    js = nc.jetstream()
    subject = Subjects().append("acme", lane.id)
    text = "x" * (MAX_REQUEST_BYTES - 2048)
    for seq in range(FLOOD):
        # Inline, as a producer without the SDK may send it (the SDK would
        # move a value this large into a blob).
        event = {**make_event(lane.id, "stream.text_delta", actor_id=actor.id), "payload": {"text": text}}
        body = {"lane_id": lane.id, "expected_last_seq": seq, "append_id": new_id(), "events": [event]}
        data = json.dumps(body).encode()
        assert len(data) <= MAX_REQUEST_BYTES
        await js.publish(subject, data, headers={REPLY_HEADER: inbox}, timeout=30)
    return flood


async def _globex_appends(client: LedgerClient, actor, lane) -> list[float]:
    latencies = []
    for seq in range(GLOBEX_APPENDS):
        started = time.perf_counter()
        event = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": f"g{seq}"})
        await client.append(lane, seq, [event], timeout=60)
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)
    return latencies
