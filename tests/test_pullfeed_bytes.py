"""``PullFeed`` bounded in bytes (runtime/pullfeed.py): each pull asks for at
most its byte budget, and a message stored under a larger max_payload than
the server now has (so larger than the budget) still comes: a pull that
delivered nothing doubles the budget instead of asking again for what
cannot fit. A real nats-server, restarted with a smaller max_payload."""

from __future__ import annotations

import json

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig

from laneledger.devtools.natsserver import JETSTREAM_CONFIG, NatsServer
from laneledger.runtime.pullfeed import PullFeed

MESSAGE = 200 * 1024


@pytest.mark.nats
async def test_a_message_larger_than_the_budget_still_comes(tmp_path, monkeypatch):
    conf = tmp_path / "nats.conf"
    conf.write_text(JETSTREAM_CONFIG)
    with NatsServer(tmp_path / "nats", config=conf) as server:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        for n in range(3):
            await js.publish("s.x", bytes([n]) * MESSAGE)
        await js.add_consumer("S", ConsumerConfig(name="c", ack_policy=AckPolicy.NONE))
        await nc.close()
        conf.write_text("max_payload: 64KB\n" + JETSTREAM_CONFIG)
        server.restart()

        asked: list[int] = []
        real_publish = NATS.publish

        async def publish(self, subject, payload=b"", reply="", headers=None):
            if subject == "$JS.API.CONSUMER.MSG.NEXT.S.c":
                asked.append(json.loads(payload)["max_bytes"])
            return await real_publish(self, subject, payload, reply=reply, headers=headers)

        monkeypatch.setattr(NATS, "publish", publish)
        nc = await nats.connect(server.url)
        try:
            assert nc.max_payload == 64 * 1024
            feed = PullFeed(nc, "S", "c", credits=10, max_bytes=1)
            await feed.start()
            got: list[bytes] = []
            for _ in range(10):  # bounded: a feed that cannot progress fails below
                got += [m.data for m in await feed.next_batch(10, 1.0)]
                if len(got) == 3:
                    break
            await feed.stop()
        finally:
            await nc.close()
    assert got == [bytes([n]) * MESSAGE for n in range(3)]
    # Raised to twice max_payload (128 KiB), where not one 200 KiB message
    # fits, then doubled once: every later pull asks for 256 KiB.
    assert asked[:2] == [128 * 1024, 256 * 1024] and set(asked[1:]) == {256 * 1024}, asked
