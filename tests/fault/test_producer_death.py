"""A producer that dies between the durable accept of its append (the
PubAck) and the receipt, then retries: four producer processes SIGKILL
themselves right after an accept (``producer_proc.py --die-after-accepts``),
a new incarnation of each resends every request it had noted but not seen
answered (``--resume``: same append id, same events), and each of those gets
the original commit back — ``replayed``, at the positions the ledger holds —
while the other producers keep appending. Then every invariant holds.

Short form: each producer dies once. Long form: five times."""

from __future__ import annotations

import json
import sqlite3

import pytest
from fault_harness import FaultRig, fault_timeout, scaled
from polling import eventually

DEATHS = scaled(1, 5)


async def wait_until_dead(producers, timeout: float = 60.0) -> None:
    await eventually(
        lambda: [p.name for p in producers if p.returncode is None],
        until=lambda alive: not alive,
        what="every producer to die after its accepts",
        timeout=timeout,
    )
    for p in producers:
        assert p.returncode == -9, f"{p.name} exited with {p.returncode}:\n{p.log_text()[-2000:]}"


def stored_receipt(db, append_id: str) -> dict:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (body,) = conn.execute("SELECT body FROM receipts WHERE append_id = ?", (append_id,)).fetchone()
    finally:
        conn.close()
    return json.loads(body)


@fault_timeout
@pytest.mark.slow
async def test_a_producer_killed_after_accept_gets_the_same_receipt_on_retry(
    nats_server, js, tmp_path, request
):
    async with FaultRig(nats_server.url, tmp_path, request) as rig:
        producers = await rig.start_load(die_after_accepts=0)
        killed: list[str] = []
        for death in range(DEATHS):
            # Each producer dies after a different number of its own accepts,
            # then a new incarnation resumes; the others keep going meanwhile.
            for k, producer in enumerate(producers):
                producer.kill()
                producer.start("--resume", "--die-after-accepts", str(3 + 4 * k + death))
            await wait_until_dead(producers)
            markers = [
                i["killed_after_accept"] for p in producers for i in p.intents() if "killed_after_accept" in i
            ]
            assert len(markers) == len(producers) * (death + 1)
            killed = markers
            for producer in producers:
                producer.start("--resume", "--die-after-accepts", "0")
            await rig.wait_for_outcomes(more=40)
        summary = await rig.finish(js)

    lines = {line["append_id"]: line for p in producers for line in p.lines()}
    for append_id in killed:
        line = lines[append_id]
        # Accepted before the kill, so committed before the resend arrived:
        # the resend is answered with the original receipt.
        assert line["outcome"] == "committed" and line["replayed"], line
        original = stored_receipt(rig.db, append_id)
        assert (line["first_seq"], line["last_seq"], line["positions"], line["receipt_event_ids"]) == (
            original["first_seq"],
            original["last_seq"],
            original["positions"],
            original["event_ids"],
        )
    print(f"producer deaths: {len(killed)} killed after accept, all replayed; {summary}")
