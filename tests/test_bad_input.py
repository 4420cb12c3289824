"""Bad input never hurts: every malformed or refused request gets a typed
rejection receipt and a counter, nothing is half-written, and the sequencer
keeps serving good requests."""

from __future__ import annotations

import msgspec
import pytest
from ledger_fixtures import SMALL_REQUEST_LIMIT
from polling import eventually
from raw_appends import Inbox

from laneledger.contract.model import AppendCommitted, AppendRejected, timestamp_problem
from laneledger.contract.subjects import Subjects, token
from laneledger.sdk.client import make_event
from laneledger.services.sequencer.service import Sequencer


def rejected_count(sequencer: Sequencer, code: str) -> float:
    value = sequencer._metrics.registry.get_sample_value(
        "laneledger_sequencer_append_requests_total", {"outcome": "rejected", "code": code}
    )
    return value or 0.0


def request(lane, events, *, expected=0, append_id="a-1") -> dict:
    return {"lane_id": lane.id, "expected_last_seq": expected, "append_id": append_id, "events": events}


async def test_each_kind_of_bad_input_gets_a_typed_receipt(nc, small_ledger, small_sequencer):
    client, actor, lane = small_ledger
    subject = Subjects().append("acme", lane.id)
    good_event = make_event(lane.id, "stream.text_delta", actor_id=actor.id)
    cases = [
        ("malformed_message", subject, b"\xff\x00 not json", None),
        (
            "invalid_request",
            subject,
            msgspec.json.encode({**request(lane, [good_event]), "expected_last_seq": "zero"}),
            "$.expected_last_seq",
        ),
        (
            "invalid_request",
            subject,
            msgspec.json.encode(request(lane, [{**good_event, "occurred_at": "yesterday"}])),
            "$.events[0].occurred_at",
        ),
        # The right shape, but no real instant (the costs read would choke on it later).
        (
            "invalid_request",
            subject,
            msgspec.json.encode(request(lane, [{**good_event, "occurred_at": "2026-02-30T10:00:00Z"}])),
            "$.events[0].occurred_at",
        ),
        ("invalid_request", subject, msgspec.json.encode(request(lane, [])), "$.events"),
        (
            "invalid_request",
            subject,
            msgspec.json.encode({**request(lane, [good_event]), "expected_last_seq": 2**53}),
            "$.expected_last_seq",
        ),
        # Deeper than MAX_NESTING: refused before decoding (spec/wire.md).
        (
            "invalid_request",
            subject,
            msgspec.json.encode(request(lane, [good_event])).replace(
                b'"payload":{}', b'"payload":{"a":' + b"[" * 200 + b"]" * 200 + b"}"
            ),
            "$",
        ),
        (
            "invalid_request",
            subject,
            msgspec.json.encode(request(lane, [{**good_event, "sneaky": 1}])),
            "$.events[0]",
        ),
        (
            "request_too_large",
            subject,
            msgspec.json.encode(
                request(lane, [{**good_event, "payload": {"blob": "x" * SMALL_REQUEST_LIMIT}}])
            ),
            None,
        ),
        (
            "not_canonicalizable",
            subject,
            msgspec.json.encode(request(lane, [{**good_event, "payload": {"n": 2**60}}])),
            None,
        ),
        (
            "invalid_request",
            f"ledger.append.acme.{token('other-lane')}",
            msgspec.json.encode(request(lane, [good_event])),
            "$.lane_id",
        ),
        (
            "invalid_request",
            "ledger.append.acme.too.many.tokens",
            msgspec.json.encode(request(lane, [good_event])),
            None,
        ),
        (
            "entity_not_found",
            Subjects().append("acme", "missing-lane"),
            msgspec.json.encode({**request(lane, [good_event]), "lane_id": "missing-lane"}),
            None,
        ),
        (
            "entity_not_found",
            subject,
            msgspec.json.encode(request(lane, [{**good_event, "actor_id": "nobody"}])),
            None,
        ),
        (
            "entity_not_found",  # another tenant's lane: as if there were none
            Subjects().append("globex", lane.id),
            msgspec.json.encode(request(lane, [good_event])),
            None,
        ),
        (
            "unknown_event_type",
            subject,
            msgspec.json.encode(request(lane, [{**good_event, "event_type": "nonsense"}])),
            None,
        ),
        (
            "invalid_payload",
            subject,
            msgspec.json.encode(
                request(
                    lane,
                    [
                        {
                            **good_event,
                            "event_type": "cost.recorded",
                            "payload": {"provider": "p", "model": "m", "currency": "USD", "amount": 0.1},
                        }
                    ],
                )
            ),
            None,
        ),
    ]
    async with Inbox(nc) as inbox:
        for code, subj, body, path in cases:
            before = rejected_count(small_sequencer, code)
            await inbox.send(subj, body)
            receipt = await inbox.next()
            assert isinstance(receipt, AppendRejected), (code, receipt)
            assert receipt.error.code == code, (code, receipt.error)
            if path is not None:
                assert receipt.error.details["path"] == path
            if code not in ("malformed_message", "request_too_large"):
                assert receipt.append_id == "a-1"
            assert rejected_count(small_sequencer, code) == before + 1
    # Nothing was written, and the sequencer still commits a good append.
    assert small_sequencer._writer.last_position == 0
    receipt = await client.append(lane, 0, [good_event])
    assert receipt.positions == [1]


async def test_bad_and_good_requests_in_one_batch(nc, small_ledger, small_sequencer):
    client, actor, lane = small_ledger
    subject = Subjects().append("acme", lane.id)
    async with Inbox(nc) as inbox:
        bodies = []
        for i in range(30):
            if i % 3 == 0:
                bodies.append(b"garbage")
            else:
                event = make_event(lane.id, "stream.text_delta", actor_id=actor.id)
                bodies.append(
                    msgspec.json.encode(
                        request(
                            lane,
                            [event],
                            expected=len([b for b in bodies if b != b"garbage"]),
                            append_id=f"a-{i}",
                        )
                    )
                )
        # In order on one connection: the stream keeps that order, and the
        # sequencer pulls whatever has arrived as one batch.
        for body in bodies:
            await inbox.send(subject, body)
        receipts = [await inbox.next() for _ in bodies]
    committed = [r for r in receipts if isinstance(r, AppendCommitted)]
    refused = [r for r in receipts if isinstance(r, AppendRejected)]
    assert len(refused) == 10 and {r.error.code for r in refused} == {"malformed_message"}
    page = await client.load_lane(lane.id)
    assert [e.seq for e in page.events] == list(range(1, len(committed) + 1))
    assert sorted(r.last_seq for r in committed) == list(range(1, len(committed) + 1))


async def test_request_without_reply_subject_is_still_processed(nc, small_ledger, small_sequencer):
    client, actor, lane = small_ledger
    event = make_event(lane.id, "stream.text_delta", actor_id=actor.id)
    inbox = Inbox(nc)
    await inbox.send(
        Subjects().append("acme", lane.id),
        msgspec.json.encode(request(lane, [event], append_id="quiet")),
        reply=False,
    )
    await inbox.send(Subjects().append("acme", lane.id), b"{", reply=False)
    await eventually(
        lambda: small_sequencer._writer.last_position,
        until=lambda last: last == 1,
        what="the unanswered append to commit",
    )
    stored = await client.get_receipt("quiet")
    assert stored.event_ids == [event["id"]]
    await eventually(
        lambda: rejected_count(small_sequencer, "malformed_message"),
        until=lambda count: count == 1,
        what="the unanswered malformed request to be counted",
    )
    # Refused with nobody to tell: counted on its own as well.
    assert (
        small_sequencer._metrics.registry.get_sample_value(
            "laneledger_sequencer_rejections_unanswered_total", {"code": "malformed_message"}
        )
        == 1
    )


async def test_bad_commands_get_typed_error_replies(nc, small_ledger, small_sequencer):
    _, _, lane = small_ledger
    reply = await nc.request("ledger.cmd.create_lane", b"not json", timeout=5)
    assert b'"code":"malformed_message"' in reply.data
    reply = await nc.request(
        "ledger.cmd.create_lane", msgspec.json.encode({"op": "get_lane", "lane_id": lane.id}), timeout=5
    )
    assert b'"code":"invalid_request"' in reply.data and b"subject" in reply.data
    reply = await nc.request(
        "ledger.cmd.get_lane", msgspec.json.encode({"op": "get_lane", "lane_id": lane.id}), timeout=5
    )
    assert b'"status":"ok"' in reply.data
    reply = await nc.request(
        "ledger.cmd.create_turn",
        msgspec.json.encode({"op": "create_turn", "lane_id": lane.id, "turn_no": 2**63}),
        timeout=5,
    )
    assert b'"code":"invalid_request"' in reply.data and b"$.turn_no" in reply.data
    # A subject no command has: refused, and counted under one label.
    reply = await nc.request("ledger.cmd.made_up", b"{}", timeout=5)
    assert b'"code":"invalid_request"' in reply.data
    assert (
        small_sequencer._metrics.registry.get_sample_value(
            "laneledger_sequencer_commands_total", {"op": "other", "outcome": "invalid_request"}
        )
        == 1
    )


@pytest.mark.parametrize(
    ("value", "real"),
    [
        ("2026-01-02T03:04:05Z", True),
        ("2026-01-02T03:04:05.123456789+05:30", True),
        ("2016-12-31T23:59:60Z", True),  # a leap second
        ("2026-02-29T00:00:00Z", False),  # not a leap year
        ("2026-13-01T00:00:00Z", False),
        ("2026-01-01T24:00:00Z", False),
        ("2026-01-01T00:00:00+25:00", False),
    ],
)
def test_timestamps_must_name_real_instants(value, real):
    assert (timestamp_problem(value) is None) is real
