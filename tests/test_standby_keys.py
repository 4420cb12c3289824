"""A standby must hash chains with the active sequencer's HMAC key
(spec/replication.md, "Same keys"): every transaction log message carries
the fingerprint of its writer's chain key (``store/chainkey.py``). Real
sequencer processes on one nats-server: one with another key (or with none)
does not start on a log written with the first key, and one that started as
a standby while the log was empty ends, naming the setting, as soon as it
reads a record of the other key, without ever becoming active. One with the
same key follows as usual."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from polling import eventually
from sequencer_process import SequencerProcess, SequencerProcessError
from test_standby import Producer, role, sequencer
from test_txlog import dump

from laneledger.audit.stream import compare_with_stream
from laneledger.sdk.client import LedgerClient
from laneledger.store.chainkey import chain_key_fingerprint


def key_file(path: Path) -> tuple[str, bytes]:
    key = os.urandom(32).hex().encode()
    path.write_bytes(key + b"\n")
    return str(path), key


def refused_for_its_key(seq: SequencerProcess, *keys: bytes) -> str:
    """Its output names the differing setting and both fingerprints, never a key."""
    text = seq.log_text()
    assert "chain_key_differs" in text and "--hmac-key-file" in text, seq.log_tail()
    for key in keys:
        assert key.decode() not in text, "a key in the log"
    return text


async def test_a_sequencer_with_another_hmac_key_neither_takes_over_nor_starts(
    nats_server, js, tmp_path: Path, request: pytest.FixtureRequest
):
    key_a, a = key_file(tmp_path / "a.key")
    key_b, b = key_file(tmp_path / "b.key")
    keyed = sequencer(nats_server.url, tmp_path, "keyed", request, "--hmac-key-file", key_a)
    other = sequencer(nats_server.url, tmp_path, "other", request, "--hmac-key-file", key_b)
    plain = sequencer(nats_server.url, tmp_path, "plain", request)
    same = sequencer(nats_server.url, tmp_path, "same", request, "--hmac-key-file", key_a)
    keyed.start()
    other.start()  # the log is empty: nothing to compare with yet
    assert "role=standby" in other.ready_line
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:keys@1", "agent")
            lane = await client.create_lane("acme", "s", "r", "main", actor_id=actor.id)
            producer = Producer(client, lane, actor.id)
            await producer.run(3)

            # The standby read a record of the other key: it ends, never active.
            await eventually(
                lambda: other.running, until=lambda up: not up, what="the other-key standby ending"
            )
            text = refused_for_its_key(other, a, b)
            assert chain_key_fingerprint(a) in text and chain_key_fingerprint(b) in text
            assert "role=active" not in text and "took the lease over" not in text
            assert dump(other.db_path)["events"] == []  # it applied nothing of the other key's

            # Started again on that log, it does not start; nor does one without a key.
            with pytest.raises(SequencerProcessError, match="chain_key_differs"):
                other.start()
            with pytest.raises(SequencerProcessError, match="no HMAC key"):
                plain.start()
            refused_for_its_key(plain, a)

            # The same key follows, and takes over when the keyed one dies.
            same.start()
            assert "role=standby" in same.ready_line
            keyed.kill()
            await producer.run(3)
            assert await role(same) == "active"
    finally:
        for seq in (keyed, other, plain, same):
            seq.stop()
    assert [p for r in producer.receipts for p in r.positions] == list(range(1, 7))
    producer.check_held_by(same.db_path)
    assert await compare_with_stream(js, same.db_path) == 6
