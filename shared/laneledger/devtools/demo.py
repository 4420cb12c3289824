"""`laneledger demo`: a simulated multi-agent harness writing a realistic ledger.

Each agent runs in its own OS process (``python -m laneledger.devtools.demo agent …``)
as a harness would, and records itself the recommended way: through the
attempt guard (``laneledger.sdk.guard``, spec/adapters.md), so every external
call's request is committed before the call runs. A main agent works through
turns on its lane — a model call (tokens and cost), tool calls (reads that
sometimes fail and are retried on a new attempt, writes that are never
retried silently), a sub-agent spawned by an ``Agent`` tool call on its own
lane, a human-in-the-loop pause and the operator's answer — and finishes its
run with the terminal checkpoint pattern. Causation follows the Korg spine
rules (``laneledger.sdk.spine``, kept by the guard), and actor keys the
identity convention ``laneledger verify`` checks (``actor_key``).

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
from decimal import Decimal
from typing import Any

from laneledger.contract.ids import new_id
from laneledger.sdk.checkpoints import CheckpointClient, complete_run
from laneledger.sdk.client import LedgerClient
from laneledger.sdk.guard import Guard, TurnScope

MODELS = {  # price per million input / output tokens, USD
    "claude-sonnet": (Decimal("3"), Decimal("15")),
    "claude-haiku": (Decimal("0.8"), Decimal("4")),
}
READ_TOOLS = ("Read", "Grep", "Glob")
WRITE_TOOLS = ("Edit", "Write")
READ_TRIES = 3


class ToolTimeout(Exception):
    """The simulated tool did not answer: the attempt fails with this error."""


def actor_key(name: str, role: str = "main") -> str:
    """The actor key of agent process ``name``'s main agent or of one of its
    sub-agents (``role`` ``sub-<id8>``): Korg §2b's
    ``agent:<runtime>/main@<v>`` and ``agent:<runtime>/sub-<id8>@<v>``, each
    agent process its own runtime, so the agents of one session keep apart."""
    return f"agent:demo-{name}/{role}@1"


def cost_of(model: str, input_tokens: int, output_tokens: int) -> str:
    price_in, price_out = MODELS[model]
    amount = (price_in * input_tokens + price_out * output_tokens) / Decimal(1_000_000)
    return str(amount.quantize(Decimal("0.000001")))


async def model_call(
    turn: TurnScope, model: str, prompt_tokens: int, rng: random.Random, pace: float
) -> None:
    """One inference on the spine: tokens and its cost."""
    async with turn.model_call(model, provider="anthropic") as call:
        async with call.attempt() as attempt:
            await asyncio.sleep(pace * rng.uniform(0.5, 1.5))  # the model thinks
            output_tokens = rng.randint(80, 900)
            attempt.inference(
                text=f"(simulated reply, {output_tokens} tokens)",
                input_tokens=prompt_tokens,
                output_tokens=output_tokens,
                cost=cost_of(model, prompt_tokens, output_tokens),
            )


async def tool_call(turn: TurnScope, tool: str, rng: random.Random, *, times_out: bool | None = None) -> bool:
    """A tool call off the latest inference. A read may time out and is
    retried on a new attempt of the same action; a write that fails may have
    had its effect, so it is never retried (its action fails). ``times_out``
    forces the first attempt's fate (default: by chance)."""
    write = tool in WRITE_TOOLS
    path = f"src/module_{rng.randint(1, 40)}.py"
    async with turn.tool_call(
        tool,
        effect="write" if write else "read",
        idempotency="none" if write else "inherent",
        args={"file_path": path},
    ) as call:
        for _ in range(1 if write else READ_TRIES):
            try:
                async with call.attempt() as attempt:  # committed before the call
                    await asyncio.sleep(rng.uniform(0, 0.002))  # the (simulated) call
                    chance = rng.random() < (0.1 if write else 0.25)
                    if chance if times_out is None else times_out:
                        times_out = None  # a retry's fate is chance again
                        raise ToolTimeout("timeout")
                    attempt.complete(file_path=path, bytes=rng.randint(100, 9000))
                return True
            except ToolTimeout:
                continue  # recorded as attempt.failed by the guard
    return False


async def run_agent(
    nats_url: str,
    tenant: str,
    session_id: str,
    run_id: str,
    name: str,
    turns: int,
    seed: int,
    pace: float = 0.0,
) -> None:
    rng = random.Random(seed)
    async with await LedgerClient.connect(nats_url) as client:
        actor = await client.ensure_actor(tenant, actor_key(name), "agent")
        operator = await client.ensure_actor(tenant, "human:demo-operator", "human")
        guard = await Guard.open(client, tenant, session_id, run_id, name, actor.id)
        await guard.start_run({"agent": name})
        await guard.prompt(f"work through {turns} turns of the demo task", agent=name)
        for turn_no in range(1, turns + 1):
            async with guard.turn() as turn:
                await model_call(turn, "claude-sonnet", rng.randint(1500, 12000), rng, pace)
                for tool in rng.sample(READ_TOOLS + WRITE_TOOLS, k=rng.randint(1, 3)):
                    await tool_call(turn, tool, rng)
                if turn_no == 1:  # so every run shows both: a retried read, a write not retried
                    await tool_call(turn, "Read", rng, times_out=True)
                    await tool_call(turn, "Write", rng, times_out=True)
                if turn_no == 2:
                    await spawn_subagent(guard, turn, tenant, name, rng, pace)
                if turn_no == 3:
                    await ask_a_human(guard, turn, operator.id, rng)
            print(json.dumps({"agent": name, "turn": turn_no, "head": guard.recorder.head}), flush=True)
        # The terminal pattern: the run's final checkpoint, then the link and
        # run.completed in one atomic append.
        await complete_run(
            guard.recorder,
            CheckpointClient(client),
            key=f"{session_id}/{run_id}/{name}",
            expected_revision=0,
            format="application/vnd.laneledger.demo-agent+json;version=1",
            actor_id=actor.id,
            state={"agent": name, "turns": turns, "head": guard.recorder.head},
            run_payload={"turns": turns},
        )


async def spawn_subagent(
    parent: Guard, turn: TurnScope, tenant: str, name: str, rng: random.Random, pace: float
) -> None:
    """An ``Agent`` tool call that runs a sub-agent on its own lane and actor;
    the sub-agent's prompt points at the parent's latest inference and names
    the spawning attempt (Korg §2b). The sub-agent is named by the spawning
    call, as Claude Code's are by their parent tool-use id: the last 8 hex
    digits (the random part) of the attempt's id."""
    task = "read the module the last edit touched"
    async with turn.tool_call(
        "Agent", effect="none", idempotency="not_applicable", args={"description": task}
    ) as call:
        async with call.attempt() as attempt:
            role = "sub-" + attempt.attempt_id.replace("-", "")[-8:]
            actor = await parent.client.ensure_actor(tenant, actor_key(name, role), "agent")
            sub = await parent.spawn(f"{name}/{role}", actor.id, task, spawned_by=attempt)
            async with sub.turn() as sub_turn:
                await model_call(sub_turn, "claude-haiku", rng.randint(800, 4000), rng, pace)
                await tool_call(sub_turn, rng.choice(READ_TOOLS), rng)
            attempt.complete(lane_id=sub.lane_id, result="done")


async def ask_a_human(guard: Guard, turn: TurnScope, operator_id: str, rng: random.Random) -> None:
    """A human-in-the-loop pause on a risky write, and the operator's answer
    (recorded by the operator's actor on the agent's lane)."""
    pause = new_id()
    paused = guard.event(
        "hitl.paused",
        turn.turn_id,
        {
            "pause_id": pause,
            "trigger": "write outside the workspace",
            "proposed_action": {"tool": "Write", "args": {"file_path": "/etc/hosts"}},
        },
        guard.spine.last_inference_id,
    )
    await guard.commit(paused)
    await asyncio.sleep(rng.uniform(0.05, 0.2))  # a person thinks
    await guard.commit(
        guard.recorder.event(
            "hitl.responded",
            actor_id=operator_id,
            subject_id=turn.turn_id,
            payload={"pause_id": pause, "decision": "rejected", "comment": "not there"},
            causation_id=paused["id"],
        )
    )


async def run_demo(
    nats_url: str,
    tail_url: str,
    metrics_url: str,
    *,
    agents: int = 3,
    turns: int = 4,
    pace: float = 0.3,
    tenant: str = "demo",
) -> int:
    """Run ``agents`` agent processes in one session, show their progress,
    then summarize from the services: events, chain verification, cost."""
    session_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{new_id()[-6:]}"
    print(
        f"demo: {agents} agents in session {session_id} (tail it: "
        f"{tail_url}/api/v1/events?session_id={session_id})",
        flush=True,
    )
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "laneledger.devtools.demo",
            "agent",
            "--nats",
            nats_url,
            "--tenant",
            tenant,
            "--session",
            session_id,
            "--run",
            f"run-{i + 1}",
            "--name",
            f"agent-{i + 1}",
            "--turns",
            str(turns),
            "--seed",
            str(i),
            "--pace",
            str(pace),
            stdout=asyncio.subprocess.PIPE,
        )
        for i in range(agents)
    ]

    async def progress(proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            step = json.loads(line)
            print(
                f"demo: {step['agent']} finished turn {step['turn']}/{turns} (lane head {step['head']})",
                flush=True,
            )

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
        report: dict[str, Any] = {}
        for _ in range(100):
            async with http.get(f"{tail_url}/api/v1/verify") as response:
                report = await response.json()
            async with http.get(f"{metrics_url}/metrics") as response:
                text = await response.text()
            folded = _sample(text, "laneledger_metrics_folded_position")
            if (
                report.get("last_position") == report.get("applied_position")
                and folded is not None
                and folded >= report.get("applied_position", 0)
            ):
                break
            await asyncio.sleep(0.2)
        else:
            print(
                "demo: the tail or the metrics service had not caught up with the ledger "
                "after 20 s: the summary below may be partial",
                file=sys.stderr,
                flush=True,
            )
        async with http.get(f"{tail_url}/api/v1/verify", params={"session_id": session_id}) as response:
            session = await response.json()
        async with http.get(f"{tail_url}/api/v1/sessions/{session_id}", params={"limit": "1"}) as response:
            structure = await response.json()
        async with http.get(f"{tail_url}/api/v1/sessions/{session_id}/activity") as response:
            activity = await response.json()
    costs = {
        labels: value
        for labels, value in _samples(text, "laneledger_cost_total")
        if f'tenant="{tenant}"' in labels
    }
    print("\ndemo summary", flush=True)
    print(
        f"  events in the session        {session.get('events')} in {session.get('lanes')} lanes", flush=True
    )
    print(f"  events in the ledger         {report.get('events')}", flush=True)
    verdict = "intact" if report.get("intact") else f"BROKEN: {report.get('fault')}"
    print(f"  chain verification           {verdict}", flush=True)
    work = attempt_summary(structure, activity)
    print(
        f"  attempts                     {work['attempts']} ({work['failed']} failed, "
        f"{work['unresolved']} unresolved)",
        flush=True,
    )
    print(f"  reads retried                {work['reads_retried']}", flush=True)
    print(f"  writes failed, not retried   {work['writes_not_retried']}", flush=True)
    print(
        f"  human-in-the-loop pauses     {work['pauses_answered']} answered, "
        f"{work['pauses'] - work['pauses_answered']} pending",
        flush=True,
    )
    for labels, value in sorted(costs.items()):
        model = labels.split('model="', 1)[1].split('"', 1)[0] if 'model="' in labels else "?"
        print(f"  {'cost, ' + model:<29}{value:.6f} USD (tenant {tenant}, every demo so far)", flush=True)
    return 0 if report.get("intact") and session.get("intact") else 1


def attempt_summary(structure: dict[str, Any], activity: dict[str, Any]) -> dict[str, int]:
    """What the session's attempts show, from the tail: the structure
    (which action, what effect) joined with the activity (how each went)."""
    outcome = {a["id"]: a["outcome"] for a in activity.get("attempts", [])}
    effect = {a["id"]: a["effect"] for a in structure.get("actions", [])}
    tries: dict[str, list[str | None]] = {}
    for attempt in structure.get("attempts", []):
        tries.setdefault(attempt["action_id"], []).append(outcome.get(attempt["id"]))
    pauses = activity.get("pauses", [])
    return {
        "attempts": sum(len(t) for t in tries.values()),
        "failed": sum(t.count("failed") for t in tries.values()),
        "unresolved": sum(t.count(None) for t in tries.values()),
        "reads_retried": sum(1 for a, t in tries.items() if effect.get(a) == "read" and len(t) > 1),
        "writes_not_retried": sum(
            1 for a, t in tries.items() if effect.get(a) == "write" and t == ["failed"]
        ),
        "pauses": len(pauses),
        "pauses_answered": sum(1 for p in pauses if p.get("responded_position") is not None),
    }


def _samples(text: str, name: str) -> list[tuple[str, float]]:
    found = []
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            head, _, value = line.rpartition(" ")
            found.append((head[len(name) :], float(value)))
    return found


def _sample(text: str, name: str) -> float | None:
    values = _samples(text, name)
    return values[0][1] if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laneledger.devtools.demo")
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
    asyncio.run(
        run_agent(args.nats, args.tenant, args.session, args.run, args.name, args.turns, args.seed, args.pace)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
