"""The lease is renewed where a busy event loop cannot starve it
(spec/replication.md, "The lease"): the active sequencer's event loop held
in CPU work for three lease TTLs does not lose it, and the standby does not
take over; requests sent meanwhile are answered once the loop is free. And
the issue's attack itself, ~800 KB of what made redaction quadratic as an
append's payload, costs no failover; as an actor's display name it is
refused on decoding (names are bounded, spec/wire.md "Field bounds")."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import nats
import pytest
from nats.js.errors import KeyNotFoundError
from polling import eventually
from raw_appends import Inbox
from test_standby import active_and_standby, role, sequencer, shows

from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import AppendCommitted
from laneledger.contract.redaction import DEFAULT_REDACTOR
from laneledger.contract.subjects import Subjects
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.lease import WEDGED_EXIT_STATUS, Lease, LeaseSettings, LeaseThread

BUSY_S = 3.0  # three times the TTL of LEASE (1 s)


@pytest.mark.slow
async def test_an_active_sequencer_with_a_busy_event_loop_keeps_its_lease(
    nats_server, js, tmp_path: Path, request: pytest.FixtureRequest
):
    env = {"LANELEDGER_TEST_BUSY_S": str(BUSY_S)}
    first = sequencer(nats_server.url, tmp_path, "first", request, module="busy_loop_sequencer", env=env)
    second = sequencer(nats_server.url, tmp_path, "second", request)
    async with active_and_standby(first, second, "agent:busy@1", 3) as producer:
        assert first.pid is not None
        os.kill(first.pid, signal.SIGUSR1)
        await eventually(lambda: "busy for" in first.log_text(), what="the first one's loop busy")
        sent = asyncio.create_task(producer.run(2))  # waits for the loop, and is answered by it
        await asyncio.sleep(BUSY_S + 1.0)
        assert await role(second) == "standby"
        await eventually(lambda: "busy no more" in first.log_text(), what="the first one's loop free")
        await sent
        await shows(first, active=1, holder=first, failovers=0, lease_lost=0)
        await shows(second, active=0, holder=first, failovers=0, lease_lost=0)
        assert "standing down" not in first.log_text()
        assert "took the lease over" not in second.log_text()
    positions = [p for r in producer.receipts for p in r.positions]
    assert positions == list(range(1, 6))
    producer.check_held_by(first.db_path, second.db_path)


# What was quadratic before: PEM BEGIN markers without END, JWT-like chains,
# ``password=`` floods (the issue: 145 KB held the event loop 6 s).
UNITS = ("-----BEGIN PRIVATE KEY-----\n", "eyJ-", "eyJabcde.eyJ-", "password= \t")
ADVERSARIAL = "".join((unit * (200_000 // len(unit) + 1))[:200_000] for unit in UNITS)


async def test_adversarial_appends_and_display_names_cost_no_failover(
    nats_server, js, tmp_path: Path, request: pytest.FixtureRequest
):
    first = sequencer(nats_server.url, tmp_path, "first", request)
    second = sequencer(nats_server.url, tmp_path, "second", request)
    first.start()
    second.start()
    nc = await nats.connect(nats_server.url)
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=10.0) as client, Inbox(nc) as inbox:
            # A display name is bounded (1024 characters, spec/wire.md "Field
            # bounds"): the attack as a name is refused on decoding, naming it.
            with pytest.raises(InvalidRequest, match=r"\$\.display_name"):
                await client.ensure_actor("acme", "agent:adversary@1", "agent", display_name=ADVERSARIAL)
            # The largest adversarial command the field bounds let through
            # (spec/wire.md: a display name of 1024 characters, 64 KiB of attributes).
            name, note = ADVERSARIAL[400_000:401_024], ADVERSARIAL[450_000:500_000]
            actor = await client.ensure_actor(
                "acme", "agent:adversary@1", "agent", display_name=name, attributes={"note": note}
            )
            assert actor.display_name == DEFAULT_REDACTOR.redact_text(name) != name
            assert actor.attributes["note"] == DEFAULT_REDACTOR.redact_text(note) != note
            lane = await client.create_lane("acme", "s", "r", "main", actor_id=actor.id)
            for seq in range(3):  # three, as in the issue: three failovers then
                event = {
                    **make_event(lane.id, "ext.acme.note", actor_id=actor.id),
                    "payload": {"t": ADVERSARIAL},
                }
                body = {
                    "lane_id": lane.id,
                    "expected_last_seq": seq,
                    "append_id": f"adv-{seq}",
                    "events": [event],
                }
                receipt = await inbox.ask(Subjects().append("acme", lane.id), json.dumps(body).encode())
                assert isinstance(receipt, AppendCommitted) and receipt.last_seq == seq + 1
            await shows(first, active=1, holder=first, failovers=0, lease_lost=0)
            await shows(second, active=0, holder=first, failovers=0, lease_lost=0)
    finally:
        await nc.close()
        first.stop()
        second.stop()


async def test_the_lease_thread_stops_renewing_once_the_loop_stalls_for_good(nats_server):
    """A loop that does not come round for ``stall_s`` (wedged, not busy)
    must not hold the lease for good: the thread stops renewing, says why,
    and the lease expires for another to take; ``wedged_s`` later, still
    not come round, the process is declared wedged (``on_wedged``)."""
    settings = LeaseSettings(ttl_s=1.0, renew_s=0.1, try_s=0.1, stall_s=0.6, wedged_s=0.6)
    declared: list[str] = []

    def lease(holder: str) -> LeaseThread:
        return LeaseThread(
            lambda: nats.connect(nats_server.url),
            "TEST_LEASE",
            holder,
            settings,
            1,
            on_wedged=declared.append,
        )

    wedged, other = lease("wedged"), lease("other")
    try:
        await wedged.open()
        await other.open()
        assert await wedged.acquire()
        await wedged.keep()
        for _ in range(12):  # the loop comes round: renewed past the TTL
            wedged.beat()
            await asyncio.sleep(0.1)
        assert wedged.lost is None and not await other.acquire()
        lost = await eventually(
            lambda: wedged.lost, until=lambda why: why is not None, what="renewing stopped"
        )
        assert "has not come round" in lost
        assert await eventually(other.acquire, until=bool, what="the other taking the expired lease")
        [why] = await eventually(lambda: list(declared), until=bool, what="the loop declared wedged")
        assert "has not come round" in why
    finally:
        await wedged.release()
        await other.release()


async def test_a_loop_that_comes_round_again_is_not_declared_wedged(nats_server):
    """A paused process (SIGSTOP, a VM frozen) stalls every thread alike: its
    loop comes round once it runs again, stands down, and lives on."""
    settings = LeaseSettings(ttl_s=1.0, renew_s=0.1, try_s=0.1, stall_s=0.4, wedged_s=0.8)
    declared: list[str] = []
    paused = LeaseThread(
        lambda: nats.connect(nats_server.url), "TEST_LEASE", "paused", settings, 1, on_wedged=declared.append
    )
    try:
        await paused.open()
        assert await paused.acquire()
        await paused.keep()
        await eventually(lambda: paused.lost, until=lambda why: why is not None, what="renewing stopped")
        paused.beat()  # it runs again
        await asyncio.sleep(settings.wedged_s + 0.5)
        assert declared == []
    finally:
        await paused.release()


WEDGE = """
import asyncio, sys, time
import nats
from laneledger.services.sequencer.lease import WEDGED_EXIT_STATUS, Lease, LeaseSettings, LeaseThread

async def main():
    settings = LeaseSettings(ttl_s=1.0, renew_s=0.1, try_s=0.1, stall_s=0.3, wedged_s=0.3)
    lease = LeaseThread(lambda: nats.connect(sys.argv[1]), "TEST_LEASE", "wedged", settings, 1)
    await lease.open()
    assert await lease.acquire()
    await lease.keep()
    print("holding", flush=True)
    time.sleep(30)  # the event loop wedged, as in a deadlock

asyncio.run(main())
"""


async def test_a_wedged_process_writes_its_stacks_and_exits(nats_server):
    """The default ``on_wedged`` ends the process with status 70 after
    writing every thread's stack to stderr: its supervisor restarts it, and
    the stacks say where it was stuck (here: ``time.sleep`` on the loop)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WEDGE,
        nats_server.url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == WEDGED_EXIT_STATUS, (out, err)
    assert out.decode() == "holding\n"
    stacks = err.decode()
    assert "the process is wedged" in stacks
    assert 'File "<string>", line 13 in main' in stacks  # the loop's thread, in time.sleep
    assert "_watch_for_wedge" in stacks  # the lease thread that declared it


async def test_a_lease_that_expires_while_it_is_being_created_is_a_miss_not_an_error(
    nats_server, monkeypatch
):
    """nats-py's ``create``, refused because the key exists, reads the key
    again and raises ``KeyNotFoundError`` when it expired in between (its
    TTL): that is "not taken this time", as any other miss, never an error
    (a make test run failed on it)."""
    settings = LeaseSettings(ttl_s=1.0, renew_s=0.1, try_s=0.1)
    nc = await nats.connect(nats_server.url)
    try:
        lease = Lease(nc.jetstream(), "TEST_LEASE", "standby", settings, 1)
        await lease.open()

        async def expired_in_between(key: str, value: bytes) -> int:
            raise KeyNotFoundError

        monkeypatch.setattr(lease.kv, "create", expired_in_between)
        assert await lease.acquire() is False
    finally:
        await nc.close()


async def test_release_ends_though_a_renewal_swallows_its_cancel(nats_server):
    """nats-py's requests use ``asyncio.wait_for``, which in Python 3.11
    swallows a cancel that arrives as the reply does: the renewal returns as
    if not cancelled and the renew loop goes on. Giving the lease up must end
    all the same (a clean stop of the sequencer hung here for good, in a CI
    run). Here every renewal swallows its cancel, the worst case."""
    settings = LeaseSettings(ttl_s=1.0, renew_s=0.05, try_s=0.1)
    holder = LeaseThread(lambda: nats.connect(nats_server.url), "TEST_LEASE", "holder", settings, 1)
    renewals: list[bool] = []  # True: its cancel was swallowed

    async def renew_swallowing_cancel() -> bool:
        try:
            await asyncio.sleep(1.0)
            renewals.append(False)
        except asyncio.CancelledError:
            renewals.append(True)  # as wait_for does when the reply came with it
        return True

    await holder.open()
    assert await holder.acquire()
    assert holder._lease is not None
    holder._lease.renew = renew_swallowing_cancel  # type: ignore[method-assign]
    await holder.keep()
    await asyncio.sleep(0.3)  # renewing: inside a renewal from 0.05 s on
    async with asyncio.timeout(settings.ttl_s + 2):
        await holder.release()
    assert renewals and renewals[0] is True  # the first cancel was swallowed, and it ended anyway
