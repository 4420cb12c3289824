"""Bad input, generated: hypothesis publishes malformed append requests, raw
bytes and malformed commands to a real sequencer over a real nats-server.

For every message: one with a reply inbox gets exactly one typed answer (a
rejection whose code is a request or store error of spec/errors.md — never
``internal`` — or a commit, when the fuzzer happened to make a valid
request); one without is counted (``laneledger_sequencer_append_requests_total``
and, when refused, ``laneledger_sequencer_rejections_unanswered_total``) and
dropped. The sequencer keeps running throughout, and afterwards the ledger
audits clean and the committed stream equals SQLite.

Hypothesis runs in a worker thread and hands each example to the test's
event loop (where the sequencer runs), so examples shrink as usual and the
final checks run after the last example. ``LANELEDGER_FUZZ_EXAMPLES`` sets
the number of examples for a long run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from bad_input_strategies import World, bad_appends, command_messages, fuzz_examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raw_appends import Inbox

from laneledger.audit.ledger import audit_ledger
from laneledger.audit.stream import check_stream
from laneledger.contract.errors import ERRORS_BY_CODE, RequestError, StoreError
from laneledger.contract.model import AppendCommitted, AppendRejected, ReplyError, ReplyOk, decoder
from laneledger.contract.subjects import Subjects
from laneledger.sdk.client import make_event
from laneledger.services.sequencer.service import COMMAND_OPS

pytestmark = pytest.mark.timeout(300)

SENTINEL = b"end of example"  # a malformed request: its receipt closes an example
STREAM_WAIT_S = 10.0  # how long the committed stream may trail SQLite (verify's --stream-wait-s)


def run_examples(
    strategy: st.SearchStrategy, check: Callable[[Any], Awaitable[None]], examples: int
) -> Awaitable[None]:
    """Run ``check`` on ``examples`` drawn from ``strategy``: hypothesis in a
    thread, each check on the calling event loop."""
    loop = asyncio.get_running_loop()

    @settings(
        max_examples=examples,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(strategy)
    def each(example: Any) -> None:
        asyncio.run_coroutine_threadsafe(check(example), loop).result(timeout=20)

    return asyncio.to_thread(each)


def sample_sum(registry, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def is_wire_refusal(code: str) -> bool:
    """A code the sequencer may answer bad input with: a request or store
    error of spec/errors.md (not internal, not a transport code)."""
    cls = ERRORS_BY_CODE.get(code)
    return cls is not None and issubclass(cls, (RequestError, StoreError))


def sequencer_alive(sequencer) -> bool:
    """Ready, and none of its tasks has ended (raises with the one that did)."""
    for task in sequencer._tasks:
        if task.done():
            raise AssertionError(
                f"the sequencer's {task.get_name()} ended: "
                f"{task.exception() if not task.cancelled() else 'cancelled'!r}"
            )
    return sequencer.ready


@pytest.fixture
async def world(small_ledger) -> World:
    """The target lane with three events, a lane and an event in another
    session, and a lane and an actor of another tenant."""
    client, actor, lane = small_ledger
    foreign = await client.ensure_actor("globex", "agent:fuzz@1", "agent")
    foreign_lane = await client.create_lane("globex", "g1", "r1", "main", actor_id=foreign.id)
    other = await client.create_lane("acme", "s2", "r1", "main", actor_id=actor.id)
    committed = await client.append(
        lane, 0, [make_event(lane.id, "stream.text_delta", actor_id=actor.id) for _ in range(3)]
    )
    other_receipt = await client.append(
        other, 0, [make_event(other.id, "stream.text_delta", actor_id=actor.id)]
    )
    return World(
        Subjects(),
        "acme",
        lane.id,
        other.id,
        foreign_lane.id,
        actor.id,
        foreign.id,
        tuple(committed.event_ids),
        tuple(other_receipt.event_ids),
        committed.append_id,
    )


async def assert_ledger_valid(nc, small_sequencer, db: Path, client, world: World) -> None:
    assert sequencer_alive(small_sequencer)
    # Still serving: a good append commits.
    lane = await client.get_lane(world.lane_id)
    receipt = await client.append(
        lane, lane.last_seq, [make_event(world.lane_id, "stream.text_delta", actor_id=world.actor_id)]
    )
    assert receipt.last_seq == lane.last_seq + 1
    audit = audit_ledger(db)
    assert audit.events == small_sequencer._writer.last_position
    # The mirror publishes after the receipts: like `laneledger verify`, let
    # the stream catch up (bounded) before calling it behind.
    checked = await check_stream(nc.jetstream(), db, wait_s=STREAM_WAIT_S)
    assert checked.messages == audit.events


@pytest.mark.slow
async def test_fuzzed_appends_get_typed_receipts_or_are_counted(
    nc, small_ledger, small_sequencer, world, tmp_path
):
    client = small_ledger[0]
    registry = small_sequencer._metrics.registry
    requests = "laneledger_sequencer_append_requests_total"
    unanswered = "laneledger_sequencer_rejections_unanswered_total"
    seen_codes: set[str] = set()

    async def check(messages) -> None:
        assert sequencer_alive(small_sequencer), "the sequencer died in an earlier example"
        before = {
            k: sample_sum(registry, requests, **labels)
            for k, labels in (("all", {}), ("accepted", {"code": ""}))
        }
        quiet_before = sample_sum(registry, unanswered)
        async with Inbox(nc) as inbox:  # one per example: nothing left over from another
            for message in messages:
                await inbox.send(message.subject, message.body, reply=message.reply)
            await inbox.send(world.subjects.append(world.tenant, world.lane_id), SENTINEL)
            answered = [m for m in messages if m.reply]
            receipts = [await inbox.next() for _ in range(len(answered) + 1)]
        sentinel = receipts.pop()
        assert isinstance(sentinel, AppendRejected) and sentinel.error.code == "malformed_message"
        accepted_answered = 0
        for message, receipt in zip(answered, receipts, strict=True):
            if isinstance(receipt, AppendRejected):
                assert is_wire_refusal(receipt.error.code), (message, receipt.error)
                assert receipt.error.message, (message, receipt.error)
                seen_codes.add(receipt.error.code)
            else:
                assert isinstance(receipt, AppendCommitted), (message, receipt)
                accepted_answered += 1
        assert sample_sum(registry, requests) - before["all"] == len(messages) + 1
        accepted_quiet = sample_sum(registry, requests, code="") - before["accepted"] - accepted_answered
        refused_quiet = len(messages) - len(answered) - accepted_quiet
        assert sample_sum(registry, unanswered) - quiet_before == refused_quiet, messages
        assert sequencer_alive(small_sequencer), messages

    await run_examples(bad_appends(world), check, fuzz_examples(400))
    # The generator reached past decoding (a guard against a strategy that
    # silently stopped producing what it is meant to).
    assert {"malformed_message", "invalid_request"} < seen_codes, seen_codes
    await assert_ledger_valid(nc, small_sequencer, tmp_path / "ledger.db", client, world)


async def test_fuzzed_commands_get_typed_replies_or_are_counted(
    nc, small_ledger, small_sequencer, world, tmp_path
):
    client = small_ledger[0]
    registry = small_sequencer._metrics.registry
    commands = "laneledger_sequencer_commands_total"
    reply_decoder = decoder(ReplyOk | ReplyError)
    seen_codes: set[str] = set()

    async def check(message) -> None:
        assert sequencer_alive(small_sequencer), "the sequencer died in an earlier example"
        before = sample_sum(registry, commands)
        if message.reply:
            reply = await nc.request(message.subject, message.body, timeout=10)
            answer = reply_decoder.decode(reply.data)
            if isinstance(answer, ReplyError):
                assert is_wire_refusal(answer.error.code), (message, answer.error)
                seen_codes.add(answer.error.code)
        else:
            await nc.publish(message.subject, message.body)
            await nc.flush()
        # A sentinel request on the same connection: answered after the message above.
        await nc.request(
            world.subjects.command("get_lane"),
            msgspec.json.encode({"op": "get_lane", "lane_id": world.lane_id}),
            timeout=10,
        )
        assert sample_sum(registry, commands) - before == 2, message
        assert sequencer_alive(small_sequencer), message

    await run_examples(command_messages(world), check, fuzz_examples(400))
    assert "invalid_request" in seen_codes and len(seen_codes) > 1, seen_codes
    # The op label stays bounded however many subjects a fuzzer invents.
    ops = {
        sample.labels["op"]
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == commands
    }
    assert ops <= COMMAND_OPS | {"other"}, ops
    await assert_ledger_valid(nc, small_sequencer, tmp_path / "ledger.db", client, world)
