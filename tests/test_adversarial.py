"""The adversarial suite (issue 34, item 7): each attack of the issue against
the deployment as rendered (``rendered_deployment``: the rendered nats.conf,
an active and a standby sequencer, the tail and the checkpoint service with
tokens, every service as its deploy user). acme attacks holding only its own
NATS user and HTTP token; globex, the victim, appends one event every 20 ms
throughout from a process of its own, and each of its receipts' latency is
kept.
Every attack is bounded in requests and in time, on loopback only. The
fairness benchmark's scenario (``laneledger.devtools.fairness``, which
``bench/fairness.py`` runs on its own harness) runs here too, shortened to
3 s: its globex producer's p50/p99 are printed and reported beside the
victim's, under the same guard.

After each attack: no sequencer lost its lease or failed over, the one that
started active still is; every receipt globex got names events the ledger
holds (``receipt_check``) and ``laneledger verify --db`` passes; nats-server
refused no one anything. globex's latency p50/p99/max is printed (``-s``) and
attached to the test report (``user_properties``).

Latency. The issue's target is **p99 ≤ 50 ms during every flood**. Run
alone, it was met in eleven runs in a row (runs C and D below among them; the
fairness scenario at 49.6 ms once, the events flood at 44-57 ms earlier
the same day on a slower hour of this machine, before runs C); what is
asserted in ``make test`` is a regression guard, ``P99_GUARD_S`` (5 s);
``make adversarial`` runs this module alone and asserts the 50 ms
(``LANELEDGER_ADVERSARIAL_P99_S=0.05``). Inside the parallel
``make test`` (other workers busy on both cores) p99 reached 1,169 ms
(events flood) and 1,008 ms (made-up refs), so 1 s was too tight there. 5 s
still fails on what the issue found before the fixes (globex stalled 4.2 s
to 23 s, the sequencer busy for minutes, failovers).

The victim is a process of its own (``tests/victim_proc.py``), as another
tenant's producer is; until 2026-12-06 it ran on the test's event loop, so
its latencies also held whatever time that loop spent building acme's
requests (about 11 ms per 1000-event request). The events flood's p99 did
not move when it left (108.8 before, 102.7 after, one run each).

Measured with ``.venv/bin/python -m pytest -s tests/test_adversarial.py
-p no:cacheprovider``, alone, 2026-12-06; globex p99 / max in ms (p50
3-11 ms throughout; with fewer than 100 appends its p99 is its max). Runs
A: in the morning. Runs B: after receipts stopped waiting for the committed
stream (spec/replication.md, "The commit order") and a batch's work
stopped holding the pull loop once answered ("Group commit"). Runs C: also
with the default ``append_burst`` at 250 tokens, not 2,000 (spec/wire.md,
"Tenants and limits"), on a faster hour of the machine. Run D: also with
an atomic batch giving the event loop back every 64 messages
(spec/replication.md, "Atomic batches"), later that day (``make
adversarial``).

    attack                A1, A2        B1             B2             C1           C2           D
    redaction bomb        37.1, 40.4    23.2 / 30.1    27.0 / 29.3    13.4 / 15.8  19.9 / 23.6  9.1 / 10.1
    byte flood            37.4, 36.9    20.7 / 37.5    17.9 / 22.6    13.9 / 29.0  13.5 / 19.0  10.1 / 18.7
    events flood          107.6, 122.7  56.7 / 77.5    44.1 / 68.5    31.1 / 38.1  35.1 / 40.7  24.0 / 25.7
    made-up refs          19.0, 15.3    11.5 / 15.5    13.1 / 16.7    13.6 / 23.3  10.9 / 13.5  6.4 / 8.4
    expensive reads       25.9, 20.7    13.5 / 13.5    15.4 / 15.4    9.6 / 9.6    14.9 / 14.9  6.7 / 6.7
    quota bypass          11.6, 11.3    8.7 / 8.7      7.5 / 7.5      7.1 / 7.1    9.5 / 9.5    5.4 / 5.4
    fairness scenario     293.8, 288.6  254.8 / 290.9  140.8 / 213.7  38.3 / 75.3  49.6 / 76.3  16.9 / 44.9
      its paced producer  301.0, 284.6  229.6 / 243.4  215.7 / 234.5  32.7 / 37.0  41.2 / 67.5  15.1 / 19.0

No lease lost, no failover in any run; the tail's RSS grew 43.1-64.9 MiB
(the bound is 176 MiB).

The events flood: acme's rate (2,000 tokens/s, a 1000-event request costing
1,000) lets one heavy request through about every half second, and globex's
slowest receipts are those that queue behind one. Such a request alone, on
an idle sequencer with no other service (``bench/heavy_request.py``, seven
requests), takes 86-128 ms from publish to receipt: 19-27 ms of step 0 in
the prepare worker, 31-64 ms written on the writer thread (the transaction
log's append, 6-34 ms, inside it), 14-22 ms to the committed stream.
Running the tail, checkpoint, metrics and ingest services (and, once the
victim had its own process, acme's client too) at nice 15 during the events
flood changed nothing (p99 97-128 ms in four runs), so it is that path, not
other processes taking the CPU. In the fairness scenario (looked at earlier
that day, the victim still in the test's process) the victim's series is
4-8 ms until acme's producer starts, then a few receipts of 135-193 ms while
the deployment works through acme's burst (2,000 requests at once), then
10-45 ms while the flood goes on at acme's rate; renicing the other
services changed nothing there either. Since the afternoon of 2026-12-06 a
request behind a heavy one waits for its commit only, not for its 14-22 ms
to the committed stream, nor for its own.

The fairness scenario's p99 was acme's burst: its 1000 requests sent at
once, taken at once by a bucket 2,000 tokens deep, made full batches that
globex's requests waited behind. Smaller batches helped little and cost
throughput (``LANELEDGER_BATCH_SIZE`` 500, the default, 200 and 100, two
runs each of this scenario alone, ``-k fairness``: globex p99 244 and 188,
134 and 136, 90 and 92 ms; the sequencer alone drained 7,662 and 7,724,
7,020 and 6,954, 5,699 and 6,057 events/s, ``bench/drain.py --requests
20000 --batch-size N``). A shallower bucket is the fix: with
``append_burst`` 2,000, 500 and 250, alternated twice, globex p99 179 and
167, 52 and 55, 51 and 34 ms, so the default is 250.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from metrics_support import parse, scrape, total, value
from polling import eventually
from receipt_check import check_receipts_held
from rendered_deployment import RenderedDeployment
from service_process import REPO
from tail_support import rss_bytes

from laneledger.contract.contentref import MAX_REFS_PER_APPEND
from laneledger.contract.errors import LedgerError
from laneledger.contract.ids import new_id
from laneledger.contract.model import (
    MAX_REQUEST_BYTES,
    Actor,
    AppendRejected,
    Checkpoint,
    Receipt,
    decoder,
)
from laneledger.contract.redaction import Redacted, Redactor
from laneledger.contract.subjects import REPLY_HEADER, Subjects
from laneledger.devtools import fairness
from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import LaneRecorder, make_event

pytestmark = [pytest.mark.nats, pytest.mark.slow]

MiB = 1024 * 1024
ATTACK_S = 4.0  # each attack's time bound
VICTIM_EVERY_S = 0.02  # globex appends one event this often
VICTIM_PROC = Path(__file__).with_name("victim_proc.py")
ISSUE_TARGET_P99_S = 0.05
# A regression guard that holds on a loaded 2-core machine (inside the
# parallel ``make test``); ``make adversarial`` runs this module alone and
# asserts the issue's target instead (see the module text).
P99_GUARD_S = float(os.environ.get("LANELEDGER_ADVERSARIAL_P99_S", "5.0"))
# spec/tail.md, "Limits and memory": per token scope, at most
# --max-tails-per-token (32) × ~3 MiB + --max-reads-per-token (4) × ~20 MiB
# beyond the tail's baseline, whatever is asked.
TAIL_RSS_GROWTH_BOUND = 32 * 3 * MiB + 4 * 20 * MiB
SUBJECTS = Subjects()
_receipts = decoder(list[Receipt])


# -- the victim ---------------------------------------------------------------------


@dataclass
class Victim:
    """globex appending one event every ``VICTIM_EVERY_S`` from a process of
    its own (``tests/victim_proc.py``), as another tenant's producer is,
    until stopped; then each receipt (as builtins) and its latency."""

    proc: asyncio.subprocess.Process
    latencies: list[float] = field(default_factory=list)
    receipts: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    async def start(cls, d: RenderedDeployment) -> Victim:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(VICTIM_PROC),
            *("--nats", d.url("producer-globex"), "--tenant", "globex"),
            *("--session-id", "victim", "--every", str(VICTIM_EVERY_S)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        try:
            ready = await asyncio.wait_for(proc.stdout.readline(), 30)
        except TimeoutError:
            proc.kill()
            raise
        assert ready == b"ready\n", f"the victim did not start: {ready!r}"
        return cls(proc)

    async def stop(self) -> None:
        """Stop appending; its latencies and receipts are then here."""
        try:
            out, _ = await asyncio.wait_for(self.proc.communicate(b"stop\n"), 30)
        except TimeoutError:
            self.proc.kill()
            raise
        assert self.proc.returncode == 0, f"the victim failed (status {self.proc.returncode})"
        result = json.loads(out.splitlines()[-1])
        self.latencies, self.receipts = result["latencies"], result["receipts"]

    def figures(self) -> dict[str, float]:
        ms = sorted(x * 1000 for x in self.latencies)
        return {
            "appends": len(ms),
            "p50_ms": round(statistics.median(ms), 1),
            "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 1),
            "max_ms": round(ms[-1], 1),
        }


# -- the attacker's raw requests ----------------------------------------------------------


class RawAppends:
    """acme's append requests published straight to its append stream, as a
    producer without the SDK would (no client-side redaction, nothing moved
    into blobs), at most ``window`` without a receipt; the receipts collected."""

    def __init__(self, recorder: LaneRecorder, window: int = 4) -> None:
        self.client, self.lane = recorder.client, recorder.lane
        self.actor_id = recorder.lane.actor_id
        self.head = recorder.head
        self.window = asyncio.Semaphore(window)
        self.sent = 0
        self.receipts: list[Receipt] = []
        self.inbox = self.client.nc.new_inbox()  # in acme's own inbox prefix
        self._sub: Any = None

    async def __aenter__(self) -> RawAppends:
        self._sub = await self.client.nc.subscribe(self.inbox, cb=self._on)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._sub.unsubscribe()

    async def _on(self, msg: Any) -> None:
        for receipt in _receipts.decode(msg.data):
            self.receipts.append(receipt)
            if isinstance(receipt, AppendRejected):
                self.head = -1  # resync before the next request
            self.window.release()

    def event(self, payload: Any, **fields: Any) -> dict[str, Any]:
        """An event with ``payload`` inline, whatever its size."""
        base = make_event(self.lane.id, "stream.text_delta", actor_id=self.actor_id, **fields)
        return {**base, "payload": payload}

    async def send(self, events: list[dict[str, Any]]) -> None:
        await self.window.acquire()
        if self.head < 0:
            await self.drained()
            self.head = (await self.client.get_lane(self.lane.id, tenant="acme")).last_seq
        body = msgspec.json.encode(
            {"lane_id": self.lane.id, "expected_last_seq": self.head, "append_id": new_id(), "events": events}
        )
        assert len(body) <= MAX_REQUEST_BYTES, len(body)
        self.head += len(events)
        self.sent += 1
        await self.client.js.publish(
            SUBJECTS.append("acme", self.lane.id), body, headers={REPLY_HEADER: self.inbox}, timeout=30
        )

    async def drained(self, timeout: float = 60) -> None:
        """Every request sent has its receipt."""
        await eventually(
            lambda: len(self.receipts),
            until=lambda got: got == self.sent,
            what="a receipt for each of acme's requests",
            timeout=timeout,
        )

    @staticmethod
    def outcome(receipt: Receipt) -> str:
        return receipt.error.code if isinstance(receipt, AppendRejected) else "committed"

    async def flood(self, events_of: Callable[[int], list[dict[str, Any]]], most: int) -> None:
        """Request n carries ``events_of(n)``: ``most`` requests at most, for
        ``ATTACK_S`` at most; then every receipt awaited."""
        async with self:
            await bounded(lambda n: self.send(events_of(n)), most=most)
            await self.drained()

    def codes(self) -> set[str]:
        return {self.outcome(r) for r in self.receipts}


async def bounded(attack: Callable[[int], Awaitable[object]], *, most: int, seconds: float = ATTACK_S) -> int:
    """``attack(n)`` for n = 0, 1, … until ``most`` calls or ``seconds``; how many ran."""
    deadline = time.monotonic() + seconds
    n = 0
    while n < most and time.monotonic() < deadline:
        await attack(n)
        n += 1
    return n


# -- the checks after each attack ------------------------------------------------------------


async def _sequencer_samples(d: RenderedDeployment) -> tuple[Any, Any]:
    active, standby = d.sequencer.http_url, d.standby.http_url
    assert active is not None and standby is not None
    return parse(await scrape(active)), parse(await scrape(standby))


async def under_attack(
    d: RenderedDeployment,
    request: pytest.FixtureRequest,
    name: str,
    attack: Callable[[], Awaitable[object]],
    acme: RawAppends | None = None,
) -> dict[str, Any]:
    """Run ``attack`` while globex appends; then every check of the module
    text. Returns globex's latency figures (also printed and reported)."""
    victim = await Victim.start(d)
    await asyncio.sleep(0.3)  # the victim's steady state before the attack
    try:
        await attack()
    finally:
        await victim.stop()
    figures = victim.figures()
    active, standby = await _sequencer_samples(d)
    figures["lease_lost"] = total(active, "laneledger_sequencer_lease_lost_total") + total(
        standby, "laneledger_sequencer_lease_lost_total"
    )
    figures["failovers"] = total(active, "laneledger_sequencer_failovers_total") + total(
        standby, "laneledger_sequencer_failovers_total"
    )
    figures["issue_target_met"] = figures["p99_ms"] <= ISSUE_TARGET_P99_S * 1000  # reported, not asserted
    if acme is not None:  # what acme's requests came to
        figures["acme_outcomes"] = dict(Counter(acme.outcome(r) for r in acme.receipts))
    print(f"\n[{name}] globex under attack: {figures}")
    request.node.user_properties.append((f"adversarial {name}", figures))

    assert (value(active, "laneledger_sequencer_active"), value(standby, "laneledger_sequencer_active")) == (
        1,
        0,
    ), "the sequencer that started active is no longer the active one"
    assert figures["lease_lost"] == 0 and figures["failovers"] == 0, figures
    assert check_receipts_held(victim.receipts, d.sequencer.db_path) == len(victim.receipts) > 0
    verified = await d.verify()
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert d.permission_violations() == []
    assert figures["p99_ms"] <= P99_GUARD_S * 1000, f"globex's p99 regressed: {figures}"
    return figures


async def acme_raw(d: RenderedDeployment, window: int = 4) -> RawAppends:
    return RawAppends(await d.lane("acme", session_id="attack"), window=window)


# -- the attacks ------------------------------------------------------------------------------------

BOMB_BYTES = 800 * 1024
BOMBS = (
    "-----BEGIN PRIVATE KEY-----\n" * (BOMB_BYTES // 28),
    "eyJhbGciOi." * (BOMB_BYTES // 11),  # a chain of JWT-shaped starts
)


async def test_redaction_bombs_neither_stall_globex_nor_cost_the_lease(
    rendered_deployment: RenderedDeployment, request: pytest.FixtureRequest
) -> None:
    d = rendered_deployment
    acme = await acme_raw(d, window=2)
    # acme's own client redacts nothing: the services' redaction is attacked.
    unredacted = await d.connect("acme", redactor=PassThrough(), timeout=30.0)
    names: list[object] = []
    states: list[object] = []

    async def answer(call: Awaitable[object], into: list[object]) -> None:
        try:
            into.append(await call)
        except LedgerError as exc:
            into.append(exc)

    async def attack() -> None:
        await acme.flood(lambda n: [acme.event({"text": BOMBS[n % 2]})], most=8)
        for n, bomb in enumerate(BOMBS):  # as an actor's display name, as checkpoint state
            await answer(
                unredacted.ensure_actor("acme", f"agent:bomb-{n}", "agent", display_name=bomb), names
            )
            checkpoints = CheckpointClient(unredacted)
            save = checkpoints.save(f"bomb-{n}", expected_revision=0, format="test/v1", state={"s": bomb})
            await answer(save, states)

    await under_attack(d, request, "redaction bomb", attack, acme)
    print(f"[redaction bomb] checkpoint saves: {[_shown(s) for s in states]}")
    assert len(states) == len(BOMBS) and all(isinstance(s, LedgerError | Checkpoint) for s in states)
    # Redacted and committed, or refused with a typed error; nothing else.
    assert acme.receipts and acme.codes() <= {"committed", "request_too_large", "invalid_request"}
    print(f"[redaction bomb] display names: {[_shown(n) for n in names]}")
    # Headers alone are no key (kept as sent); the JWT-shaped chain is redacted.
    assert all(isinstance(n, LedgerError | Actor) for n in names), [_shown(n) for n in names]
    jwt_name = names[1]
    if isinstance(jwt_name, Actor):
        assert jwt_name.display_name is not None and "eyJhbGciOi" not in jwt_name.display_name
        assert "[REDACTED:jwt]" in jwt_name.display_name


class PassThrough(Redactor):
    """A hostile producer's client: it redacts nothing before sending."""

    def redact(self, value: Any) -> Redacted:
        return Redacted(value, 0)

    def redact_text(self, text: str, rules: dict[str, int] | None = None) -> str:
        return text

    def surely_clean(self, value: Any) -> bool:
        return True


def _shown(answer: object) -> str:
    """An actor or error, short (a bomb is 800 KB)."""
    if isinstance(answer, LedgerError):
        return f"{answer.code}: {str(answer)[:200]}"
    if isinstance(answer, Actor):
        name = answer.display_name or ""
        return f"actor, display_name of {len(name)} chars: {name[:80]!r}"
    return f"{type(answer).__name__} {str(answer)[:120]}"


async def test_a_flood_of_0_9_mib_inline_events_does_not_stall_globex(
    rendered_deployment: RenderedDeployment, request: pytest.FixtureRequest
) -> None:
    d = rendered_deployment
    acme = await acme_raw(d, window=8)
    text = "x" * (MAX_REQUEST_BYTES - 100 * 1024)  # ~0.9 MiB inline

    attack = partial(acme.flood, lambda n: [acme.event({"text": text})], most=200)
    await under_attack(d, request, "byte flood", attack, acme)
    assert "committed" in acme.codes() and acme.codes() <= {"committed", "quota_exceeded"}


async def test_a_flood_of_1000_event_requests_does_not_stall_globex(
    rendered_deployment: RenderedDeployment, request: pytest.FixtureRequest
) -> None:
    d = rendered_deployment
    acme = await acme_raw(d, window=4)

    attack = partial(acme.flood, lambda n: [acme.event({"k": k}) for k in range(1000)], most=40)
    await under_attack(d, request, "events flood", attack, acme)
    assert acme.codes() == {"committed"}


def _made_up_refs(n: int, salt: int) -> dict[str, dict[str, object]]:
    return {f"r{i}": {"_ref": "sha256:" + f"{salt:08x}{i:056x}", "size_bytes": 10} for i in range(n)}


async def test_requests_naming_thousands_of_made_up_content_refs_are_refused_cheaply(
    rendered_deployment: RenderedDeployment, request: pytest.FixtureRequest
) -> None:
    d = rendered_deployment
    acme = await acme_raw(d, window=4)

    refs = (8000, MAX_REFS_PER_APPEND)  # over the bound and at it, alternately
    attack = partial(acme.flood, lambda n: [acme.event(_made_up_refs(refs[n % 2], n))], most=40)
    await under_attack(d, request, "made-up refs", attack, acme)
    assert acme.codes() == {"invalid_request", "blob_missing"}


SESSION_EVENTS = 3000  # acme's sizeable session, ~1 KB each
# Each round, at once: more expensive reads than acme's 4, more tails than its 32.
PROOFS, VERIFIES, TAILS = 6, 4, 40
ROUND = PROOFS + VERIFIES + TAILS


async def test_expensive_reads_and_tails_from_position_one_are_limited_and_keep_the_tails_memory_bounded(
    rendered_deployment: RenderedDeployment, request: pytest.FixtureRequest
) -> None:
    d = rendered_deployment
    builder = await d.lane("acme", session_id="big")
    assert builder.lane.actor_id is not None
    for start in range(0, SESSION_EVENTS, 500):
        await builder.append(
            [
                builder.event(
                    "stream.text_delta", actor_id=builder.lane.actor_id, payload={"t": "t" * 900, "k": k}
                )
                for k in range(start, start + 500)
            ]
        )
    await eventually(
        lambda: d.get(d.tail, "/api/v1/sessions/big/proof", tenant="acme"),
        until=lambda got: got[0] == 200,
        what="the tail to serve a proof of acme's session",
        timeout=60,
    )
    assert d.tail.pid is not None
    baseline = peak = rss_bytes(d.tail.pid)
    statuses: list[int] = []
    refusals: list[dict[str, Any]] = []
    sampling = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not sampling.is_set():
            peak = max(peak, rss_bytes(d.tail.pid))  # type: ignore[arg-type]
            await asyncio.sleep(0.05)

    async def read(http: aiohttp.ClientSession, path: str, keep: int, answered: asyncio.Event) -> None:
        """acme's read of ``path``: once every request of the round has its
        answer (so all hold their slots at once), ``keep`` bytes, then it leaves."""
        async with http.get(f"{d.tail.http_url}{path}") as response:
            statuses.append(response.status)
            if len(statuses) % ROUND == 0:
                answered.set()
            if response.status != 200:
                assert response.status == 429 and response.headers["Retry-After"] == "1"
                refusals.append((await response.json())["error"])
                return
            await asyncio.wait_for(answered.wait(), timeout=30)
            got = 0
            while got < keep and (chunk := await response.content.read(64 * 1024)):
                got += len(chunk)

    globex_statuses: list[int] = []

    async def globex_reads(answered: asyncio.Event) -> None:
        """globex's own expensive read while acme holds its slots: acme's limits are acme's."""
        await asyncio.wait_for(answered.wait(), timeout=30)
        path = "/api/v1/verify"
        globex_statuses.append(
            (await d.get(d.tail, path, tenant="globex", params={"session_id": "victim"}))[0]
        )

    async def attack() -> None:
        headers = {"Authorization": f"Bearer {d.token('acme')}"}
        timeout = aiohttp.ClientTimeout(total=60)
        sampler = asyncio.create_task(sample())
        try:
            async with aiohttp.ClientSession(headers=headers, timeout=timeout) as http:
                for _ in range(2):  # two rounds, each more than acme's limits at once
                    answered = asyncio.Event()
                    await asyncio.gather(
                        globex_reads(answered),
                        *(read(http, "/api/v1/sessions/big/proof", 4 * MiB, answered) for _ in range(PROOFS)),
                        *(
                            read(http, "/api/v1/verify?session_id=big", 4 * MiB, answered)
                            for _ in range(VERIFIES)
                        ),
                        *(
                            read(http, "/api/v1/events?from_position=1", 256 * 1024, answered)
                            for _ in range(TAILS)
                        ),
                    )
        finally:
            sampling.set()
            await sampler

    await under_attack(d, request, "expensive reads", attack)
    growth = peak - baseline
    rss = {
        "baseline_mib": round(baseline / MiB, 1),
        "peak_mib": round(peak / MiB, 1),
        "growth_mib": round(growth / MiB, 1),
        "bound_mib": TAIL_RSS_GROWTH_BOUND // MiB,
        "statuses": dict(Counter(statuses)),
    }
    print(f"[expensive reads] tail RSS: {rss}")
    request.node.user_properties.append(("adversarial expensive reads tail RSS", rss))
    assert set(statuses) == {200, 429}, statuses
    assert {r["details"]["limit"] for r in refusals} == {"live_tails", "expensive_reads"}
    assert all(r["code"] == "quota_exceeded" for r in refusals)
    assert growth < TAIL_RSS_GROWTH_BOUND, f"the tail grew by {growth / MiB:.1f} MiB"
    assert globex_statuses == [200, 200]
    # The work stopped with acme's clients (spec/tail.md: within 10 s).
    tail_url = d.tail.http_url
    assert tail_url is not None
    for name in ("laneledger_tail_expensive_reads_in_flight", "laneledger_tail_subscribers"):
        await eventually(
            lambda: scrape(tail_url),
            until=lambda text, name=name: value(parse(text), name) == 0,
            what=f"{name} back to 0 once acme's clients left",
            timeout=10,
        )


QUOTA_TENANTS = """\
[defaults]
append_rate = 2000
append_burst = 2000
append_backlog = 20000

[tenants.acme]
inline_bytes = "256KiB"
checkpoint_state_bytes = "64KiB"

[tenants.globex]
"""


@pytest.mark.tenants_file(QUOTA_TENANTS)
async def test_inline_events_and_inline_checkpoint_state_count_against_acmes_quotas(
    rendered_deployment: RenderedDeployment, request: pytest.FixtureRequest
) -> None:
    d = rendered_deployment
    acme = await acme_raw(d, window=1)  # each refusal seen before the next request
    saves: list[object] = []

    async def attack() -> None:
        await acme.flood(lambda n: [acme.event({"text": "i" * 60_000, "n": n})], most=20)
        checkpoints = CheckpointClient(acme.client)

        async def save(n: int) -> None:
            try:
                saves.append(
                    await checkpoints.save(
                        f"k-{n}", expected_revision=0, format="test/v1", state={"s": "c" * 20_000}
                    )
                )
            except LedgerError as exc:
                saves.append(exc)

        await bounded(save, most=10)

    await under_attack(d, request, "quota bypass", attack, acme)
    refused = [r for r in acme.receipts if isinstance(r, AppendRejected)]
    assert refused and all(r.error.code == "quota_exceeded" for r in refused), acme.codes()
    assert {(r.error.details["limit"], r.error.details["tenant"]) for r in refused} == {
        ("inline_bytes", "acme")
    }
    assert all(r.error.details["limit_bytes"] == 256 * 1024 for r in refused)
    stored = [s for s in saves if not isinstance(s, LedgerError)]
    quota = [s for s in saves if isinstance(s, LedgerError)]
    assert stored and quota, saves
    assert {(e.code, e.details["limit"]) for e in quota} == {("quota_exceeded", "checkpoint_state_bytes")}


# -- the fairness benchmark ----------------------------------------------------------------------

# bench/fairness.py's scenario, shortened: acme floods one-event appends (up to
# 1000 without a receipt), globex's paced producer appends 100/s, each a
# process of bench/producer.py, each tenant as its own NATS user.
FAIRNESS = fairness.Load(seconds=3.0, warmup_s=0.5, drain_s=10.0, flood={"window": 1000})


async def test_the_fairness_benchmark_runs_on_the_deployment_as_rendered(
    rendered_deployment: RenderedDeployment, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    d = rendered_deployment
    ran: dict[str, Any] = {}

    async def attack() -> None:
        ledger = fairness.Ledger(url_of=lambda tenant: d.url(f"producer-{tenant}"), tenant_users=True)
        ran.update(await fairness.run(ledger, FAIRNESS, REPO / "bench" / "producer.py", tmp_path))

    await under_attack(d, request, "fairness", attack)
    acme, globex = ran.pop("acme"), ran.pop("globex")
    print(f"[fairness] globex's paced producer with acme flooding: {ran}")
    request.node.user_properties.append(("adversarial fairness benchmark", ran))
    # Every append of both has its receipt; globex's are all commits.
    assert globex["receipt_timeouts"] == 0 and ran["globex_errors"] == {}, ran
    assert globex["appends_committed"] == globex["appends_submitted"] > 0
    assert acme["receipt_timeouts"] == 0 and acme["appends_committed"] > 0, acme
    assert acme["appends_committed"] + acme["appends_rejected"] == acme["appends_submitted"]
    assert ran["globex_receipt_p99_ms"] <= P99_GUARD_S * 1000, f"globex's p99 regressed: {ran}"
