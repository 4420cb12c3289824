"""A plain Python agent loop recorded with the SDK, for the kill -9 recovery
test (not a test module: pytest does not collect it).

::

    python tests/plain_loop_harness.py --nats URL --session S --run R --key K \\
        --turns 6 --checkpoint-every 2 --out FILE --effects FILE [--hang-turn 4]

Each turn: ``turn.started``; two tool actions, ``lookup`` (effect ``read``)
and ``send_email`` (effect ``write``, no idempotency key); both attempts'
``attempt.requested`` committed *before* the tools run; each tool's side
effect is a line in ``--effects``; then ``attempt.completed`` with the
outcome and ``turn.completed``. Every ``--checkpoint-every`` turns it saves
its state (inline JSON) anchored at the last event it applied. After the
last turn it ends with the terminal pattern (``complete_run``).

``--hang-turn T`` makes turn T stop right after its requests are committed,
print a ``hanging`` line and sleep: the test SIGKILLs it there.

On every start the harness asks for a recovery plan: it restores the latest
checkpoint's state, replays the lane events after the anchor (completed
outcomes only), then handles the unresolved attempts: a retry-safe one is
closed (``attempt.failed``) and tried again as a new attempt; an unsafe one
is never run again, only reported, with ``hitl.paused`` asking a human to
reconcile it. Then it finishes the interrupted turn and goes on.

``--out`` gets one JSON line per step (``kind``: ``restored``, ``replayed``,
``unresolved``, ``turn_done``, ``checkpoint``, ``hanging``, ``done``), each
with this process's ``pid``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from laneledger.checkpoints import CheckpointClient, anchor_of, complete_run
from laneledger.client import LaneRecorder, LedgerClient
from laneledger.ids import new_id

FORMAT = "application/vnd.laneledger.tests.plain-loop+json;version=1"
TOOLS = (("lookup", "read"), ("send_email", "write"))


# -- state: a fold of completed outcomes (the same function live and in replay) -------


def initial_state() -> dict[str, Any]:
    return {"turn": 0, "notes": [], "results": {}}


def apply_event(state: dict[str, Any], event_type: str, payload: dict[str, Any]) -> None:
    if event_type == "attempt.completed" and "key" in payload:
        state["results"][payload["key"]] = payload["result"]
    elif event_type == "turn.completed":
        state["turn"] = payload["turn_no"]
        state["notes"].append(payload["note"])


def replay(events) -> dict[str, Any]:
    state = initial_state()
    for event in events:
        apply_event(state, event.event_type, event.payload)
    return state


# -- the loop ------------------------------------------------------------------------------


class Harness:
    def __init__(self, args: argparse.Namespace, client: LedgerClient, out) -> None:
        self.args = args
        self.client = client
        self.checkpoints = CheckpointClient(client)
        self.out = out
        self.state = initial_state()
        self.revision = 0
        self.recorder: LaneRecorder | None = None
        self.actor_id = ""

    def emit(self, kind: str, **fields: Any) -> None:
        self.out.write(json.dumps({"kind": kind, "pid": os.getpid(), **fields}) + "\n")
        self.out.flush()

    def effect(self, tool: str, turn_no: int, attempt_id: str) -> str:
        """The tool's side effect in the world: a line in the effects file."""
        with open(self.args.effects, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "turn": turn_no, "attempt_id": attempt_id,
                                "pid": os.getpid()}) + "\n")
        return f"{tool}-result-{turn_no}"

    async def append(self, events: list[dict[str, Any]]):
        assert self.recorder is not None
        receipt = await self.recorder.append(events)
        for event in events:
            apply_event(self.state, event["event_type"], event["payload"])
        return receipt

    def event(self, event_type: str, subject_id: str, **payload: Any) -> dict[str, Any]:
        assert self.recorder is not None
        return self.recorder.event(event_type, actor_id=self.actor_id, subject_id=subject_id,
                                   payload=payload)

    # -- recovery -----------------------------------------------------------------------

    async def recover(self) -> int | None:
        """Restore and replay; handle unresolved attempts. Returns the number of
        a turn the crash interrupted (to be finished), or None."""
        assert self.recorder is not None
        plan = await self.checkpoints.recovery_plan(self.args.key, lane_id=self.recorder.lane.id)
        if plan.checkpoint is not None:
            self.state = await self.checkpoints.load_state(plan.checkpoint)
            self.revision = plan.checkpoint.revision
            self.emit("restored", revision=self.revision, after_seq=plan.after_seq,
                      state=self.state)
        for event in plan.events:
            apply_event(self.state, event.event_type, event.payload)
        if plan.checkpoint is not None or plan.events:
            self.emit("replayed", seqs=[e.seq for e in plan.events], state=self.state)
        interrupted = None
        for attempt in plan.unresolved_attempts:
            requested = (await self.client.load_lane(self.recorder.lane.id, attempt.requested_seq - 1,
                                                     limit=1)).events[0]
            turn_no = requested.payload["turn_no"]
            interrupted = turn_no if interrupted is None else min(interrupted, turn_no)
            self.emit("unresolved", attempt_id=attempt.attempt_id, name=attempt.name,
                      turn=turn_no, retry_safe=attempt.retry_safe, reason=attempt.reason)
            if attempt.retry_safe:
                await self.append([self.event("attempt.failed", attempt.attempt_id,
                                              reason="unresolved_after_crash")])
                await self.run_tool(attempt.action_id, attempt.name or "", turn_no,
                                    attempt.attempt_no + 1)
            else:
                # Never run again silently: the world may already have seen it.
                await self.append([self.event(
                    "hitl.paused", self.recorder.lane.id, pause_id=new_id(),
                    trigger="unresolved_attempt",
                    proposed_action={"attempt_id": attempt.attempt_id, "action_id": attempt.action_id,
                                     "name": attempt.name, "reason": attempt.reason},
                )])
        return interrupted

    # -- turns ----------------------------------------------------------------------------

    async def run_tool(self, action_id: str, tool: str, turn_no: int, attempt_no: int) -> None:
        assert self.recorder is not None
        attempt = await self.client.create_attempt(self.recorder.lane.id, action_id, attempt_no)
        await self.append([self.event("attempt.requested", attempt.id, attempt_no=attempt_no,
                                      tool=tool, turn_no=turn_no)])
        result = self.effect(tool, turn_no, attempt.id)
        await self.append([self.event("attempt.completed", attempt.id, key=f"{turn_no}:{tool}",
                                      result=result)])

    async def turn(self, turn_no: int) -> None:
        assert self.recorder is not None
        lane_id = self.recorder.lane.id
        turn = await self.client.create_turn(lane_id, turn_no)
        await self.append([self.event("turn.started", turn.id)])
        attempts = []
        for tool, effect in TOOLS:
            action = await self.client.create_action(lane_id, turn.id, "tool_call", tool, effect=effect,
                                                     idempotency="none")
            attempts.append((tool, await self.client.create_attempt(lane_id, action.id, 1)))
        # Requested events are committed before any external call is made.
        await self.append([self.event("attempt.requested", attempt.id, attempt_no=1, tool=tool,
                                      turn_no=turn_no) for tool, attempt in attempts])
        if turn_no == self.args.hang_turn:
            self.emit("hanging", turn=turn_no, head=self.recorder.head)
            await asyncio.sleep(self.args.time_limit)  # the test kills us here
            raise SystemExit(3)
        for tool, attempt in attempts:
            result = self.effect(tool, turn_no, attempt.id)
            await self.append([self.event("attempt.completed", attempt.id, key=f"{turn_no}:{tool}",
                                          result=result)])
        await self.finish_turn(turn.id, turn_no)

    async def finish_turn(self, turn_id: str, turn_no: int) -> None:
        assert self.recorder is not None
        receipt = await self.append([self.event("turn.completed", turn_id, turn_no=turn_no,
                                                note=f"turn {turn_no} done")])
        self.emit("turn_done", turn=turn_no, state=self.state, head=self.recorder.head)
        if turn_no % self.args.checkpoint_every == 0:
            saved = await self.checkpoints.save(
                self.args.key, expected_revision=self.revision, format=FORMAT, state=self.state,
                anchor=anchor_of(receipt), session_id=self.args.session, run_id=self.args.run,
            )
            self.revision = saved.revision
            self.emit("checkpoint", revision=saved.revision, anchor_seq=saved.anchor.seq, state=self.state)

    async def run(self) -> None:
        a = self.args
        actor = await self.client.ensure_actor(a.tenant, "agent:tests/plain-loop@1", "agent")
        self.actor_id = actor.id
        self.recorder = await LaneRecorder.open(self.client, a.tenant, a.session, a.run, a.lane,
                                                actor_id=actor.id)
        interrupted = await self.recover()
        if interrupted is not None:
            turn = next(t for t in (await self.client.load_run(a.session, a.run)).turns
                        if t.lane_id == self.recorder.lane.id and t.turn_no == interrupted)
            await self.finish_turn(turn.id, interrupted)
        elif self.recorder.head == 0:
            await self.append([self.event("run.started", a.run)])
        for turn_no in range(self.state["turn"] + 1, a.turns + 1):
            await self.turn(turn_no)
        done = await complete_run(self.recorder, self.checkpoints, key=a.key,
                                  expected_revision=self.revision, format=FORMAT, actor_id=self.actor_id,
                                  state=self.state, run_payload={"turns": a.turns})
        self.emit("done", revision=done.checkpoint.revision, checkpoint_id=done.checkpoint.id,
                  state=self.state, head=self.recorder.head)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="plain_loop_harness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nats", required=True)
    p.add_argument("--tenant", default="acme")
    p.add_argument("--session", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--lane", default="main")
    p.add_argument("--key", required=True)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--checkpoint-every", type=int, default=2)
    p.add_argument("--hang-turn", type=int, default=None)
    p.add_argument("--out", required=True)
    p.add_argument("--effects", required=True)
    p.add_argument("--time-limit", type=float, default=60.0)
    return p.parse_args(argv)


async def amain(args: argparse.Namespace) -> int:
    started = time.monotonic()
    client = await LedgerClient.connect(args.nats, timeout=5.0)
    try:
        with open(args.out, "a", encoding="utf-8") as out:
            harness = Harness(args, client, out)
            await asyncio.wait_for(harness.run(), args.time_limit)
        print(f"plain loop done in {time.monotonic() - started:.2f}s", flush=True)
        return 0
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
