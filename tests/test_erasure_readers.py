"""What reads the ledger shows an erased event erased (spec/erasure.md,
*Readers*): the JSONL and korg-ledger-v1 exports, which read the ledger
file, and the OTel mapping, which drops what it holds of an erased event's
content. (The tail: test_tail_erasure.py.)"""

from __future__ import annotations

import json

import msgspec
from inprocess_ledger import InProcessLedgerClient
from test_erasure import CODE, EMAIL, NOTE, fill, holding
from test_otel_mapping import committed

from laneledger.cli import main
from laneledger.cli.ledger import render
from laneledger.contract.erasure import ERASURE_EVENT, ERASURE_RUN, LEDGER_SESSION
from laneledger.contract.erasurescope import ErasureScope, scope_of
from laneledger.contract.model import Lane
from laneledger.otel.mapping import SpanMapper
from laneledger.sdk.client import make_event
from laneledger.store import LedgerWriter, open_ledger

PLANTED = [EMAIL, CODE, NOTE]


async def test_the_exports_show_erased_events_erased_and_still_verify(tmp_path, capsys):
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    client = InProcessLedgerClient(writer)
    actor = await client.ensure_actor("acme", "agent:t@1", "agent")
    lane, _ = await fill(client, actor, "s1", "r1", 3)
    cost = {"provider": "p", "model": "m", "amount": "1.5", "currency": "USD"}
    await client.append(lane, 3, [make_event(lane.id, "cost.recorded", actor_id=actor.id, payload=cost)])
    assert "cost: 1.5" in render(await client.load_session("s1"))
    done = await client.erase("s1", actor_id=actor.id, reason="GDPR Art. 17")
    # `laneledger inspect`: an erased cost adds nothing (its amount is gone).
    assert "cost: 0" in render(await client.load_session("s1"))
    mark = msgspec.to_builtins(done.erasure)
    writer._db.close()
    db = str(tmp_path / "ledger.db")

    jsonl, korg = tmp_path / "ledger.jsonl", tmp_path / "s1.korg.jsonl"
    assert main(["export", "--db", db, "--output", str(jsonl)]) == 0
    assert (
        main(["export", "--db", db, "--format", "korg-ledger-v1", "--session", "s1", "--output", str(korg)])
        == 0
    )
    assert holding([jsonl, korg], PLANTED) == []

    exported = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [e["erased"] for e in exported if e["session_id"] == "s1"] == [mark] * 4
    assert exported[-1]["event_type"] == ERASURE_EVENT
    journal = [json.loads(line) for line in korg.read_text().splitlines()]
    assert [(r["metadata"]["erased"], r["args"], r["result"]) for r in journal] == [(mark, {}, {})] * 4

    capsys.readouterr()
    assert main(["verify", str(jsonl)]) == 0
    assert main(["verify", str(korg), "--format", "korg-ledger-v1"]) == 0
    assert "FAIL" not in capsys.readouterr().out


def test_the_otel_mapping_drops_what_it_holds_of_an_erased_event():
    """The live export holds an attempt's request until its end: an erasure
    in between erases it from what the span is made of."""

    def spans(erasure_scope: dict | None) -> list:
        mapper = SpanMapper(tail_url="https://tail.example/")
        mapper.add_lane(
            Lane(id="lane-main", tenant="t1", session_id="s1", run_id="r1", name="main", created_at="x")
        )
        tool = {"action_type": "tool_call", "name": EMAIL, "tool_use_id": CODE}
        events = [committed(1, "run.started", "r1", {}), committed(2, "attempt.requested", "att-1", tool)]
        if erasure_scope is not None:
            events.append(
                committed(
                    3,
                    ERASURE_EVENT,
                    "ledger-lane",
                    {"scope": erasure_scope, "reason": "r"},
                    session_id=LEDGER_SESSION,
                    run_id=ERASURE_RUN,
                )
            )
        events.append(committed(4, "attempt.completed", "att-1", {}))
        return [span for event in events for span in mapper.feed(event)]

    [whole] = spans(None)
    assert whole.attributes["gen_ai.tool.name"] == EMAIL  # what the request's payload gave
    [erased] = spans({"session_id": "s1"})
    assert EMAIL not in repr(erased) and CODE not in repr(erased)
    assert erased.span_id == whole.span_id  # the same span, without the content
    [other_run] = spans({"session_id": "s1", "run_id": "r2"})
    assert other_run.attributes["gen_ai.tool.name"] == EMAIL
    [unknown] = spans({"data_subject": "someone"})  # a kind not known here: left alone
    assert unknown.attributes["gen_ai.tool.name"] == EMAIL


def test_an_erasure_scope_is_a_session_a_run_a_data_subject_or_a_time():
    run = scope_of({"session_id": "s1", "run_id": "r1"})
    assert run == ErasureScope(session_id="s1", run_id="r1")
    assert run.covers(session_id="s1", run_id="r1") and not run.covers(session_id="s1", run_id="r2")
    assert scope_of({"session_id": "s1"}).covers(session_id="s1", run_id="r2")
    subject = scope_of({"data_subject": "cust-7"})
    assert subject.covers(session_id="s9", run_id="r", data_subject="cust-7")
    assert not subject.covers(session_id="s9", run_id="r", data_subject="cust-8")
    old = scope_of({"committed_before": "2026-01-01T00:00:00.000000Z"})
    assert old.covers(session_id="s1", run_id="r", committed_at="2025-12-31T23:59:59.999999Z")
    assert not old.covers(session_id="s1", run_id="r", committed_at="2026-01-01T00:00:00.000000Z")
    # The tenant's ledger lane (its erasures) is in no scope.
    assert not old.covers(session_id=LEDGER_SESSION, run_id=ERASURE_RUN, committed_at="2025-01-01T00:00:00Z")
    for unknown in (
        {"customer_segment": "x"},
        {"session_id": "s1", "committed_before": "2026-01-01T00:00:00Z"},
        {"data_subject": "x", "run_id": "r1"},
        None,
        "s1",
        {"session_id": 7},
        {"session_id": LEDGER_SESSION},
        {"session_id": "s1", "run_id": 3},
        {"data_subject": ""},
    ):
        assert scope_of(unknown) is None, unknown
