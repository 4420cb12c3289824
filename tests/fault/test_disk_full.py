"""The sequencer's disk fills up under load, then space comes back: it stops
committing with a clear error — an ERROR log line naming SQLite's complaint
and ``/readyz`` 503 — without exiting, acks nothing it did not commit, loses
nothing, and resumes by itself once the disk has room. Then every invariant
holds (``ledger_invariants``).

How the disk gets full: the ledger lives on a small tmpfs mounted for the
test, and the test fills it with a file until the kernel says ENOSPC, so
SQLite's own writes fail with a genuine SQLITE_FULL ("database or disk is
full"); deleting the file is the recovery. (A small batch can still commit
now and then in space a refused write had already allocated: the sequencer
commits what the disk takes and holds the rest.) Why not a read-only
database: the tests run as root (here and in CI), so chmod does not stop
them writing, and a read-only remount is refused ("mount point is busy")
while the sequencer has its files open for writing; a full filesystem is
both real and reversible. Mounting needs CAP_SYS_ADMIN (root in this
container and in CI): where it is refused the test is skipped and says why.

Short form: one full/free cycle. Long form: five. A second, portable test
runs the same handling in-process without a mount: SQLite's own size limit
(``PRAGMA max_page_count`` on the writer's connection) produces the same
SQLITE_FULL."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from pathlib import Path

import aiohttp
import pytest
from fault_harness import FaultRig, fault_timeout, scaled
from polling import eventually
from prometheus_client import CollectorRegistry
from sequencer_process import ledger_last_position as last_position

from laneledger.contract.errors import EntityNotFound, LedgerTimeout
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer
from laneledger.store import LedgerWriter, open_ledger

CYCLES = scaled(1, 5)
DISK_MB = 64
REFUSED = "the ledger database refused a commit"


class SmallDisk:
    """A ``size_mb`` tmpfs mounted at ``path``, and a file to fill it with."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path = Path(path)
        self.size_mb = size_mb
        self.filler = self.path / "filler"
        self.mounted = False

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs", str(self.path)],
                capture_output=True,
                text=True,
                check=False,
            )
            problem = done.stderr.strip() if done.returncode != 0 else ""
        except OSError as exc:  # no mount(8) at all
            problem = str(exc)
        if problem:
            pytest.skip(
                f"cannot mount a tmpfs to fill: {problem} (it takes root with CAP_SYS_ADMIN,"
                " and mount(8): apt-get install mount)"
            )
        self.mounted = True

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False)
            self.mounted = False

    def fill(self) -> int:
        """Write the filler until the filesystem has no byte left; its size."""
        written = 0
        with open(self.filler, "ab", buffering=0) as f:
            for chunk in (1 << 20, 1 << 12, 1):
                block = b"\0" * chunk
                while True:
                    try:
                        written += f.write(block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        return written

    def free(self) -> None:
        self.filler.unlink()

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize


async def readyz(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as resp:
        return resp.status


async def wait_for_status(url: str, status: int, timeout: float) -> None:
    await eventually(
        lambda: readyz(url),
        until=lambda found: found == status,
        what=f"{url}/readyz to answer {status}",
        timeout=timeout,
        interval=0.1,
    )


@fault_timeout
@pytest.mark.slow
async def test_a_full_disk_stops_commits_loudly_and_they_resume_when_it_has_room(
    nats_server, js, tmp_path, request
):
    disk = SmallDisk(tmp_path / "disk", DISK_MB)
    disk.mount()
    try:
        async with FaultRig(nats_server.url, tmp_path, request, db_path=disk.path / "ledger.db") as rig:
            seq = rig.sequencer
            await rig.start_load()
            for _ in range(CYCLES):
                refusals_before = seq.log_text().count(REFUSED)
                disk.fill()
                assert disk.free_bytes() == 0
                # The WAL must grow past its old size before a write fails, so
                # a few more batches may still commit: wait for the refusal.
                await wait_for_status(seq.http_url, 503, timeout=60)
                assert seq.log_text().count(REFUSED) > refusals_before
                assert "database or disk is full" in seq.log_text()
                held_at = last_position(rig.db)
                refusals = seq.log_text().count(REFUSED)
                # The scenario, not a wait: two seconds of load arriving at a full
                # disk, every write refused, and the sequencer must not crash.
                await asyncio.sleep(2.0)
                assert seq.running and seq.starts == 1, "the sequencer exited on a full disk"
                assert seq.log_text().count(REFUSED) > refusals, "it stopped trying"
                # A small batch may still fit in space a refused write had
                # already allocated (a full disk is not all-or-nothing), so
                # the position may creep: what must hold is the final check.
                disk.free()
                await wait_for_status(seq.http_url, 200, timeout=60)
                await rig.wait_for_outcomes(more=40)  # the held requests and new ones commit
                assert last_position(rig.db) > held_at
            assert seq.starts == 1
            summary = await rig.finish(js)
        assert summary["resent"] > 0, "no producer had to resend: the outage was not seen"
        print(f"disk full: {CYCLES} cycles, {summary}")
    finally:
        disk.unmount()


async def test_a_ledger_at_its_size_limit_holds_the_append_until_it_has_room(nats_server, nc, tmp_path):
    conn = open_ledger(tmp_path / "ledger.db")
    registry = CollectorRegistry()
    service = Sequencer(nc, LedgerWriter(conn), SequencerMetrics(registry))
    await service.start()
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=5.0) as client:
            actor = await client.ensure_actor("acme", "agent:tests/full@1", "agent")
            lane = await client.create_lane("acme", "s", "r", "main", actor_id=actor.id)
            await client.append(
                lane,
                0,
                [make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "fits"})],
            )
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow

            big = [
                make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "x" * 900})
                for _ in range(50)
            ]
            handle = await client.submit(lane, 1, big)  # durably accepted...
            with pytest.raises(LedgerTimeout):
                await handle.receipt(2.0)  # ...but not committed, and not answered
            assert not service.accepting and service.ready
            assert "database or disk is full" in str(service.store_error)
            assert registry.get_sample_value("laneledger_sequencer_batch_failures_total") >= 1
            with pytest.raises(EntityNotFound):
                await client.get_receipt(handle.append_id)
            assert last_position(tmp_path / "ledger.db") == 1  # nothing half-written

            conn.execute("PRAGMA max_page_count = 1073741823")  # room again
            receipt = await eventually(  # the held request is redelivered and commits, once
                lambda: client.get_receipt(handle.append_id),
                until=lambda found: found is not None,
                what="the held append to commit",
                timeout=15,
                interval=0.1,
                retry_on=EntityNotFound,
            )
            assert service.accepting
            assert receipt.positions == list(range(2, 52))
            # Resent from another connection, as a producer that gave up would:
            # the first commit's own receipt may still be on its way to this
            # client's inbox, where it would answer a resend from here.
            async with await LedgerClient.connect(nats_server.url, timeout=5.0) as resender:
                again = await resender.append(lane, 1, big, append_id=handle.append_id)
            assert again.replayed and again.positions == receipt.positions
    finally:
        await service.stop()
        conn.close()
