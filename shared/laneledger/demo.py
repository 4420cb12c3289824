"""`laneledger demo`: a simulated multi-agent harness writing a realistic ledger.

Each agent runs in its own OS process (``python -m laneledger.demo agent …``)
as a harness would: a main agent works through turns on its lane — a model
call (tokens and cost), tool calls (reads that sometimes fail and are retried
on a new attempt, writes that are never retried silently), a sub-agent
spawned on its own lane, a human-in-the-loop pause and the operator's answer
— and finishes its run. Causation follows the Korg spine rules: each model
call is caused by the previous one, tool calls hang off the model call that
asked for them, and a sub-agent's first event points at the spawning call.

The agents print one JSON progress line per turn on stdout; the parent
process shows them and ends with a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass
from decimal import Decimal

from .checkpoints import CheckpointClient, complete_run
from .client import LaneRecorder, LedgerClient
from .ids import new_id

MODELS = {  # price per million input / output tokens, USD
    "claude-sonnet": (Decimal("3"), Decimal("15")),
    "claude-haiku": (Decimal("0.8"), Decimal("4")),
}
READ_TOOLS = ("Read", "Grep", "Glob")
WRITE_TOOLS = ("Edit", "Write")


def cost_of(model: str, input_tokens: int, output_tokens: int) -> str:
    price_in, price_out = MODELS[model]
    amount = (price_in * input_tokens + price_out * output_tokens) / Decimal(1_000_000)
    return str(amount.quantize(Decimal("0.000001")))


@dataclass
class Agent:
    """One agent's lane, with the ids it needs to chain its events."""

    client: LedgerClient
    recorder: LaneRecorder
    actor_id: str
    model: str
    rng: random.Random
    last_inference: str | None = None  # the spine: the previous model call's event
    pace: float = 0.0  # seconds a model call takes

    def event(self, event_type: str, subject_id: str, payload: dict | None = None,
              cause: str | None = None) -> dict:
        return self.recorder.event(event_type, actor_id=self.actor_id, subject_id=subject_id,
                                   payload=payload or {}, causation_id=cause)

    async def commit(self, *events: dict) -> None:
        await self.recorder.append(list(events))

    async def attempt(self, action_id: str, attempt_no: int):
        return await self.client.create_attempt(self.recorder.lane.id, action_id, attempt_no)

    async def model_call(self, turn_id: str, prompt_tokens: int) -> str:
        """A model call on the spine; returns the event later events hang off."""
        await asyncio.sleep(self.pace * self.rng.uniform(0.5, 1.5))  # the model thinks
        action = await self.client.create_action(
            self.recorder.lane.id, turn_id, "model_call", self.model,
            effect="none", idempotency="not_applicable")
        attempt = await self.attempt(action.id, 1)
        requested = self.event("attempt.requested", attempt.id, {"model": self.model},
                               cause=self.last_inference)
        await self.commit(self.event("action.started", action.id, cause=self.last_inference), requested)
        output_tokens = self.rng.randint(80, 900)
        completed = self.event("attempt.completed", attempt.id, {
            "model": self.model, "input_tokens": prompt_tokens, "output_tokens": output_tokens,
            "duration_ms": self.rng.randint(300, 4000)}, cause=requested["id"])
        await self.commit(
            completed,
            self.event("cost.recorded", attempt.id, {
                "provider": "anthropic", "model": self.model, "currency": "USD",
                "amount": cost_of(self.model, prompt_tokens, output_tokens),
                "input_tokens": prompt_tokens, "output_tokens": output_tokens,
                "action_id": action.id, "attempt_id": attempt.id}, cause=completed["id"]),
            self.event("action.completed", action.id, cause=completed["id"]),
        )
        self.last_inference = completed["id"]
        return completed["id"]

    async def tool_call(self, turn_id: str, inference: str, tool: str) -> bool:
        """A tool call caused by ``inference``. Reads may fail and are retried
        on a new attempt; a failed write is reported, never retried."""
        write = tool in WRITE_TOOLS
        action = await self.client.create_action(
            self.recorder.lane.id, turn_id, "tool_call", tool,
            effect="write" if write else "read", idempotency="none" if write else "inherent")
        path = f"src/module_{self.rng.randint(1, 40)}.py"
        await self.commit(self.event("action.started", action.id, {"args": {"file_path": path}}, cause=inference))
        for attempt_no in (1, 2, 3):
            attempt = await self.attempt(action.id, attempt_no)
            requested = self.event("attempt.requested", attempt.id, {"tool": tool}, cause=inference)
            await self.commit(requested)  # committed before the (simulated) call
            failed = self.rng.random() < (0.1 if write else 0.25)
            outcome = "attempt.failed" if failed else "attempt.completed"
            await self.commit(self.event(outcome, attempt.id, {
                "tool": tool, "duration_ms": self.rng.randint(2, 300),
                **({"error": "timeout"} if failed else {})}, cause=requested["id"]))
            if not failed:
                await self.commit(self.event("action.completed", action.id, cause=inference))
                return True
            if write:
                break  # a side effect may have happened: the harness must reconcile
        await self.commit(self.event("action.failed", action.id, {"tool": tool}, cause=inference))
        return False


async def run_agent(nats_url: str, tenant: str, session_id: str, run_id: str, name: str,
                    turns: int, seed: int, pace: float = 0.0) -> None:
    rng = random.Random(seed)
    async with await LedgerClient.connect(nats_url) as client:
        actor = await client.ensure_actor(tenant, f"agent:demo/{name}@1", "agent")
        operator = await client.ensure_actor(tenant, "human:demo-operator", "human")
        main = Agent(client, await LaneRecorder.open(client, tenant, session_id, run_id, name,
                                                     actor_id=actor.id),
                     actor.id, "claude-sonnet", rng, pace=pace)
        lane_id = main.recorder.lane.id
        await main.commit(main.event("run.started", run_id, {"agent": name}))
        for turn_no in range(1, turns + 1):
            turn = await client.create_turn(lane_id, turn_no)
            await main.commit(main.event("turn.started", turn.id))
            inference = await main.model_call(turn.id, rng.randint(1500, 12000))
            for tool in rng.sample(READ_TOOLS + WRITE_TOOLS, k=rng.randint(1, 3)):
                await main.tool_call(turn.id, inference, tool)
            if turn_no == 2:
                await spawn_subagent(main, turn.id, tenant, session_id, run_id, name, rng)
            if turn_no == 3:
                pause = new_id()
                paused = main.event("hitl.paused", turn.id, {
                    "pause_id": pause, "trigger": "write outside the workspace",
                    "proposed_action": {"tool": "Write", "args": {"file_path": "/etc/hosts"}}},
                    cause=inference)
                await main.commit(paused)
                await asyncio.sleep(rng.uniform(0.05, 0.2))  # a person thinks
                await main.recorder.append([main.recorder.event(
                    "hitl.responded", actor_id=operator.id, subject_id=turn.id,
                    payload={"pause_id": pause, "decision": "rejected", "comment": "not there"},
                    causation_id=paused["id"])])
            await main.commit(main.event("turn.completed", turn.id, cause=inference))
            print(json.dumps({"agent": name, "turn": turn_no, "head": main.recorder.head}), flush=True)
        # The terminal pattern: the run's final checkpoint, then the link and
        # run.completed in one atomic append.
        await complete_run(
            main.recorder, CheckpointClient(client), key=f"{session_id}/{run_id}/{name}",
            expected_revision=0, format="application/vnd.laneledger.demo-agent+json;version=1",
            actor_id=actor.id, state={"agent": name, "turns": turns, "head": main.recorder.head},
            run_payload={"turns": turns},
        )


async def spawn_subagent(parent: Agent, turn_id: str, tenant: str, session_id: str, run_id: str,
                         name: str, rng: random.Random) -> None:
    """A sub-agent on its own lane; its first event is caused by the parent's
    spawning model call (Korg §2b)."""
    client = parent.client
    sub_name = f"{name}/sub-{rng.randint(1000, 9999)}"
    actor = await client.ensure_actor(tenant, f"agent:demo/{sub_name}@1", "agent")
    lane = await LaneRecorder.open(client, tenant, session_id, run_id, sub_name, actor_id=actor.id,
                                   kind="subagent", parent_lane_id=parent.recorder.lane.id)
    sub = Agent(client, lane, actor.id, "claude-haiku", rng, last_inference=parent.last_inference,
                pace=parent.pace)
    await sub.commit(sub.event("lane.created", lane.lane.id, {"parent_lane_id": parent.recorder.lane.id},
                               cause=parent.last_inference))
    turn = await client.create_turn(lane.lane.id, 1)
    await sub.commit(sub.event("turn.started", turn.id))
    inference = await sub.model_call(turn.id, rng.randint(800, 4000))
    await sub.tool_call(turn.id, inference, rng.choice(READ_TOOLS))
    await sub.commit(sub.event("turn.completed", turn.id, cause=inference))


async def run_demo(nats_url: str, tail_url: str, metrics_url: str, *, agents: int = 3,
                   turns: int = 4, pace: float = 0.3, tenant: str = "demo") -> int:
    """Run ``agents`` agent processes in one session, show their progress,
    then summarize from the services: events, chain verification, cost."""
    session_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{new_id()[-6:]}"
    print(f"demo: {agents} agents in session {session_id} (tail it: "
          f"{tail_url}/api/v1/events?session_id={session_id})", flush=True)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "laneledger.demo", "agent", "--nats", nats_url,
            "--tenant", tenant, "--session", session_id, "--run", f"run-{i + 1}",
            "--name", f"agent-{i + 1}", "--turns", str(turns), "--seed", str(i), "--pace", str(pace),
            stdout=asyncio.subprocess.PIPE)
        for i in range(agents)
    ]

    async def progress(proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            step = json.loads(line)
            print(f"demo: {step['agent']} finished turn {step['turn']}/{turns} "
                  f"(lane head {step['head']})", flush=True)

    await asyncio.gather(*(progress(p) for p in procs))
    codes = [await p.wait() for p in procs]
    if any(codes):
        print(f"demo: an agent failed (exit codes {codes})", flush=True)
        return 1
    return await summarize(session_id, tenant, tail_url, metrics_url)


async def summarize(session_id: str, tenant: str, tail_url: str, metrics_url: str) -> int:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        # Both services follow the committed stream: wait until they have it all.
        report: dict = {}
        for _ in range(100):
            async with http.get(f"{tail_url}/api/v1/verify") as response:
                report = await response.json()
            async with http.get(f"{metrics_url}/metrics") as response:
                text = await response.text()
            folded = _sample(text, "laneledger_metrics_folded_position")
            if report.get("last_position") == report.get("applied_position") and \
                    folded is not None and folded >= report.get("applied_position", 0):
                break
            await asyncio.sleep(0.2)
        async with http.get(f"{tail_url}/api/v1/verify", params={"session_id": session_id}) as response:
            session = await response.json()
    costs = {labels: value for labels, value in _samples(text, "laneledger_cost_total")
             if f'tenant="{tenant}"' in labels}
    print("\ndemo summary", flush=True)
    print(f"  events in the session        {session.get('events')} in {session.get('lanes')} lanes", flush=True)
    print(f"  events in the ledger         {report.get('events')}", flush=True)
    verdict = "intact" if report.get("intact") else f"BROKEN: {report.get('fault')}"
    print(f"  chain verification           {verdict}", flush=True)
    for labels, value in sorted(costs.items()):
        model = labels.split('model="', 1)[1].split('"', 1)[0] if 'model="' in labels else "?"
        print(f"  {'cost, ' + model:<29}{value:.6f} USD (tenant {tenant}, every demo so far)", flush=True)
    return 0 if report.get("intact") and session.get("intact") else 1


def _samples(text: str, name: str) -> list[tuple[str, float]]:
    found = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, _, value = line.rpartition(" ")
            found.append((head[len(name):], float(value)))
    return found


def _sample(text: str, name: str) -> float | None:
    values = _samples(text, name)
    return values[0][1] if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laneledger.demo")
    commands = parser.add_subparsers(dest="command", required=True)
    agent = commands.add_parser("agent", help="run one simulated agent (a harness process)")
    agent.add_argument("--nats", required=True)
    agent.add_argument("--tenant", default="demo")
    agent.add_argument("--session", required=True)
    agent.add_argument("--run", required=True)
    agent.add_argument("--name", required=True)
    agent.add_argument("--turns", type=int, default=4)
    agent.add_argument("--seed", type=int, default=0)
    agent.add_argument("--pace", type=float, default=0.0, help="seconds a model call takes")
    args = parser.parse_args(argv)
    asyncio.run(run_agent(args.nats, args.tenant, args.session, args.run, args.name,
                          args.turns, args.seed, args.pace))
    return 0


if __name__ == "__main__":
    sys.exit(main())
