"""Outsiders checking a ledger through its tail (spec/tlog.md, "Witnessing a
ledger", "On the command line"): ``laneledger witness`` cosigns only a tree
that extends the last one it cosigned, and refuses a rewritten and a
truncated history across restarts; ``laneledger prove --url`` fetches and
checks proofs; ``laneledger verify --checkpoint OLD --checkpoint NEW`` checks
that a ledger only grew; a verifier can require k of n witnesses."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import TextResourceContents
from polling import eventually
from tlog_support import start_signing_sequencer

from laneledger.contract.errors import (
    EntityNotFound,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
    Unauthorized,
)
from laneledger.devtools.natsserver import NatsServer
from laneledger.runtime.access import AccessPolicy
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.services.tail.service import TailService, TailSettings
from laneledger.tlog.checkpoint import TreeHead, sign_checkpoint
from laneledger.tlog.client import LogClient
from laneledger.tlog.cosignature import Cosigner
from laneledger.tlog.note import Signer, split_note
from laneledger.tlog.sessionbundle import verify_session_bundle

# Each test starts its own nats-server (NatsServer, not the fixture).
pytestmark = pytest.mark.nats

SCRIPT = Path(sys.executable).with_name("laneledger")
ORIGIN = "ledger.example/acme"
TOKENS = {"acme": "acme-token-0123456789", "globex": "globex-token-0123456789"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


async def acli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, *args)


class Ledger:
    """A ledger of its own: nats-server, a sequencer signing checkpoints
    every 0.2 s, and a tail with tenant tokens accepting ``witnesses``'
    cosignatures."""

    def __init__(self, url: str, db: Path, client: LedgerClient) -> None:
        self.url = url  # its tail
        self.db = db
        self._client = client

    async def append(self, tenant: str, session: str, count: int) -> int:
        """``count`` events on a lane of a new session; then waits until the
        tail serves a checkpoint of every position, and returns that size."""
        actor = await self._client.ensure_actor(tenant, f"agent:{tenant}", "agent")
        lane = await LaneRecorder.open(self._client, tenant, session, "r1", "main", actor_id=actor.id)
        for n in range(count):
            await lane.append([lane.event("stream.text_delta", actor_id=actor.id, payload={"n": n})])
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True) as conn:
            (size,) = conn.execute("SELECT max(position) FROM events").fetchone()
        async with LogClient(self.url) as log:
            await eventually(
                log.checkpoint,
                until=lambda note: TreeHead.of_note(note).size == size,
                retry_on=(LedgerError,),
                what=f"a served checkpoint of size {size}",
            )
        return int(size)


@asynccontextmanager
async def running_ledger(tmp: Path, signer: Signer, witnesses: list[Cosigner] = ()) -> AsyncIterator[Ledger]:
    async with NatsServer(tmp / "nats") as server:
        nc = await nats.connect(server.url)
        sequencer = await start_signing_sequencer(nc, tmp / "ledger.db", signer)
        tail_nc = await nats.connect(server.url)
        tail = TailService(
            tail_nc,
            TailSettings(
                data_dir=tmp / "tail",
                watch_interval_s=0.2,
                access=AccessPolicy.from_tokens(TOKENS),
                tlog_witnesses=tuple(w.verifier() for w in witnesses),
            ),
        )
        port = await tail.start("127.0.0.1", 0)
        try:
            async with await LedgerClient.connect(server.url, timeout=5.0) as client:
                yield Ledger(f"http://127.0.0.1:{port}", tmp / "ledger.db", client)
        finally:
            await tail.stop()
            await tail_nc.close()
            await sequencer.stop()
            await nc.close()


def witness(url: str, signer: Signer, key_file: Path, state: Path) -> subprocess.CompletedProcess[str]:
    return cli(
        "witness",
        "--url",
        url,
        "--log-key",
        signer.verifier().to_text(),
        "--key-file",
        str(key_file),
        "--state",
        str(state),
        "--once",
    )


def key_file(tmp: Path, cosigner: Cosigner) -> Path:
    path = tmp / f"{cosigner.name.replace('/', '_')}.key"
    path.write_text(cosigner.to_text() + "\n")
    return path


@pytest.mark.slow
async def test_a_witness_cosigns_a_growing_ledger_and_refuses_a_rewritten_or_truncated_one(tmp_path):
    signer = Signer.generate(ORIGIN)
    alice, bob = Cosigner.generate("witness.example/alice"), Cosigner.generate("witness.example/bob")
    alice_key, state = key_file(tmp_path, alice), tmp_path / "alice.state"
    note_key = signer.verifier().to_text()

    async with running_ledger(tmp_path / "a", signer, [alice, bob]) as a:
        await a.append("acme", "s1", 6)
        first_size = await a.append("globex", "g1", 4)
        first = await asyncio.to_thread(witness, a.url, signer, alice_key, state)
        assert first.returncode == 0, first.stderr
        assert first.stdout == f"cosigned {ORIGIN} at size {first_size}\n"
        # Nothing new: nothing to do, the tail already serves the cosignature.
        again = await asyncio.to_thread(witness, a.url, signer, alice_key, state)
        assert (again.returncode, again.stdout) == (0, "")
        # Grown: cosigned once the consistency proof from the last size holds.
        size = await a.append("acme", "s2", 3)
        grown = await asyncio.to_thread(witness, a.url, signer, alice_key, state)
        assert grown.stdout == f"cosigned {ORIGIN} at size {size}\n", grown.stderr
        async with LogClient(a.url) as log:
            served = await log.checkpoint()
        assert [s.name for s in split_note(served)[1]] == [ORIGIN, alice.name]
        token = tmp_path / "acme.token"
        token.write_text(TOKENS["acme"])
        # An agent reads the same note over MCP (issue 37): the latest
        # checkpoint with the witness's cosignature, verifiable offline.
        mcp = [sys.executable, "-m", "laneledger.cli", "mcp", "--url", a.url, "--token-file", str(token)]
        server = StdioServerParameters(command=mcp[0], args=mcp[1:], env=dict(os.environ))
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            (note,) = (await session.read_resource("laneledger://acme/log/checkpoint")).contents
        assert isinstance(note, TextResourceContents) and note.text == served

        # k of n: the proof a tenant fetches carries alice's cosignature, not bob's.
        out = tmp_path / "p3.tlog-proof"
        made = await acli(
            "prove", "--url", a.url, "--token-file", str(token), "--position", "3",
            "--note-key", note_key, "-o", str(out),
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert made.stderr.startswith(f"intact: position 3 is in {ORIGIN}'s tree of {size}")
        w = ["--witness", alice.verifier().to_text(), "--witness", bob.verifier().to_text()]
        one_of_two = cli("verify", str(out), "--note-key", note_key, *w, "--quorum", "1")
        assert one_of_two.returncode == 0, one_of_two.stdout + one_of_two.stderr
        assert one_of_two.stdout.endswith(f"; cosigned by {alice.name}\n")
        two_of_two = cli("verify", str(out), "--note-key", note_key, *w, "--quorum", "2")
        assert two_of_two.returncode == 1 and "1 of the 2 witness cosignatures" in two_of_two.stdout
    vouched = size

    # The same log key, another history of more positions: a fork.
    async with running_ledger(tmp_path / "b", signer, [alice]) as b:
        await b.append("acme", "s1", 5)
        forked_size = await b.append("acme", "other", 12)
        assert forked_size > vouched
        forked = await asyncio.to_thread(witness, b.url, signer, alice_key, state)
        assert forked.returncode == 1, forked.stderr
        assert forked.stdout.startswith(f"REFUSED {ORIGIN} at size {forked_size}: ")
        async with LogClient(b.url) as log:
            assert alice.name not in [s.name for s in split_note(await log.checkpoint())[1]]

    # The first history cut short: a truncation, refused after the restarts above.
    async with running_ledger(tmp_path / "c", signer, [alice]) as c:
        short = await c.append("acme", "s1", 2)
        assert short < vouched
        truncated = await asyncio.to_thread(witness, c.url, signer, alice_key, state)
        assert truncated.returncode == 1
        assert truncated.stdout.startswith(f"REFUSED {ORIGIN} at size {short}: ")
    assert TreeHead.of_note(state.read_text()).size == vouched  # still the tree it vouched for


async def test_verify_checkpoints_accepts_a_ledger_that_grew_and_refuses_one_that_did_not(tmp_path):
    signer = Signer.generate(ORIGIN)
    note_key = signer.verifier().to_text()
    older, newer, other = tmp_path / "older", tmp_path / "newer", tmp_path / "other"
    async with running_ledger(tmp_path / "a", signer) as a:
        old_size = await a.append("acme", "s1", 5)
        async with LogClient(a.url) as log:
            older.write_text(await log.checkpoint())
        new_size = await a.append("globex", "g1", 7)
        async with LogClient(a.url) as log:
            newer.write_text(await log.checkpoint())

        def check(first: Path, second: Path) -> subprocess.CompletedProcess[str]:
            return cli(
                "verify", "--checkpoint", str(first), "--checkpoint", str(second),
                "--note-key", note_key, "--url", a.url,
            )  # fmt: skip

        grew = await asyncio.to_thread(check, older, newer)
        assert grew.returncode == 0, grew.stdout + grew.stderr
        assert grew.stdout == f"consistent: {ORIGIN}'s tree of {new_size} extends its tree of {old_size}\n"
        shrank = await asyncio.to_thread(check, newer, older)
        assert shrank.returncode == 1 and shrank.stdout.startswith("FAIL ")

        # Another history under the same key, longer than the older one: not its extension.
        async with running_ledger(tmp_path / "b", signer) as b:
            assert await b.append("acme", "s1", 8) > old_size
            async with LogClient(b.url) as log:
                other.write_text(await log.checkpoint())
        forked = await asyncio.to_thread(check, older, other)
        assert forked.returncode == 1 and forked.stdout.startswith("FAIL "), forked.stdout + forked.stderr

        # A checkpoint the log did not sign is refused before any proof is asked.
        impostor = Signer.generate(ORIGIN)
        forged = tmp_path / "forged"
        forged.write_text(sign_checkpoint(TreeHead.of_note(newer.read_text()), impostor))
        unsigned = await asyncio.to_thread(check, older, forged)
        assert unsigned.returncode == 1 and "no trusted key signed" in unsigned.stdout


async def test_the_client_names_what_the_tail_refused(tmp_path):
    signer = Signer.generate(ORIGIN)
    async with running_ledger(tmp_path / "a", signer) as a:
        size = await a.append("acme", "s1", 3)
        async with LogClient(a.url) as log:
            with pytest.raises(InvalidRequest) as beyond:
                await log.consistency_proof(1, size + 1)
            assert beyond.value.details.get("parameter") == "new"
            with pytest.raises(Unauthorized):
                await log.inclusion_bundle(1)  # the proof routes want a token
        async with LogClient(a.url, headers={"Authorization": f"Bearer {TOKENS['globex']}"}) as log:
            with pytest.raises(EntityNotFound):
                await log.inclusion_bundle(2)  # acme's event, as if there were none
        # Any string is an id: one with '/', '?', '#' and a space is sent as one path segment.
        odd = "runs/2026 ?#1"
        size = await a.append("acme", odd, 2)
        async with LogClient(a.url, headers={"Authorization": f"Bearer {TOKENS['acme']}"}) as log:
            bundle = await log.session_bundle(odd)
        verified = verify_session_bundle(bundle, signer.verifier(), origin=ORIGIN)
        assert (verified.events, verified.checkpoint_size) == (2, size)
    async with LogClient(a.url, timeout_s=2.0) as gone:
        with pytest.raises(LedgerUnavailable):
            await gone.checkpoint()
