"""A command sent while no sequencer subscribes (one starting, restarting,
or none at all) on a real nats-server: the SDK asks again for a moment,
with the one retry policy (laneledger.sdk.retry), then raises a typed
``LedgerUnavailable`` naming who did not answer; it never hangs and never
leaks nats-py's own error."""

from __future__ import annotations

import pytest
from nats.aio.client import Client as NATS

from laneledger.contract.errors import LedgerUnavailable
from laneledger.sdk.client import LedgerClient

pytestmark = pytest.mark.nats


async def test_a_command_nobody_answers_is_unavailable_naming_the_sequencer(nc: NATS) -> None:
    client = LedgerClient(nc, timeout=5.0)
    with pytest.raises(LedgerUnavailable, match="get_lane: no sequencer is answering") as raised:
        await client.get_lane("lane-1")
    assert raised.value.retryable
