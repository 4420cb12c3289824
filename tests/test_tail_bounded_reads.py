"""The tail's reads are bounded (spec/tail.md, "Limits and memory"): per-token
limits on live tails and expensive reads (typed 429 with Retry-After),
session proofs streamed a page at a time, and work that stops when the
client leaves; the tail's memory stays under the stated bound with the tail
as its own process."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from polling import eventually
from prometheus_client import CollectorRegistry, Gauge
from tail_support import TailProcess, wait_applied
from tlog_support import size_of, start_signing_sequencer

from laneledger.cli.tlog import request_checkpoint
from laneledger.contract.errors import InternalError, LedgerUnavailable, QuotaExceeded
from laneledger.contract.subjects import Subjects
from laneledger.runtime.access import AccessPolicy, Scope
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.services.tail.handlers import transparency, verify
from laneledger.services.tail.handlers.verify import Verifier
from laneledger.services.tail.limits import READS, Limiter, LimitSettings
from laneledger.tlog.client import LogClient
from laneledger.tlog.note import Signer
from laneledger.tlog.sessionbundle import (
    PAGE_EVENTS,
    SessionBundle,
    session_bundle_chunks,
    verify_session_bundle,
)

pytestmark = pytest.mark.timeout(240)

ORIGIN = "ledger.example/bounded"


@dataclass
class Ledger:
    client: LedgerClient
    signer: Signer

    async def sign(self) -> int:
        """A checkpoint of the ledger's tree now; its size."""
        return size_of(await request_checkpoint(self.client, Subjects()))


@pytest_asyncio.fixture
async def ledger(nats_server, nc, tmp_path) -> AsyncIterator[Ledger]:
    """A real sequencer that signs checkpoints on request only."""
    signer = Signer.generate(ORIGIN)
    service = await start_signing_sequencer(nc, tmp_path / "ledger.db", signer, interval_s=3600)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=30.0) as client:
            yield Ledger(client, signer)
    finally:
        await service.stop()


async def record(client: LedgerClient, tenant: str, session: str, events: int, text: str = "x") -> None:
    """``events`` events in one lane of ``session``, 200 to an append."""
    actor = await client.ensure_actor(tenant, f"agent:{tenant}-bounded@1", "agent")
    lane = await LaneRecorder.open(client, tenant, session, "r1", "main", actor_id=actor.id)
    for start in range(0, events, 200):
        batch = [
            lane.event("stream.text_delta", actor_id=actor.id, payload={"k": k, "text": text})
            for k in range(start, min(start + 200, events))
        ]
        await lane.append(batch)


async def signed_session(ledger: Ledger, tail, events: int, text: str = "x") -> int:
    """acme's session ``big`` of ``events`` events under a checkpoint the
    in-process ``tail`` serves; the checkpoint's size."""
    await record(ledger.client, "acme", "big", events, text)
    size = await ledger.sign()
    await eventually(
        lambda: tail.api.get(f"/api/v1/tlog/checkpoints/{size}"),
        until=lambda a: a.status == 200,
        what="the tail to serve the checkpoint",
    )
    return size


def quota_refusal(answer) -> dict:
    assert answer.status == 429, answer.body[:300]
    assert answer.headers["Retry-After"] == "1"
    error = answer.error
    assert error["code"] == "quota_exceeded" and error["retryable"] is True
    return error["details"]


# -- pure logic ----------------------------------------------------------------------------------


def test_a_limiter_counts_per_scope_and_frees_its_slots():
    gauge = Gauge("in_flight", "test", registry=CollectorRegistry())
    limiter = Limiter(READS, 2, gauge)
    acme, globex = Scope("acme"), Scope("globex")
    with limiter.slot(acme), limiter.slot(acme):
        with pytest.raises(QuotaExceeded) as refused:
            with limiter.slot(acme):
                pass
        assert refused.value.details == {
            "limit": READS,
            "limit_value": 2,
            "tenant": "acme",
            "retry_after_s": 1,
        }
        with limiter.slot(globex):  # another tenant's count is its own
            assert gauge._value.get() == 3
    operator = Scope(None, operator=True)  # its own count, neither a tenant's nor the open tail's
    with limiter.slot(operator), limiter.slot(operator), limiter.slot(Scope(None)):
        with pytest.raises(QuotaExceeded):
            limiter.slot(operator).__enter__()
    assert gauge._value.get() == 0
    with limiter.slot(acme), limiter.slot(acme):  # freed, even after refusals and errors
        pass
    with pytest.raises(RuntimeError), limiter.slot(acme):
        raise RuntimeError("a read failed")
    with limiter.slot(acme), limiter.slot(acme):
        pass


# -- the routes, in-process ----------------------------------------------------------------------


async def test_live_tails_and_expensive_reads_over_the_tokens_limit_are_typed_429s(start_tail):
    acme, globex = secrets.token_hex(16), secrets.token_hex(16)
    tail = await start_tail(
        access=AccessPolicy.from_tokens({"acme": acme, "globex": globex}),
        limits=LimitSettings(tails_per_token=2, reads_per_token=1),
    )
    as_acme = {"Authorization": f"Bearer {acme}"}
    as_globex = {"Authorization": f"Bearer {globex}"}
    async with tail.api.stream(headers=as_acme), tail.api.stream(headers=as_acme):
        third = await tail.api.get("/api/v1/events", headers=as_acme)
        details = quota_refusal(third)
        assert details["limit"] == "live_tails" and details["limit_value"] == 2
        assert details["tenant"] == "acme"
        async with tail.api.stream(headers=as_globex) as theirs:  # globex's count is its own
            assert theirs.response.status == 200
    # The slots are freed once the clients left (an idle tail looks every
    # CLIENT_CHECK_S, long before its 15 s keepalive): acme may open tails again.
    await eventually(
        lambda: tail.api.get("/metrics"),
        until=lambda a: "laneledger_tail_subscribers 0.0" in a.body.decode(),
        what="the tails to end once their clients left",
    )
    async with tail.api.stream(headers=as_acme) as again:
        assert again.response.status == 200

    # An expensive read in flight holds acme's one slot: the next is 429
    # before any work, globex's reads go on.
    with tail.service.limits.reads.slot(Scope("acme")):
        for path in (
            "/api/v1/verify",
            "/api/v1/sessions/s1",
            "/api/v1/lanes/l1/events",
            "/api/v1/sessions/s1/proof",
        ):
            details = quota_refusal(await tail.api.get(path, headers=as_acme))
            assert details["limit"] == "expensive_reads" and details["limit_value"] == 1, path
        assert (await tail.api.get("/api/v1/verify", headers=as_globex)).status == 200
    assert (await tail.api.get("/api/v1/verify", headers=as_acme)).status == 200
    metrics = (await tail.api.get("/metrics")).body.decode()
    assert "laneledger_tail_expensive_reads_in_flight 0.0" in metrics


async def test_a_session_proof_is_streamed_in_pages_and_verifies(ledger, start_tail):
    """More events than one page: the bundle, streamed in several pages, is
    the same document the in-memory bundle is, and verifies offline."""
    tail = await start_tail()
    events = PAGE_EVENTS + 250
    size = await signed_session(ledger, tail, events)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{tail.url}/api/v1/sessions/big/proof") as response:
            assert response.status == 200 and response.headers["Content-Type"] == "application/json"
            assert response.headers.get("Transfer-Encoding") == "chunked"  # never built whole
            body = await response.read()
    bundle = SessionBundle.parse(body)
    assert body == bundle.format()
    async with LogClient(tail.url, timeout_s=5.0) as log_client:  # `laneledger prove --url`'s client
        assert await log_client.session_bundle("big") == body
    checked = verify_session_bundle(body, ledger.signer.verifier(), origin=ORIGIN)
    assert checked.events == events and checked.checkpoint_size == size


async def test_a_session_proof_stops_reading_when_its_client_leaves(ledger, start_tail, monkeypatch, caplog):
    """Pages of 5 events: the client takes the first bytes and leaves; the
    tail reads a few more pages at most, never the whole session, closes the
    pages' iterator, and logs no ERROR (a client leaving is no error)."""
    caplog.set_level(logging.DEBUG, logger="laneledger.tail")
    pages: list[int] = []
    closed: list[bool] = []

    def counted(*args, **kwargs):
        try:
            for chunk in session_bundle_chunks(*args, page_events=5, **kwargs):
                pages.append(len(chunk))
                yield chunk
        finally:
            closed.append(True)

    monkeypatch.setattr(transparency, "session_bundle_chunks", counted)
    tail = await start_tail()
    events = 2000
    await signed_session(ledger, tail, events, text="t" * 1000)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{tail.url}/api/v1/sessions/big/proof") as response:
            assert response.status == 200
            assert await response.content.read(1024)
            response.close()  # the client leaves
        await eventually(
            lambda: metric_value(http, tail.url, "laneledger_tail_expensive_reads_in_flight"),
            until=lambda v: v == 0,
            what="the proof to stop once its client left",
        )
    assert 0 < len(pages) < events // 5, f"{len(pages)} pages read of {events // 5}"
    assert closed == [True]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert tail.service.read_memory.used == 0


async def test_a_session_proof_that_fails_mid_stream_is_a_failed_transfer(ledger, start_tail, monkeypatch):
    """After the headers a failure cannot be a typed error: the connection is
    cut, so no client takes a bundle that merely ends early for a whole one."""

    def failing(*args, **kwargs):
        yield next(session_bundle_chunks(*args, **kwargs))
        raise InternalError("read model read failed: disk I/O error")

    monkeypatch.setattr(transparency, "session_bundle_chunks", failing)
    tail = await start_tail()
    await signed_session(ledger, tail, 3)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{tail.url}/api/v1/sessions/big/proof") as response:
            assert response.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await response.read()
    async with LogClient(tail.url) as log_client:
        with pytest.raises(LedgerUnavailable):
            await log_client.session_bundle("big")


async def test_a_verification_stops_when_its_client_leaves(ledger, start_tail, monkeypatch):
    """One row per reader-thread call: the client leaves while the walk runs,
    and the walk ends at its next page, long before the session's end."""
    calls: list[int] = []
    walk_page = Verifier._walk_page

    def counted(self, *args):
        calls.append(1)
        return walk_page(self, *args)

    monkeypatch.setattr(verify, "WALK_PAGE", 1)
    monkeypatch.setattr(Verifier, "_walk_page", counted)
    tail = await start_tail()
    events = 2000
    await record(ledger.client, "acme", "big", events)
    await wait_applied(tail.service, events)
    async with aiohttp.ClientSession() as http:
        request = asyncio.create_task(http.get(f"{tail.url}/api/v1/verify?session_id=big"))
        await eventually(
            lambda: metric_value(http, tail.url, "laneledger_tail_expensive_reads_in_flight"),
            until=lambda v: v == 1,
            what="the verification to start",
            interval=0.005,
        )
        request.cancel()  # the client leaves, its connection closed
        await asyncio.gather(request, return_exceptions=True)
        await eventually(
            lambda: metric_value(http, tail.url, "laneledger_tail_expensive_reads_in_flight"),
            until=lambda v: v == 0,
            what="the verification to stop once its client left",
        )
    assert 0 < len(calls) < events, f"{len(calls)} pages walked of {events}"


# -- the tail as a process: memory and work stop -------------------------------------------------

SESSION_EVENTS = 6000  # ~1.2 KB each: a ~7 MB session, a ~14 MB bundle
PROOFS, VERIFIES, TAILS = 12, 6, 120
MAX_TAILS, MAX_READS = 160, 8
MiB = 1 << 20
# spec/tail.md, "Limits and memory": per token scope (here one, the open tail),
# open tails × ~3 MiB + expensive reads × ~20 MiB (at most MAX_READS at once).
STATED_BOUND = TAILS * 3 * MiB + MAX_READS * 20 * MiB


async def metric_value(http: aiohttp.ClientSession, url: str, name: str) -> float:
    async with http.get(f"{url}/metrics") as response:
        for line in (await response.text()).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.slow
async def test_many_expensive_reads_and_tails_from_position_one_keep_the_tails_memory_bounded(
    ledger, nats_server, tmp_path: Path
):
    await record(ledger.client, "acme", "big", SESSION_EVENTS, text="t" * 1000)
    size = await ledger.sign()
    tail = await TailProcess(
        nats_server.url,
        tmp_path / "tail",
        "--max-tails-per-token",
        str(MAX_TAILS),
        "--max-reads-per-token",
        str(MAX_READS),
        "--heartbeat-s",
        "0.5",
    ).start()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        await eventually(
            lambda: http.get(f"{tail.url}/api/v1/tlog/checkpoints/{size}"),
            until=lambda r: r.status == 200,
            what="the tail to apply the session and serve its checkpoint",
            timeout=60,
        )
        baseline = tail.rss_bytes()
        peak = baseline
        statuses: list[int] = []
        stop_sampling = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not stop_sampling.is_set():
                peak = max(peak, tail.rss_bytes())
                await asyncio.sleep(0.05)  # the sampling period

        async def leave_half_way(path: str, keep: int) -> None:
            """Read ``keep`` bytes of the answer, slowly, then leave."""
            async with http.get(f"{tail.url}{path}") as response:
                statuses.append(response.status)
                if response.status != 200:
                    assert response.status == 429 and response.headers["Retry-After"] == "1"
                    return
                read = 0
                while read < keep and (chunk := await response.content.read(64 * 1024)):
                    read += len(chunk)
                    await asyncio.sleep(0.01)
                response.close()  # the client leaves mid-answer

        async def verify() -> None:
            async with http.get(f"{tail.url}/api/v1/verify?session_id=big") as response:
                statuses.append(response.status)
                if response.status == 200:
                    assert (await response.json())["intact"] is True

        sampler = asyncio.create_task(sample())
        await asyncio.gather(
            *(leave_half_way("/api/v1/sessions/big/proof", 2 * MiB) for _ in range(PROOFS)),
            *(verify() for _ in range(VERIFIES)),
            *(leave_half_way("/api/v1/events?from_position=0", 512 * 1024) for _ in range(TAILS)),
        )
        stop_sampling.set()
        await sampler

        # Some were refused (more than the token's limits at once), none failed otherwise.
        assert set(statuses) <= {200, 429} and 200 in statuses
        growth = peak - baseline
        print(f"RSS {baseline / MiB:.1f} MiB -> peak {peak / MiB:.1f} MiB (+{growth / MiB:.1f} MiB)")
        assert growth < STATED_BOUND, f"the tail grew by {growth / MiB:.1f} MiB"
        # The work stopped with the clients: no expensive read nor tail left running.
        for name in ("laneledger_tail_expensive_reads_in_flight", "laneledger_tail_subscribers"):
            await eventually(
                lambda name=name: metric_value(http, tail.url, name),
                until=lambda v: v == 0,
                what=f"{name} back to 0 once the clients left",
                timeout=10,
            )
    tail.stop()
