"""The tail's Korg index (services/tail/korg_index.py), in-process on a real
SQLite read model: what it records per event, that every §8 read is an
index search (never a scan of the journal), and that a read model from
before the index is folded when it is opened."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from laneledger.compat.korg_view import record, skeleton
from laneledger.services.tail.projections import korg_index
from laneledger.services.tail.readmodel import ReadModel

KORG = "ext.korg.agent_tool_call"


def body(position: int, tenant: str, session: str, event_type: str, **fields) -> bytes:
    event = {
        "id": f"e{position}",
        "tenant": tenant,
        "session_id": session,
        "run_id": "r1",
        "lane_id": f"lane-{session}",
        "seq": position,
        "actor_id": "actor-1",
        "subject_id": "s",
        "event_type": event_type,
        "payload": {},
        "position": position,
        "committed_at": f"2026-12-05T00:00:{position:02d}.000000Z",
        "entry_hash": "ab" * 32,
        "prev_hash": "00" * 32,
        **fields,
    }
    return json.dumps(event).encode()


def korg_call(position: int, tool: str, agent: str, cause: int | None) -> bytes:
    payload = {
        "source_agent": agent,
        "tool_name": tool,
        "args": {},
        "result": {},
        "success": True,
        "duration_ms": 5,
        "triggered_by": cause,
        "payload_refs": [],
    }
    extra = {"causation_id": f"e{cause}"} if cause else {}
    return body(position, "korg", "korg", KORG, payload=payload, **extra)


@pytest.fixture
def model(tmp_path: Path):
    model = ReadModel(tmp_path / "tail.db")
    model.apply(
        [
            (1, korg_call(1, "user_prompt", "human:dusk", None)),
            (2, body(2, "acme", "native", "session.started")),  # another tenant's native session
            (3, korg_call(3, "llm_inference", "agent:a/main@1", 1)),
            (4, body(4, "acme", "native", "stream.text_delta", payload={"text": "hi"})),
            (5, korg_call(5, "Read", "agent:a/sub-1234abcd@1", 3)),
            (6, body(6, "acme", "native", "tool.failed", causation_id="e4", payload={"duration_ms": 7})),
        ]
    )
    yield model
    model.close()


def test_each_event_is_indexed_with_its_korg_facts(model):
    rows = model.query(
        "SELECT position, tenant, root, source_agent, triggered_by FROM korg_index ORDER BY position"
    )
    assert rows == [
        (1, "korg", 1, "human:dusk", None),
        (2, "acme", 2, "actor-1", None),  # a native session's first event is its root
        (3, "korg", 1, "agent:a/main@1", 1),
        (4, "acme", 2, "actor-1", 2),  # no cause: hangs off the root (Korg §4)
        (5, "korg", 1, "agent:a/sub-1234abcd@1", 3),
        (6, "acme", 2, "actor-1", 4),  # its causation_id
    ]
    entry = korg_index.event(model, "acme", 6)
    assert entry is not None
    _, raw, agent, cause, root = entry
    full = record(json.loads(raw), agent, cause, root)
    assert (full["tool_name"], full["success"], full["duration_ms"]) == ("tool.failed", False, 7)
    assert skeleton(full) == {
        "seq_id": 6,
        "source_agent": "actor-1",
        "tool_name": "tool.failed",
        "triggered_by": 4,
        "success": False,
        "duration_ms": 7,
        "has_payload_refs": False,
    }
    assert korg_index.event(model, "korg", 6) is None  # another tenant's position is not in this ledger


def test_reads_page_by_index(model):
    entries, more = korg_index.recent(model, "korg", None, 2, None)
    assert [e[0] for e in entries] == [5, 3] and more
    assert [e[0] for e in korg_index.recent(model, "korg", 3, 10, None)[0]] == [1]
    assert [e[0] for e in korg_index.recent(model, "korg", None, 10, "agent:a/main@1")[0]] == [3]
    assert [e[0] for e in korg_index.recent(model, "korg", None, 10, None, 3)[0]] == [5]
    assert korg_index.heads(model, "korg", None, 10) == [1]
    assert [e[0] for e in korg_index.session(model, "korg", 1, 1, 10, None)[0]] == [3, 5]
    assert korg_index.session_facts(model, "acme", 2, 256) == (3, 6, ["actor-1"])
    assert korg_index.ledgers(model, 10) == ["acme", "korg"]


def test_every_read_is_an_index_search_never_a_scan(model):
    """EXPLAIN QUERY PLAN of each read: SEARCH by an index (or the primary
    key), never SCAN — the first event of a huge ledger is one seek."""
    conn = model.connection()
    captured: list[tuple[str, list]] = []
    real_scan, real_query = model.scan, model.query

    def scan(sql, params, **kwargs):
        captured.append((sql, list(params)))
        return real_scan(sql, params, **kwargs)

    def query(sql, params=()):
        captured.append((sql, list(params)))
        return real_query(sql, params)

    model.scan, model.query = scan, query
    korg_index.recent(model, "korg", 4, 2, None)
    korg_index.recent(model, "korg", None, 2, "agent:a/main@1")
    korg_index.recent(model, "korg", None, 2, None, 3)
    korg_index.heads(model, "korg", 4, 2)
    korg_index.session(model, "korg", 1, 0, 2, "agent:a/main@1")
    korg_index.event(model, "korg", 3)
    korg_index.session_facts(model, "korg", 1, 10)
    korg_index.has_ledger(model, "korg")
    korg_index.ledgers(model, 5)
    assert len(captured) >= 10
    for sql, params in captured:
        plan = " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
        assert "SCAN" not in plan.replace("SCAN CONSTANT ROW", ""), (sql, plan)


def test_a_read_model_from_before_the_index_is_folded_on_open(tmp_path: Path, model):
    path = model.path
    model.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE korg_index")
    conn.execute("DELETE FROM meta WHERE key = 'korg_index_position'")
    conn.commit()
    conn.close()
    again = ReadModel(path)
    try:
        assert again.query("SELECT count(*) FROM korg_index") == [(6,)]
        assert korg_index.heads(again, "korg", None, 10) == [1]
    finally:
        again.close()
