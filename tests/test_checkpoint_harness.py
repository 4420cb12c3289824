"""kill -9 recovery of a plain agent loop, end to end, every part a real OS
process: nats-server, the sequencer, the checkpoint service and the harness
(tests/plain_loop_harness.py).

The harness records turns, actions and attempts with the attempt guard
(laneledger.sdk.guard) and snapshots its state every two turns. It is SIGKILLed
in turn 4 mid-tool-call: the requests of its two tool calls committed, both
side effects done, neither answer back. Started again, it restores the latest
checkpoint, replays the events after its anchor, and gets both attempts
reported as unresolved: the read is retried as a new attempt (the old one
closed as failed, outcome unknown, naming its successor), the write is not
re-run — it is held for a human — and the run still ends with the terminal
pattern, which inspection then shows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from checkpoint_support import CheckpointProcess
from failure_logs import show_log_on_failure
from plain_loop_harness import replay
from polling import eventually
from sequencer_process import SequencerProcess

from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.guarantees import AdapterGuarantees
from laneledger.sdk.guard import PLAIN_LOOP_GUARANTEES

HARNESS = Path(__file__).resolve().parent / "plain_loop_harness.py"
SESSION, RUN, KEY = "sess-crash", "run-crash", "plain-loop/sess-crash/run-crash"


class HarnessProcess:
    def __init__(self, nats_url: str, tmp: Path, *extra: str) -> None:
        self.out, self.effects, self.log = tmp / "harness.jsonl", tmp / "effects.jsonl", tmp / "harness.log"
        args = [
            sys.executable,
            str(HARNESS),
            "--nats",
            nats_url,
            "--session",
            SESSION,
            "--run",
            RUN,
            "--key",
            KEY,
            "--turns",
            "6",
            "--checkpoint-every",
            "2",
            "--out",
            str(self.out),
            "--effects",
            str(self.effects),
            "--time-limit",
            "60",
            *extra,
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )

    def lines(self, kind: str | None = None) -> list[dict]:
        if not self.out.exists():
            return []
        found = [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]
        return [line for line in found if line["pid"] == self.proc.pid and kind in (None, line["kind"])]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    async def wait_for(self, kind: str, timeout: float = 60.0) -> dict:
        """Until it has written a ``kind`` line (it must not exit first); returns the first."""

        def found() -> list[dict]:
            running = self.proc.poll() is None
            lines = self.lines(kind)
            assert lines or running, f"harness exited early:\n{self.log.read_text()[-3000:]}"
            return lines

        return (await eventually(found, what=f"a {kind!r} line from the harness", timeout=timeout))[0]

    async def wait_exit(self, timeout: float = 90.0) -> int:
        """Until it exits; returns its exit code (kills it on a timeout)."""
        try:
            return await eventually(
                self.proc.poll,
                until=lambda code: code is not None,
                what="the harness to exit",
                timeout=timeout,
            )
        except AssertionError:
            self.kill()
            raise


@pytest.fixture
def services(nats_server, tmp_path, request):
    seq = SequencerProcess(nats_server.url, tmp_path / "ledger.db", log_dir=tmp_path)
    ckpt = CheckpointProcess(nats_server.url, tmp_path / "checkpoint")
    show_log_on_failure(request, seq)
    show_log_on_failure(request, ckpt)
    try:
        seq.start()
        ckpt.start()
        yield seq, ckpt
    finally:
        ckpt.stop()
        seq.stop()


async def test_a_sigkilled_plain_loop_recovers_without_retrying_the_unsafe_call(
    nats_server, services, tmp_path
):
    first = HarnessProcess(nats_server.url, tmp_path, "--hang-turn", "4")
    try:
        hanging = await first.wait_for("hanging")
    finally:
        first.kill()  # SIGKILL mid-run: requests committed, tools not run
    assert first.proc.returncode == -signal.SIGKILL
    before = {line["turn"]: line["state"] for line in first.lines("turn_done")}
    assert sorted(before) == [1, 2, 3] and hanging["turn"] == 4
    [snapshot] = first.lines("checkpoint")
    assert snapshot["revision"] == 1 and snapshot["state"] == before[2]

    async with await LedgerClient.connect(nats_server.url, timeout=10.0) as client:
        checkpoints = CheckpointClient(client)
        latest = await checkpoints.latest(KEY)
        assert latest.revision == 1 and latest.state == before[2]
        lane_id = latest.anchor.lane_id
        head_at_kill = (await client.get_lane(lane_id)).last_seq
        assert head_at_kill == hanging["head"] > latest.anchor.seq

        second = HarnessProcess(nats_server.url, tmp_path)
        try:
            assert await second.wait_exit() == 0, (tmp_path / "harness.log").read_text()[-3000:]
        finally:
            second.kill()

        # Restored from the latest checkpoint, then the tail replayed: exactly
        # the state the loop had when it died.
        [restored] = second.lines("restored")
        assert restored["revision"] == 1 and restored["after_seq"] == latest.anchor.seq
        assert restored["state"] == before[2]
        [replayed] = second.lines("replayed")
        assert replayed["seqs"] == list(range(latest.anchor.seq + 1, head_at_kill + 1))
        assert replayed["state"] == before[3]

        # Both attempts of turn 4 reported; the read retried, the write held.
        unresolved = {line["name"]: line for line in second.lines("unresolved")}
        assert set(unresolved) == {"lookup", "send_email"}
        assert unresolved["lookup"]["retry_safe"] and unresolved["lookup"]["turn"] == 4
        assert not unresolved["send_email"]["retry_safe"]
        assert unresolved["send_email"]["reason"] == "side_effect_not_idempotent"
        effects = Counter(
            (e["tool"], e["turn"])
            for e in map(json.loads, tmp_path.joinpath("effects.jsonl").read_text().splitlines())
        )
        assert effects[("send_email", 4)] == 1, "the unsafe call was run again"
        assert effects[("lookup", 4)] == 2  # once before the kill, once as attempt 2
        for turn in (1, 2, 3, 5, 6):
            assert effects[("lookup", turn)] == effects[("send_email", turn)] == 1

        # The run ended with the terminal pattern; inspection shows it, and the
        # write attempt still unresolved, for a human to reconcile.
        [done] = second.lines("done")
        inspection = await checkpoints.inspect_run(SESSION, RUN)
        assert [e.event_type for e in inspection.terminal_events] == ["run.completed"]
        [link] = inspection.linked_checkpoints
        assert link.checkpoint_id == done["checkpoint_id"] and link.problem is None
        assert link.checkpoint.terminal and link.checkpoint.revision == done["revision"]
        [still] = inspection.unresolved_attempts
        assert still.attempt_id == unresolved["send_email"]["attempt_id"] and not still.retry_safe
        assert inspection.unlinked_revisions == []

        # The final state is the fold of the whole lane, and what the terminal
        # checkpoint holds.
        events = (await client.load_lane(lane_id, limit=10_000)).events
        assert replay(events) == done["state"] == (await checkpoints.get(done["checkpoint_id"])).state
        assert done["state"]["turn"] == 6 and "4:send_email" not in done["state"]["results"]
        paused = [e for e in events if e.event_type == "hitl.paused"]
        assert [e.payload["proposed_action"]["attempt_id"] for e in paused] == [still.attempt_id]

        # The read's first attempt was closed as failed, outcome unknown,
        # naming its successor, in the same append as the successor's request.
        lookup_id = unresolved["lookup"]["attempt_id"]
        [closed] = [e for e in events if e.subject_id == lookup_id and e.event_type == "attempt.failed"]
        successor = closed.payload["error"]["superseded_by"]
        assert closed.payload["error"]["code"] == "outcome_unknown"
        retry, retry_done = [e for e in events if e.subject_id == successor]
        assert retry.event_type == "attempt.requested" and retry.payload["attempt_no"] == 2
        assert retry.append_id == closed.append_id and retry.causation_id == closed.id
        assert retry_done.event_type == "attempt.completed"
        assert retry_done.payload["outcome"] == {"key": "4:lookup", "result": "lookup-result-4"}
        # The guarantees the harness ran under are on the record.
        [started] = [e for e in events if e.event_type == "run.started"]
        assert AdapterGuarantees.from_payload(started.payload["adapter"]) == PLAIN_LOOP_GUARANTEES
