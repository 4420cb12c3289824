"""Receipts always fit the server's max_payload (spec/wire.md, "Receipts"):
a batch's receipts for one inbox are split over as many messages as it
takes, and a request whose receipt could not fit one message is refused
before it commits. Nothing is dropped for its size."""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest
from failure_logs import show_log_on_failure
from nats.aio.msg import Msg
from polling import eventually
from prometheus_client import CollectorRegistry

from laneledger.contract.errors import RequestTooLarge
from laneledger.contract.model import AppendCommitted, Receipt, decoder, encode
from laneledger.contract.subjects import REPLY_HEADER
from laneledger.devtools.natsserver import JETSTREAM_CONFIG, NatsServer
from laneledger.sdk.client import make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.receipts import check_receipt_fits, receipt_bound, receipt_messages
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.append import prepare_append

LONGEST_ID = 256
SMALL_MAX_PAYLOAD = 256 << 10


def _id(i: int) -> str:
    return f"{i:08d}".ljust(LONGEST_ID, "x")


def _body(lane_id: str, actor_id: str, n: int, events: int) -> bytes:
    """The ``n``-th append, the first of its lane, its ids of the longest length."""
    made = [
        make_event(lane_id, "stream.text_delta", actor_id=actor_id, event_id=_id(n * 1000 + i))
        for i in range(events)
    ]
    body = {"lane_id": lane_id, "expected_last_seq": 0, "append_id": _id(n), "events": made}
    return json.dumps(body).encode()


def _receipt(i: int, event_ids: list[str]) -> AppendCommitted:
    return AppendCommitted(
        append_id=_id(i),
        lane_id="lane",
        digest="0" * 64,
        first_seq=1,
        last_seq=len(event_ids),
        event_ids=event_ids,
        positions=list(range(1, len(event_ids) + 1)),
        entry_hashes=["a" * 64] * len(event_ids),
        committed_at="2026-12-05T00:00:00.000000Z",
    )


# ------------------------------------------------------------ pure logic


def test_receipts_over_max_payload_are_split_into_whole_receipts_in_order() -> None:
    receipts = [_receipt(i, [_id(j) for j in range(10)]) for i in range(200)]
    messages = receipt_messages(receipts, 64 << 10)
    assert len(messages) > 1
    assert all(len(m) <= 64 << 10 for m in messages)
    assert [r for m in messages for r in decoder(list[Receipt]).decode(m)] == receipts
    assert receipt_messages(receipts[:3], 64 << 10) == [encode(receipts[:3])]


def test_a_request_whose_receipt_could_not_fit_is_refused_before_it_commits() -> None:
    # The most a request holds: 1000 events with ids of the longest length.
    data = _body("lane", "actor", 0, 1000)
    append = prepare_append(data)
    bound = receipt_bound(append)
    real = encode([_receipt(0, [event.id for event in append.request.events])])
    assert len(real) <= bound < 1 << 20
    check_receipt_fits(append, len(data), 1 << 20)  # fits the default max_payload
    with pytest.raises(RequestTooLarge) as refused:
        check_receipt_fits(append, len(data), bound - 1)
    assert refused.value.details == {"limit": "receipt_bytes", "size_bytes": bound, "limit_bytes": bound - 1}


# ------------------------------------------------- against a real server


@pytest.fixture
def small_server(tmp_path: Path, request: pytest.FixtureRequest):
    """A nats-server whose max_payload is 256 KiB."""
    conf = tmp_path / "nats.conf"
    conf.write_text(f"max_payload: {SMALL_MAX_PAYLOAD}\n{JETSTREAM_CONFIG}")
    server = NatsServer(tmp_path / "nats", config=conf)
    show_log_on_failure(request, server)
    with server:
        yield server


@pytest.mark.nats
async def test_a_batchs_receipts_over_max_payload_all_arrive(small_server, tmp_path: Path) -> None:
    """The sequencer's receipt path (``_send_receipts``, as a committed batch
    calls it) on a server whose max_payload the receipts exceed together."""
    nc = await nats.connect(small_server.url)
    sequencer = Sequencer(
        nc,
        LedgerWriter(open_ledger(tmp_path / "ledger.db")),
        SequencerMetrics(CollectorRegistry()),
        SequencerSettings(),
    )
    try:
        inbox, got = nc.new_inbox(), []

        async def on_receipts(msg) -> None:
            got.append((len(msg.data), decoder(list[Receipt]).decode(msg.data)))

        await nc.subscribe(inbox, cb=on_receipts)
        # 120 receipts of 10 events with ids of the longest length: 460 kB.
        receipts: list[Receipt] = [_receipt(i, [_id(i * 1000 + j) for j in range(10)]) for i in range(120)]
        assert len(encode(receipts)) > SMALL_MAX_PAYLOAD
        requests = [Msg(nc, subject="ledger.append.acme.l", headers={REPLY_HEADER: inbox}) for _ in receipts]
        await sequencer._send_receipts(requests, receipts, [inbox] * len(receipts))
        await eventually(lambda: sum(len(r) for _, r in got), until=lambda n: n == 120, what="every receipt")
    finally:
        sequencer._writer_thread.shutdown()
        await nc.close()
    assert [r for _, message in got for r in message] == receipts  # whole, in order
    assert len(got) > 1 and all(size <= SMALL_MAX_PAYLOAD for size, _ in got)
