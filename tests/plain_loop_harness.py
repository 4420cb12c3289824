"""A plain Python agent loop recorded with the attempt guard
(``laneledger.sdk.guard``), for the kill -9 recovery test (not a test module:
pytest does not collect it).

::

    python tests/plain_loop_harness.py --nats URL --session S --run R --key K \\
        --turns 6 --checkpoint-every 2 --out FILE --effects FILE [--hang-turn 4]

It starts the run (``run.started`` carries the guard's guarantees) and its
prompt. Each turn runs two tool calls concurrently, as siblings of one
decision: ``lookup`` (effect ``read``) and ``send_email`` (effect ``write``,
no idempotency key). The guard commits each attempt's ``attempt.requested``
before its tool runs; each tool's side effect is a line in ``--effects``;
then ``attempt.completed`` with the outcome and ``turn.completed``. Every
``--checkpoint-every`` turns it saves its state (inline JSON) anchored at the
last event it applied. After the last turn it ends with the terminal pattern
(``complete_run``).

``--hang-turn T`` makes both tools of turn T hang mid-call, after their side
effects happened and before they return (the email went out; its answer never
came back): once both are in that state it prints a ``hanging`` line and
sleeps, and the test SIGKILLs it.

On every start the harness asks for a recovery plan: it restores the latest
checkpoint's state, replays the lane events after the anchor (completed
outcomes only), then handles the unresolved attempts: a retry-safe one is
superseded by a new attempt (``guard.resume``: the old one closed as failed
with ``outcome_unknown`` naming its successor); an unsafe one is never run
again, only reported, with ``hitl.paused`` asking a human to reconcile it
(``guard.hold``). Then it finishes the interrupted turn and goes on.

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

from laneledger.sdk.checkpoints import CheckpointClient, anchor_of, complete_run
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.guard import Guard, TurnScope

FORMAT = "application/vnd.laneledger.tests.plain-loop+json;version=1"
TOOLS = (("lookup", "read"), ("send_email", "write"))


# -- state: a fold of completed outcomes (the same function live and in replay) -------


def initial_state() -> dict[str, Any]:
    return {"turn": 0, "notes": [], "results": {}}


def apply_event(state: dict[str, Any], event_type: str, payload: dict[str, Any]) -> None:
    if event_type == "attempt.completed" and "key" in payload.get("outcome", {}):
        state["results"][payload["outcome"]["key"]] = payload["outcome"]["result"]
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
        self.guard: Guard | None = None
        self.in_flight = 0  # tools of the hang turn that reached their hang point

    def emit(self, kind: str, **fields: Any) -> None:
        self.out.write(json.dumps({"kind": kind, "pid": os.getpid(), **fields}) + "\n")
        self.out.flush()

    async def tool(self, tool: str, turn_no: int, attempt_id: str) -> str:
        """The tool's side effect in the world: a line in the effects file."""
        # Synchronous on purpose: the effect is in the file before the tool returns.
        with open(self.args.effects, "a", encoding="utf-8") as f:  # noqa: ASYNC230
            f.write(
                json.dumps({"tool": tool, "turn": turn_no, "attempt_id": attempt_id, "pid": os.getpid()})
                + "\n"
            )
        if turn_no == self.args.hang_turn:
            # The effect happened; the answer never comes back. Once both
            # tools are here, tell the test, which kills us.
            self.in_flight += 1
            if self.in_flight == len(TOOLS):
                assert self.guard is not None
                self.emit("hanging", turn=turn_no, head=self.guard.recorder.head)
            await asyncio.sleep(self.args.time_limit)  # the hang: the test kills us first
            raise SystemExit(3)
        return f"{tool}-result-{turn_no}"

    def observe(self, event_type: str, payload: dict[str, Any]) -> None:
        apply_event(self.state, event_type, payload)

    # -- recovery -----------------------------------------------------------------------

    async def recover(self) -> None:
        """Restore and replay; handle unresolved attempts and finish the turn
        a crash interrupted."""
        guard = self.guard
        assert guard is not None
        plan = await self.checkpoints.recovery_plan(self.args.key, lane_id=guard.lane_id)
        if plan.checkpoint is not None:
            self.state = await self.checkpoints.load_state(plan.checkpoint)
            self.revision = plan.checkpoint.revision
            self.emit("restored", revision=self.revision, after_seq=plan.after_seq, state=self.state)
        for event in plan.events:
            self.observe(event.event_type, event.payload)
        if plan.checkpoint is not None or plan.events:
            self.emit("replayed", seqs=[e.seq for e in plan.events], state=self.state)
        if not plan.unresolved_attempts:
            return
        turns = {
            t.id: t.turn_no for t in (await self.client.load_run(self.args.session, self.args.run)).turns
        }
        by_turn: dict[str, list] = {}
        for attempt in plan.unresolved_attempts:
            self.emit(
                "unresolved",
                attempt_id=attempt.attempt_id,
                name=attempt.name,
                turn=turns[attempt.turn_id],
                retry_safe=attempt.retry_safe,
                reason=attempt.reason,
            )
            by_turn.setdefault(attempt.turn_id, []).append(attempt)
        for turn_id, attempts in by_turn.items():
            turn_no = turns[turn_id]
            async with guard.turn(turn_no, turn_id=turn_id) as turn:
                for attempt in attempts:
                    if attempt.retry_safe:
                        async with guard.resume(attempt) as call:
                            await self.attempt(call, attempt.name or "", turn_no)
                    else:
                        # Never run again silently: the world may already have seen it.
                        await guard.hold(attempt)
                self.finish(turn, turn_no)
            await self.turn_done(turn_no)

    # -- turns ----------------------------------------------------------------------------

    async def attempt(self, call, tool: str, turn_no: int) -> None:
        async with call.attempt() as attempt:  # attempt.requested is committed here
            result = await self.tool(tool, turn_no, attempt.attempt_id)
            outcome = {"key": f"{turn_no}:{tool}", "result": result}
            attempt.complete(**outcome)
        self.observe("attempt.completed", {"outcome": outcome})

    async def call_tool(self, turn: TurnScope, tool: str, effect: str, turn_no: int) -> None:
        async with turn.tool_call(tool, effect=effect, idempotency="none") as call:
            await self.attempt(call, tool, turn_no)

    def finish(self, turn: TurnScope, turn_no: int) -> None:
        turn.complete(note=f"turn {turn_no} done")
        self.observe("turn.completed", {"turn_no": turn_no, "note": f"turn {turn_no} done"})

    async def turn(self, turn_no: int) -> None:
        assert self.guard is not None
        async with self.guard.turn(turn_no) as turn:
            # Parallel tool calls of one decision: siblings on the spine.
            await asyncio.gather(*(self.call_tool(turn, tool, effect, turn_no) for tool, effect in TOOLS))
            self.finish(turn, turn_no)
        await self.turn_done(turn_no)

    async def turn_done(self, turn_no: int) -> None:
        assert self.guard is not None
        recorder = self.guard.recorder
        self.emit("turn_done", turn=turn_no, state=self.state, head=recorder.head)
        if turn_no % self.args.checkpoint_every == 0:
            assert self.guard.last_receipt is not None  # the turn.completed just committed
            saved = await self.checkpoints.save(
                self.args.key,
                expected_revision=self.revision,
                format=FORMAT,
                state=self.state,
                anchor=anchor_of(self.guard.last_receipt),
                session_id=self.args.session,
                run_id=self.args.run,
            )
            self.revision = saved.revision
            self.emit("checkpoint", revision=saved.revision, anchor_seq=saved.anchor.seq, state=self.state)

    async def run(self) -> None:
        a = self.args
        actor = await self.client.ensure_actor(a.tenant, "agent:tests/plain-loop@1", "agent")
        self.guard = await Guard.open(self.client, a.tenant, a.session, a.run, a.lane, actor.id)
        recorder = self.guard.recorder
        if recorder.head == 0:
            await self.guard.start_run({"turns": a.turns})
            await self.guard.prompt("look things up and send the emails")
        else:
            await self.recover()
        for turn_no in range(self.state["turn"] + 1, a.turns + 1):
            await self.turn(turn_no)
        done = await complete_run(
            recorder,
            self.checkpoints,
            key=a.key,
            expected_revision=self.revision,
            format=FORMAT,
            actor_id=actor.id,
            state=self.state,
            run_payload={"turns": a.turns},
        )
        self.emit(
            "done",
            revision=done.checkpoint.revision,
            checkpoint_id=done.checkpoint.id,
            state=self.state,
            head=recorder.head,
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="plain_loop_harness", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
        with open(args.out, "a", encoding="utf-8") as out:  # noqa: ASYNC230 - once, before the loop runs
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
