"""A producer as a real OS process, for multi-producer and crash tests (not a
test module: pytest does not collect it).

::

    python tests/producer_proc.py --nats URL --tenant T --actor-id A \\
        --lanes L1,L2,... --requests N --seed S --out FILE \\
        [--hot H1,H2,...] [--hot-share 0.5] [--concurrency 4] \\
        [--receipt-timeout 2] [--duration SECONDS] [--time-limit SECONDS] \\
        [--stop-file PATH] [--name NAME] [--cost-share 0.2] \\
        [--rate R] [--die-after-accepts K] [--resume]

Each request picks a lane (one of ``--hot``, shared with other producers, with
probability ``--hot-share``; otherwise any of ``--lanes``), proposes 1–5
events at the head it believes the lane has, with a fresh append id, and
waits for the receipt. A transport failure (no PubAck, no receipt in time,
sequencer down) resends the SAME append id with the SAME events until a
receipt comes; a ``lane_conflict`` reloads the head with ``get_lane`` and the
producer goes on with its next request.

FILE gets one JSON line per request, written when its outcome is known:
``append_id``, ``lane_id``, ``outcome`` (``committed``, an error code, or
``timeout`` when the time limit cut it off), ``first_seq``, ``last_seq``,
``positions``, plus ``event_ids``, ``expected_last_seq``, ``sends``,
``accepted`` (a PubAck was seen for it), ``replayed`` and ``producer``; a
committed one also ``receipt``, the whole receipt as it came (entry hashes,
digest, committed_at, …), which ``check_against_ledger`` holds the ledger to
(``receipt_check.py``).

``--cost-share`` makes that share of the events ``cost.recorded`` (with a
decimal amount and token counts) instead of ``stream.text_delta``, so
consumers that fold costs have something to fold.

A producer that dies between the durable accept of an append and its
receipt, then retries: every request's intent (append id, lane, expected
head, the events exactly as sent) goes to ``FILE.intents`` before it is
published. ``--die-after-accepts K`` makes the process SIGKILL itself right
after the K-th PubAck of an append to one of its own (not hot) lanes, having
noted that append id in ``FILE.intents`` as ``{"killed_after_accept": id}``.
``--resume`` (same ``--out``) first resends every intent with no outcome line
in FILE — same append id, same events — and records its outcome, then goes on
as usual.

``--rate R`` starts at most R requests a second (0, the default: as fast as
the ``--concurrency`` slots free up). The fault suite's short form paces its
producers so its load is the same amount of work however busy the machine
is; the long form runs them flat out.

Bounded: no new request starts after ``--requests`` requests, ``--duration``
seconds or once ``--stop-file`` exists; requests still waiting give up at
``--time-limit`` seconds (outcome ``timeout``). A summary goes to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
from polling import eventually
from receipt_check import check_receipts_held

from laneledger.contract.errors import LaneConflict, LedgerError, TransportError
from laneledger.contract.ids import new_id
from laneledger.contract.model import Lane
from laneledger.sdk.client import LedgerClient, make_event

MAX_SENDS = 1000  # per request; the time limit normally ends a hopeless one first


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="producer_proc", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nats", required=True)
    p.add_argument("--tenant", required=True)
    p.add_argument("--actor-id", required=True)
    p.add_argument("--lanes", required=True, help="comma-separated lane ids")
    p.add_argument("--hot", default="", help="comma-separated lane ids shared by all producers")
    p.add_argument("--hot-share", type=float, default=0.5)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--name", default=None)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--receipt-timeout", type=float, default=2.0)
    p.add_argument("--duration", type=float, default=60.0, help="start no request after this")
    p.add_argument("--time-limit", type=float, default=90.0, help="give up waiting after this")
    p.add_argument("--stop-file", default=None)
    p.add_argument("--cost-share", type=float, default=0.0)
    p.add_argument("--rate", type=float, default=0.0, help="requests started per second (0: unpaced)")
    p.add_argument("--die-after-accepts", type=int, default=0)
    p.add_argument("--resume", action="store_true")
    return p.parse_args(argv)


class Producer:
    def __init__(self, args: argparse.Namespace, client: LedgerClient, out, intents) -> None:
        self.args = args
        self.client = client
        self.out = out
        self.intents = intents
        self.own_accepts = 0
        self.busy: dict[str, int] = {}  # lane id -> this producer's requests in flight on it
        self.resuming = False
        self.name = args.name or f"producer-{os.getpid()}"
        self.rng = random.Random(args.seed)
        self.lane_ids = [x for x in args.lanes.split(",") if x]
        self.hot_ids = [x for x in args.hot.split(",") if x]
        self.lanes: dict[str, Lane] = {}
        self.heads: dict[str, int] = {}
        self.started = time.monotonic()
        self.soft_deadline = self.started + args.duration
        self.hard_deadline = self.started + args.time_limit
        self.counter = itertools.count()
        self.outcomes: dict[str, int] = {}
        self.sends = 0
        self.next_start = self.started  # --rate's schedule, shared by the slots

    # -- bounds ------------------------------------------------------------------

    def may_start(self) -> bool:
        if time.monotonic() > self.soft_deadline:
            return False
        return not (self.args.stop_file and os.path.exists(self.args.stop_file))

    def out_of_time(self) -> bool:
        return time.monotonic() > self.hard_deadline

    # -- lanes ------------------------------------------------------------------------

    async def load_lane(self, lane_id: str) -> Lane | None:
        """get_lane, retried while the sequencer is away; None when out of time."""
        for attempt in range(MAX_SENDS):
            if self.out_of_time():
                return None
            try:
                lane = await self.client.get_lane(lane_id)
            except TransportError:
                await asyncio.sleep(min(0.05 * 2**attempt, 0.5))  # a producer's backoff
                continue
            self.lanes[lane_id] = lane
            self.heads[lane_id] = max(self.heads.get(lane_id, 0), lane.last_seq)
            return lane
        return None

    def pick(self) -> Lane:
        if self.hot_ids and self.rng.random() < self.args.hot_share:
            return self.lanes[self.rng.choice(self.hot_ids)]
        return self.lanes[self.rng.choice(self.lane_ids)]

    # -- requests -----------------------------------------------------------------------

    def new_events(self, lane_id: str, index: int) -> list[dict]:
        events = []
        for k in range(self.rng.randint(1, 5)):
            if self.rng.random() < self.args.cost_share:
                events.append(
                    make_event(
                        lane_id,
                        "cost.recorded",
                        actor_id=self.args.actor_id,
                        payload={
                            "provider": "anthropic",
                            "model": self.rng.choice(["claude-a", "claude-b"]),
                            "currency": "USD",
                            "amount": f"0.{self.rng.randint(1, 99999):05d}",
                            "input_tokens": self.rng.randint(1, 5000),
                            "output_tokens": self.rng.randint(1, 2000),
                        },
                    )
                )
            else:
                events.append(
                    make_event(
                        lane_id,
                        "stream.text_delta",
                        actor_id=self.args.actor_id,
                        payload={"text": f"{self.name} request {index} event {k}"},
                    )
                )
        return events

    async def resume(self) -> None:
        """Resend, unchanged, every request whose intent was noted but whose
        outcome was not (the previous incarnation died waiting for it)."""
        done = {json.loads(x)["append_id"] for x in _read_lines(self.args.out)}
        pending = [
            i
            for i in map(json.loads, _read_lines(self.intents.name))
            if "append_id" in i and i["append_id"] not in done
        ]
        self.resuming = True
        await asyncio.gather(
            *(self.request(i["request"], self.lanes[i["lane_id"]], intent=i) for i in pending)
        )
        self.resuming = False

    async def worker(self) -> None:
        for _ in range(self.args.requests):
            if not self.may_start():
                return
            await self.pace()
            index = next(self.counter)
            if index >= self.args.requests:
                return
            await self.request(index, self.pick())

    async def pace(self) -> None:
        """Wait for this request's turn under ``--rate`` (no wait unpaced)."""
        if self.args.rate <= 0:
            return
        now = time.monotonic()
        start = max(now, self.next_start)
        self.next_start = start + 1.0 / self.args.rate
        if start > now:
            await asyncio.sleep(start - now)

    async def request(self, index: int, lane: Lane, intent: dict | None = None) -> None:
        if intent is None:
            expected, events = self.heads[lane.id], self.new_events(lane.id, index)
            intent = {
                "request": index,
                "append_id": new_id(),
                "lane_id": lane.id,
                "expected_last_seq": expected,
                "events": events,
            }
            self.note(intent)
        expected, events = intent["expected_last_seq"], intent["events"]
        self.busy[lane.id] = self.busy.get(lane.id, 0) + 1
        try:
            await self._request(index, lane, intent, expected, events)
        finally:
            self.busy[lane.id] -= 1

    async def _request(self, index: int, lane: Lane, intent: dict, expected: int, events: list[dict]) -> None:
        line = {
            "producer": self.name,
            "request": index,
            "append_id": intent["append_id"],
            "lane_id": lane.id,
            "expected_last_seq": expected,
            "event_ids": [e["id"] for e in events],
            "outcome": "timeout",
            "first_seq": None,
            "last_seq": None,
            "positions": [],
            "replayed": False,
            "accepted": False,
            "sends": 0,
            "error": None,
        }
        conflict = False
        for attempt in range(MAX_SENDS):
            if self.out_of_time():
                break
            line["sends"] += 1
            self.sends += 1
            try:
                handle = await self.client.submit(lane, expected, events, append_id=line["append_id"])
                line["accepted"] = True
                self.maybe_die(lane.id, expected, line["append_id"])
                receipt = await handle.receipt(self.args.receipt_timeout)
            except TransportError as err:
                # No PubAck, or no receipt in time: resend the same append.
                line["error"] = str(err)
                await asyncio.sleep(min(0.05 * 2**attempt, 0.5))  # a producer's backoff
                continue
            except LaneConflict as err:
                line.update(outcome=err.code, error=str(err))
                conflict = True
                break
            except LedgerError as err:
                line.update(outcome=err.code, error=str(err))
                break
            line.update(
                outcome="committed",
                first_seq=receipt.first_seq,
                last_seq=receipt.last_seq,
                positions=list(receipt.positions),
                replayed=receipt.replayed,
                error=None,
                receipt_event_ids=list(receipt.event_ids),
                receipt=msgspec.to_builtins(receipt),
            )
            self.heads[lane.id] = max(self.heads[lane.id], receipt.last_seq)
            break
        self.record(line)
        if conflict:
            await self.load_lane(lane.id)

    def note(self, intent: dict) -> None:
        self.intents.write(json.dumps(intent, separators=(",", ":")) + "\n")
        self.intents.flush()

    def maybe_die(self, lane_id: str, expected: int, append_id: str) -> None:
        """``--die-after-accepts``: SIGKILL this process between a durable
        accept and its receipt, for an append that cannot conflict: on an own
        lane (no other producer writes it), not a resend of an older intent,
        no other request of ours in flight on the lane, and none committed on
        it since this one read the head it expects."""
        if (
            not self.args.die_after_accepts
            or self.resuming
            or lane_id in self.hot_ids
            or self.busy[lane_id] != 1
            or self.heads[lane_id] != expected
        ):
            return
        self.own_accepts += 1
        if self.own_accepts >= self.args.die_after_accepts:
            self.note({"killed_after_accept": append_id})
            os.kill(os.getpid(), signal.SIGKILL)

    def record(self, line: dict) -> None:
        self.outcomes[line["outcome"]] = self.outcomes.get(line["outcome"], 0) + 1
        self.out.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.out.flush()

    async def run(self) -> int:
        for lane_id in dict.fromkeys(self.lane_ids + self.hot_ids):
            if await self.load_lane(lane_id) is None:
                print(f"{self.name}: could not load lane {lane_id} in time", file=sys.stderr)
                return 2
        if self.args.resume:
            await self.resume()
        workers = [asyncio.create_task(self.worker()) for _ in range(max(1, self.args.concurrency))]
        await asyncio.gather(*workers)
        return 0


async def amain(args: argparse.Namespace) -> int:
    client = await LedgerClient.connect(args.nats, timeout=min(2.0, args.receipt_timeout))
    try:
        for path in (args.out, intents_path(args.out)):
            _drop_torn_line(path)
        with (  # opened once, before any append is in flight
            open(args.out, "a", encoding="utf-8") as out,  # noqa: ASYNC230
            open(intents_path(args.out), "a", encoding="utf-8") as intents,  # noqa: ASYNC230
        ):
            producer = Producer(args, client, out, intents)
            code = await producer.run()
        elapsed = time.monotonic() - producer.started
        print(
            json.dumps(
                {
                    "producer": producer.name,
                    "outcomes": producer.outcomes,
                    "sends": producer.sends,
                    "seconds": round(elapsed, 3),
                }
            ),
            flush=True,
        )
        return code
    finally:
        await client.close()


def intents_path(out: str | os.PathLike[str]) -> str:
    return f"{out}.intents"


def _drop_torn_line(path: str | os.PathLike[str]) -> None:
    """Cut a last line a SIGKILL left unfinished, so the next one starts clean."""
    try:
        with open(path, "r+b") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
    except FileNotFoundError:
        pass


def _read_lines(path: str | os.PathLike[str]) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            # A line cut short by a SIGKILL is not an intent or an outcome.
            return [line for line in f if line.endswith("\n") and line.strip()]
    except FileNotFoundError:
        return []


# -- for the tests that run producers (imported by them; not used by main) --------


def _parsed_lines(path: str | os.PathLike[str], attempts: int = 5) -> list[dict]:
    """The file's complete lines as JSON. Read while the producer appends, a
    line can come out torn on a loaded machine (seen once in CI: the tail of
    a line alone); what is on disk is whole, so a line that does not parse is
    read again, and only one that still does not after ``attempts`` fails."""
    for _ in range(attempts - 1):
        try:
            return [json.loads(line) for line in _read_lines(path)]
        except json.JSONDecodeError:
            time.sleep(0.05)
    return [json.loads(line) for line in _read_lines(path)]


class ProducerProcess:
    """One ``producer_proc.py`` run as an OS process (its own session, output
    lines in ``out``, stdout/stderr in files next to it)."""

    def __init__(
        self,
        nats_url: str,
        out: Path,
        *,
        tenant: str,
        actor_id: str,
        lanes: list[str],
        hot: list[str],
        requests: int,
        seed: int,
        name: str,
        **options: float | int | str,
    ) -> None:
        self.out = Path(out)
        self.name = name
        self.log_path = self.out.with_suffix(".log")
        self.args = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--nats",
            nats_url,
            "--tenant",
            tenant,
            "--actor-id",
            actor_id,
            "--lanes",
            ",".join(lanes),
            "--hot",
            ",".join(hot),
            "--requests",
            str(requests),
            "--seed",
            str(seed),
            "--out",
            str(self.out),
            "--name",
            name,
        ]
        for key, value in options.items():
            self.args += [f"--{key.replace('_', '-')}", str(value)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *extra_args: str) -> ProducerProcess:
        """Start it (again: on the same output file), with ``extra_args`` added."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.args, *extra_args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        return self

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def lines(self) -> list[dict]:
        return _parsed_lines(self.out)

    def intents(self) -> list[dict]:
        """What ``FILE.intents`` noted: requests before they were sent, and
        ``{"killed_after_accept": id}`` markers."""
        return _parsed_lines(intents_path(self.out))

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""


async def create_lanes(url: str, n: int, tenant: str = "acme") -> tuple[str, list[Lane]]:
    """One actor and ``n`` lanes (spread over a few sessions and runs)."""
    async with await LedgerClient.connect(url, timeout=5.0) as client:
        actor = await client.ensure_actor(tenant, "agent:tests/producers@1", "agent")
        lanes = [
            await client.create_lane(
                tenant, f"session-{i % 7}", f"run-{i % 3}", f"lane-{i:03d}", actor_id=actor.id
            )
            for i in range(n)
        ]
    return actor.id, lanes


def start_producers(
    url: str | list[str],
    out_dir: Path,
    actor_id: str,
    lanes: list[Lane],
    *,
    producers: int,
    hot: int,
    requests: int,
    seed: int,
    tenant: str = "acme",
    **options: float | int | str,
) -> list[ProducerProcess]:
    """``producers`` processes that all share the first ``hot`` lanes; the
    other lanes are dealt out, each to one producer. Given several URLs (the
    nodes of a cluster), producer ``k`` connects to ``url[k % len(url)]``."""
    urls = [url] if isinstance(url, str) else list(url)
    hot_ids = [lane.id for lane in lanes[:hot]]
    rest = [lane.id for lane in lanes[hot:]]
    started: list[ProducerProcess] = []
    try:
        for k in range(producers):
            started.append(
                ProducerProcess(
                    urls[k % len(urls)],
                    Path(out_dir) / f"producer-{k}.jsonl",
                    tenant=tenant,
                    actor_id=actor_id,
                    lanes=rest[k::producers] or hot_ids,
                    hot=hot_ids,
                    requests=requests,
                    seed=seed * 100 + k,
                    name=f"producer-{k}",
                    **options,
                ).start()
            )
    except BaseException:
        for producer in started:
            producer.kill()
        raise
    return started


async def wait_for_producers(producers: list[ProducerProcess], timeout: float) -> None:
    """Until every producer has exited, then check each exited 0; kills them
    all either way."""
    try:
        await eventually(
            lambda: [p.name for p in producers if p.returncode is None],
            until=lambda running: not running,
            what="every producer to exit",
            timeout=timeout,
        )
    finally:
        for p in producers:
            p.kill()
    for p in producers:
        assert p.returncode == 0, f"{p.name} exited with {p.returncode}:\n{p.log_text()[-3000:]}"


def check_against_ledger(lines: list[dict], db_path: str | os.PathLike[str]) -> dict[str, int]:
    """Every request line against the ledger file (read-only): one outcome per
    append id, each ``committed`` or ``lane_conflict``; a committed append's
    events are in the ledger exactly once, with the ids it sent, at the seqs
    and positions its receipt named, under exactly one stored receipt; a
    conflicted append left nothing; nothing else is in the ledger; every lane
    is dense and its head is its last event; the committed event count equals
    the last position; and every receipt a producer got is for events the
    ledger holds with its positions, ids and entry hashes, and is the receipt
    stored for that request (``receipt_check.check_receipts_held``). Returns
    counts."""
    import sqlite3
    from collections import Counter, defaultdict

    from laneledger.store import open_ledger

    ids = Counter(line["append_id"] for line in lines)
    repeated = [a for a, n in ids.items() if n != 1]
    assert not repeated, f"append ids with more than one outcome line: {repeated[:5]}"
    bad = [line for line in lines if line["outcome"] not in ("committed", "lane_conflict")]
    assert not bad, f"{len(bad)} requests neither committed nor lane_conflict, e.g. {bad[:3]}"

    db = open_ledger(db_path, readonly=True)
    try:
        db.execute("BEGIN")
        events = db.execute(
            "SELECT position, id, lane_id, seq, append_id FROM events ORDER BY position"
        ).fetchall()
        receipts = Counter(a for (a,) in db.execute("SELECT append_id FROM receipts"))
        heads = {
            lane: (last_seq, head)
            for lane, last_seq, head in db.execute("SELECT id, last_seq, head_hash FROM lanes")
        }
        last_hash = {
            lane: body
            for lane, body in db.execute(
                "SELECT e.lane_id, e.body FROM events e JOIN lanes l"
                " ON l.id = e.lane_id AND e.seq = l.last_seq"
            )
        }
        db.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise AssertionError(f"cannot read {db_path}: {exc}") from exc
    finally:
        db.close()

    by_append: dict[str, list[tuple]] = defaultdict(list)
    seqs_by_lane: dict[str, list[int]] = defaultdict(list)
    for row in events:
        by_append[row[4]].append(row)
        seqs_by_lane[row[2]].append(row[3])
    committed = [line for line in lines if line["outcome"] == "committed"]
    for line in lines:
        rows = by_append.pop(line["append_id"], [])
        if line["outcome"] != "committed":
            assert not rows and line["append_id"] not in receipts, (
                f"append {line['append_id']} ({line['outcome']}) left events or a receipt"
            )
            continue
        assert receipts[line["append_id"]] == 1, f"append {line['append_id']}: no single receipt"
        assert [r[1] for r in rows] == line["event_ids"], (
            f"append {line['append_id']}: ledger holds {[r[1] for r in rows]}, "
            f"the producer sent {line['event_ids']}"
        )
        assert line.get("receipt_event_ids", line["event_ids"]) == line["event_ids"]
        assert all(r[2] == line["lane_id"] for r in rows)
        assert [r[3] for r in rows] == list(range(line["first_seq"], line["last_seq"] + 1))
        assert [r[0] for r in rows] == line["positions"]
    assert not by_append, f"events of appends no producer reported: {list(by_append)[:5]}"
    assert set(receipts) == {line["append_id"] for line in committed}, "receipts without requests"
    for lane_id, seqs in seqs_by_lane.items():
        assert sorted(seqs) == list(range(1, len(seqs) + 1)), f"lane {lane_id} is not dense"
        assert heads[lane_id][0] == len(seqs), f"lane {lane_id}: head is not its last event"
        body = json.loads(last_hash[lane_id])
        assert heads[lane_id][1] == body["entry_hash"], f"lane {lane_id}: head hash differs"
    unrecorded = [line["append_id"] for line in committed if "receipt" not in line]
    assert not unrecorded, f"committed appends without the receipt the producer got: {unrecorded[:5]}"
    receipts_checked = check_receipts_held((line["receipt"] for line in committed), db_path)
    n_events = sum(len(line["event_ids"]) for line in committed)
    last_position = events[-1][0] if events else 0
    assert n_events == len(events) == last_position, (n_events, len(events), last_position)
    return {
        "requests": len(lines),
        "committed": len(committed),
        "lane_conflict": len(lines) - len(committed),
        "events": n_events,
        "replayed": sum(1 for line in committed if line["replayed"]),
        "resent": sum(1 for line in lines if line["sends"] > 1),
        "lanes_used": len(seqs_by_lane),
        "receipts_checked": receipts_checked,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
