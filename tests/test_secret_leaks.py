"""No secret survives: a corpus of secret-shaped values (tests/secret_corpus.py)
is published through every way into the ledger — a raw NATS publish to the
append subject (no SDK), the SDK (make_event, and hand-built events), the
tail's Korg HTTP endpoint, and inside values big enough to become content
references — and afterwards none of it is in any file under the test's
directory (the sequencer's and the tail's SQLite files with their WAL, the
nats-server's JetStream store with the blob bucket) nor in any HTTP response
the test received (spec/content.md)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import nats
import pytest
from polling import eventually
from raw_appends import Inbox
from secret_corpus import KEYED_SECRETS, SHAPED_SECRETS, all_secret_texts, secret_payload
from tail_support import wait_applied

from laneledger.contract.contentref import refs_in
from laneledger.contract.model import AppendCommitted, Receipt
from laneledger.contract.signing import generate_private_key, sign_event
from laneledger.contract.subjects import Subjects
from laneledger.sdk.client import LaneRecorder, make_event

pytestmark = pytest.mark.timeout(90)

TAGS = (
    "via-raw-nats",
    "via-raw-nats-big",
    "via-make-event",
    "via-hand-built",
    "via-sdk-big",
    "via-korg-http",
)


async def raw_append(url: str, subject: str, body: dict) -> Receipt:
    """``body`` published straight to JetStream (no SDK), and its receipt."""
    nc = await nats.connect(url)
    try:
        async with Inbox(nc) as inbox:
            return await inbox.ask(subject, json.dumps(body).encode())
    finally:
        await nc.close()


def files_holding(root: Path, needles: list[bytes]) -> dict[str, list[str]]:
    """``{needle: [files holding it]}`` over every file under ``root``."""
    found: dict[str, list[str]] = {}
    for path in root.rglob("*"):
        if path.is_file():
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # gone since listed (nats-server's *.blk.tmp while it compacts)
                continue
            for needle in needles:
                if needle in data:
                    found.setdefault(needle.decode(errors="replace"), []).append(str(path.relative_to(root)))
    return found


async def test_no_secret_reaches_a_file_or_a_response(
    nats_server, sequencer, client, actor, start_tail, tmp_path
):
    tail = await start_tail()
    bodies: list[bytes] = []  # every HTTP response body the test got
    big_tail = "build log line\n" * 120  # makes a value over 1 KiB

    # 1. A raw NATS publish: the sequencer is the only one to redact.
    lane = await client.create_lane("acme", "s1", "r1", "raw", actor_id=actor.id)
    raw_events = [
        {
            **make_event(lane.id, "ext.acme.leak", actor_id=actor.id),
            "payload": secret_payload("via-raw-nats"),
            "extensions": {"acme.trace": {"headers": dict(KEYED_SECRETS[7:8])}},
        },
        {
            **make_event(lane.id, "ext.acme.leak", actor_id=actor.id),
            "payload": {"stdout": big_tail + json.dumps(secret_payload("via-raw-nats-big"))},
        },
    ]
    body = {"lane_id": lane.id, "expected_last_seq": 0, "append_id": "leak-raw", "events": raw_events}
    raw_receipt = await raw_append(nats_server.url, Subjects().append("acme", lane.id), body)
    assert isinstance(raw_receipt, AppendCommitted), raw_receipt

    # 2. The SDK: make_event, a hand-built event, and secrets inside big values.
    recorder = await LaneRecorder.open(client, "acme", "s1", "r1", "sdk", actor_id=actor.id)
    await recorder.append(
        [recorder.event("ext.acme.leak", actor_id=actor.id, payload=secret_payload("via-make-event"))]
    )
    # Straight through LedgerClient.append: its submit redacts.
    await client.append(
        recorder.lane,
        recorder.head,
        [
            {
                **make_event(recorder.lane.id, "ext.acme.leak", actor_id=actor.id),
                "payload": secret_payload("via-hand-built"),
            }
        ],
    )
    await recorder.reload()
    big = recorder.event(
        "ext.acme.leak",
        actor_id=actor.id,
        payload={
            "stdout": big_tail + json.dumps(secret_payload("via-sdk-big")),
            "env": {**dict(KEYED_SECRETS), "padding": "p" * 1100},
            "args": {"file_path": "deploy/.env", "content": big_tail + SHAPED_SECRETS[0][1]},
        },
    )
    last = await recorder.append([big])

    # 3. Korg's HTTP append (through the SDK inside the ingest service).
    korg = await tail.ingest.post(
        "/api/agent/tool-call",
        json_body={
            "source_agent": "agent:leaky@1.0",
            "tool_name": "Bash",
            "args": secret_payload("via-korg-http"),
            "result": {"stdout": big_tail + json.dumps(secret_payload("via-korg-http"))},
            "success": True,
            "duration_ms": 12,
        },
    )
    assert korg.status == 200, korg.body
    bodies.append(korg.body)
    last_position = max(korg.json()["seq_id"], last.positions[-1])
    await wait_applied(tail.service, last_position)

    # Every read surface that returns event content, and every referenced blob.
    refs: list[tuple[str, str]] = []
    for position in range(1, last_position + 1):
        answer = await tail.api.get(f"/api/v1/events/{position}")
        assert answer.status == 200
        bodies.append(answer.body)
        event = json.loads(answer.body)
        refs += [(event["tenant"], ref) for ref, _ in refs_in(event["payload"])]
    for lane_id in (lane.id, recorder.lane.id):
        bodies.append((await tail.api.get(f"/api/v1/lanes/{lane_id}/events")).body)
    for path in ("/api/v1/sessions/s1", "/api/v1/sessions/s1/runs/r1", "/api/journal", "/api/v1/verify"):
        answer = await tail.api.get(path)
        assert answer.status == 200, (path, answer.body[:200])
        bodies.append(answer.body)
    assert len({r for _, r in refs}) >= 4  # the big values did become references
    for tenant, ref in refs:
        blob = await tail.api.get(f"/api/v1/blobs/{ref}", params={"tenant": tenant})
        assert blob.status == 200
        bodies.append(blob.body)
    assert any(b"[REDACTED:" in b for b in bodies[-len(refs) :])  # blobs were redacted, not lost

    secrets = [s.encode() for s in all_secret_texts()]
    # The search reads what it should: the events' tags are there (each path
    # wrote), so only the secrets are missing.
    answered = b"".join(bodies)
    for tag in TAGS:
        assert tag.encode() in answered, tag
    assert {s.decode() for s in secrets if s in answered} == set()

    # The files: the SQLite ledger and read model, and the JetStream store
    # (streams and the blob bucket). nats-server writes its store a little
    # after a publish: wait until the committed events' tags are on disk.
    def tags_in_the_store() -> set[str]:
        on_disk = files_holding(tmp_path, [t.encode() for t in TAGS])
        return {t for t, files in on_disk.items() if any(f.startswith("nats") for f in files)}

    await eventually(
        tags_in_the_store,
        until=lambda found: found == set(TAGS),
        what="every tag in nats-server's store on disk",
        timeout=15,
        interval=0.2,
    )
    # Raw publishes are never externalized (the sequencer does not): inline in SQLite.
    in_ledger = files_holding(tmp_path, [b"via-raw-nats", b"via-raw-nats-big", b"[REDACTED:secret_key]"])
    assert all(any("ledger.db" in f for f in files) for files in in_ledger.values())
    assert len(in_ledger) == 3
    assert files_holding(tmp_path, secrets) == {}

    # The sequencer redacted the raw publish only: SDK producers redact themselves.
    registry = sequencer._metrics.registry

    def redactions(rule: str) -> float:
        return registry.get_sample_value("laneledger_sequencer_redactions_total", {"rule": rule}) or 0

    assert redactions("secret_key") == len(KEYED_SECRETS) + 1  # + the extension's header
    assert redactions("pem_private_key") == 2 and redactions("github_token") == 2


async def test_a_configured_pattern_is_redacted_by_the_sequencer(nats_server, tmp_path):
    """``--redact-patterns`` reaches the sequencer's redactor (raw publish)."""
    from prometheus_client import CollectorRegistry

    from laneledger.contract.redaction import Redactor
    from laneledger.sdk.client import LedgerClient
    from laneledger.services.sequencer.metrics import SequencerMetrics
    from laneledger.services.sequencer.service import Sequencer, SequencerSettings
    from laneledger.store import LedgerWriter, open_ledger

    nc = await nats.connect(nats_server.url)
    writer = LedgerWriter(open_ledger(tmp_path / "ledger.db"))
    service = Sequencer(
        nc,
        writer,
        SequencerMetrics(CollectorRegistry()),
        SequencerSettings(redactor=Redactor.from_config('{"acme_badge": "BADGE-[0-9]{6}"}', "pin")),
    )
    await service.start()
    client = await LedgerClient.connect(
        nats_server.url, timeout=5.0, redactor=Redactor()
    )  # this producer knows no extras
    try:
        actor = await client.ensure_actor("acme", "agent:cfg@1", "agent")
        lane = await client.create_lane("acme", "s1", "r1", "cfg", actor_id=actor.id)
        event = make_event(
            lane.id, "ext.acme.x", actor_id=actor.id, payload={"note": "badge BADGE-123456 ok", "pin": "4321"}
        )
        assert event["payload"]["pin"] == "4321"  # the default redactor does not know "pin"
        receipt = await client.append(lane, 0, [event])
        page = await client.load_lane(lane.id)
        assert msgspec.to_builtins(page.events[0])["payload"] == {
            "note": "badge [REDACTED:acme_badge] ok",
            "pin": "[REDACTED:secret_key]",
        }
        assert receipt.first_seq == 1
    finally:
        await client.close()
        await service.stop()
        await nc.close()


async def test_a_request_that_held_secrets_is_erased_from_the_append_stream(nc, tmp_path):
    """An ack only marks a work-queue message removed: while an earlier request
    is still pending (a batch handed back for redelivery), the acked one's
    bytes stay in the stream's block file. The sequencer erases a committed
    request that held secrets before it acks it (spec/content.md)."""
    from prometheus_client import CollectorRegistry

    from laneledger.services.sequencer.metrics import SequencerMetrics
    from laneledger.services.sequencer.service import Sequencer
    from laneledger.services.sequencer.streams import SEQUENCER_CONSUMER
    from laneledger.store import LedgerWriter, open_ledger

    service = Sequencer(
        nc, LedgerWriter(open_ledger(tmp_path / "ledger.db")), SequencerMetrics(CollectorRegistry())
    )
    await service.start()  # creates LEDGER_APPEND and its consumer
    await service.stop()
    js = nc.jetstream()
    secret = SHAPED_SECRETS[4][1]  # a GitHub token
    for body in (b"pending-first", f"holds {secret}".encode(), b"pending-last"):
        await js.publish(Subjects().append("acme", "lane"), body)
    pull = await js.pull_subscribe_bind(SEQUENCER_CONSUMER, Subjects().append_stream)
    _, held, _ = await pull.fetch(3, timeout=5)
    await service._scrub([held])
    await held.ack_sync()
    await eventually(
        lambda: files_holding(tmp_path / "nats", [b"pending-last"]),
        what="the pending requests to reach the disk",
        timeout=15,
        interval=0.1,
    )
    assert files_holding(tmp_path / "nats", [secret.encode()]) == {}
    assert files_holding(tmp_path / "nats", [b"pending-first"])  # the others are untouched


async def test_a_signed_event_holding_a_secret_is_refused_not_stored(
    nats_server, sequencer, client, tmp_path
):
    """The sequencer redacts before it checks signatures: a signature over a
    secret does not cover the redacted event, so the event is refused, and
    the secret is stored nowhere (spec/content.md, "Where it happens")."""
    key = generate_private_key()
    signer = await client.ensure_actor("acme", "agent:signs-secrets@1", "agent", public_key=key)
    lane = await client.create_lane("acme", "s1", "r1", "signed", actor_id=signer.id)
    secret = SHAPED_SECRETS[1][1]
    event = sign_event(
        {**make_event(lane.id, "ext.acme.x", actor_id=signer.id), "payload": {"log": f"using {secret}"}}, key
    )
    body = {"lane_id": lane.id, "expected_last_seq": 0, "append_id": "signed-secret", "events": [event]}
    refused = await raw_append(nats_server.url, Subjects().append("acme", lane.id), body)
    assert refused.error.code == "invalid_signature" and refused.error.details["reason"] == "forged"
    assert secret not in json.dumps(msgspec.to_builtins(refused))
    assert (await client.get_lane(lane.id)).last_seq == 0
    assert files_holding(tmp_path, [secret.encode()]) == {}


SHAPED = SHAPED_SECRETS[3][1]  # a Stripe key: secret by its shape wherever it is


async def raw_request(url: str, subject: str, body: dict) -> dict:
    """A request published with plain nats-py (no SDK), and its reply."""
    nc = await nats.connect(url)
    try:
        reply = await nc.request(subject, msgspec.json.encode(body), timeout=10)
        return dict(msgspec.json.decode(reply.data))
    finally:
        await nc.close()


async def test_no_secret_in_any_producer_supplied_field_reaches_a_file(
    nats_server, sequencer, client, actor, checkpoint_service, checkpoints, tmp_path
):
    """Besides payloads: actor display names and attributes, checkpoint state
    inline and spilled to an artifact are redacted (by the SDK, and by the
    services for producers without it); identifiers — actor keys, lane and
    action names, event ids and types, checkpoint keys — cannot be, and are
    refused with a typed error. Then no file under the test's directory (every
    SQLite file with its WAL, the JetStream store) holds any of the corpus."""
    from laneledger.contract.errors import InvalidRequest

    corpus = secret_payload("via-producer-fields")
    # Actors, through the SDK and raw (the sequencer redacts for the latter).
    await client.ensure_actor("acme", "agent:tests/leaky@1", "agent", display_name=SHAPED, attributes=corpus)
    raw_actor = await raw_request(
        nats_server.url,
        "ledger.cmd.ensure_actor",
        {
            "op": "ensure_actor",
            "tenant": "acme",
            "key": "agent:tests/raw@1",
            "kind": "agent",
            "display_name": f"owner token {SHAPED}",
            "attributes": corpus,
        },
    )
    assert raw_actor["status"] == "ok", raw_actor
    # Identifiers are refused, by the SDK before sending and by the sequencer.
    for call in (
        lambda: client.ensure_actor("acme", f"agent:{SHAPED}@1", "agent"),
        lambda: client.create_lane("acme", "s1", "r1", f"lane-{SHAPED}", actor_id=actor.id),
        lambda: client.create_lane("acme", f"session {SHAPED}", "r1", "main", actor_id=actor.id),
    ):
        with pytest.raises(InvalidRequest, match="secret-shaped"):
            await call()
    refused_lane = await raw_request(
        nats_server.url,
        "ledger.cmd.create_lane",
        {"op": "create_lane", "tenant": "acme", "session_id": "s1", "run_id": "r1", "name": SHAPED},
    )
    assert (
        refused_lane["error"]["code"] == "invalid_request"
        and refused_lane["error"]["details"]["path"] == "$.name"
    )
    lane = await LaneRecorder.open(client, "acme", "s1", "r1", "main", actor_id=actor.id)
    bad_event = {**make_event(lane.lane.id, "ext.acme.leak", actor_id=actor.id), "subject_id": SHAPED}
    receipt = await raw_append(
        nats_server.url,
        Subjects().append("acme", lane.lane.id),
        {"lane_id": lane.lane.id, "expected_last_seq": 0, "append_id": "refused-1", "events": [bad_event]},
    )
    assert not isinstance(receipt, AppendCommitted)
    assert (
        receipt.error.code == "invalid_request" and receipt.error.details["path"] == "$.events[0].subject_id"
    )

    # Checkpoint state: inline and spilled (the SDK redacts before either), and
    # inline from a producer without the SDK (the service redacts).
    await checkpoints.save("k-inline", expected_revision=0, format="application/json", state=corpus)
    big = {**corpus, "log": "line of build output\n" * 400}  # over the 4 KiB inline limit
    spilled = await checkpoints.save("k-spilled", expected_revision=0, format="application/json", state=big)
    assert spilled.artifact is not None
    raw_saved = await raw_request(
        nats_server.url,
        "ledger.checkpoint.save",
        {
            "op": "save",
            "expected_revision": 0,
            "checkpoint": {"id": "raw-ckpt-1", "key": "k-raw", "format": "application/json", "state": corpus},
        },
    )
    assert raw_saved["status"] == "ok", raw_saved
    with pytest.raises(InvalidRequest, match="secret-shaped"):
        await checkpoints.save(f"k-{SHAPED}", expected_revision=0, format="application/json", state={})

    await client.nc.flush()
    await checkpoint_service._nc.flush()
    leaks = files_holding(tmp_path, [s.encode() for s in all_secret_texts()])
    assert leaks == {}, leaks


async def test_a_json_artifact_holding_a_secret_is_refused(
    nats_server, client, checkpoint_service, checkpoints
):
    """A producer that uploads a JSON artifact itself, unredacted: the save
    that references it is refused (an artifact is content-addressed and
    immutable, so it cannot be redacted)."""
    from laneledger.contract.errors import InvalidRequest
    from laneledger.contract.model import ProposedCheckpoint, SaveCheckpoint

    data = msgspec.json.encode({"note": f"deploy with {SHAPED}"})
    ref = await checkpoints.put_artifact(data, "application/json")  # put_artifact uploads as given
    proposal = ProposedCheckpoint(id="ckpt-art-1", key="k-art", format="application/json", artifact=ref)
    with pytest.raises(InvalidRequest, match="secret-shaped") as refused:
        await checkpoints._request(SaveCheckpoint(expected_revision=0, checkpoint=proposal), dict)
    assert refused.value.details["sha256"] == ref.sha256
    # The SDK's own path redacts JSON data before uploading it: that save goes through.
    saved = await checkpoints.save(
        "k-art", expected_revision=0, format="application/json", data=data, media_type="application/json"
    )
    assert saved.artifact is not None and saved.artifact.sha256 != ref.sha256


async def test_a_refused_request_leaves_no_copy_in_the_append_streams_files(nats_server, nc, tmp_path):
    """A request the sequencer refuses — for a secret-shaped identifier, or
    any other reason, malformed JSON included — is erased from its append
    stream before it is acked, as a committed one holding a secret is. An
    ack alone would leave its bytes in the block file while requests behind
    it wait in the stream (here: acme's rate lets one through every 5 s), so
    the raw bytes of the nats-server's store are searched for them then."""
    from ledger_fixtures import start_sequencer

    from laneledger.runtime.tenants import parse_tenants
    from laneledger.sdk.client import LedgerClient
    from laneledger.services.sequencer.service import SequencerSettings

    tenants = parse_tenants("[tenants.acme]\nappend_rate = 0.2\nappend_burst = 3\n")
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", SequencerSettings(tenants=tenants))
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=10.0, tenant_inboxes=True) as client:
            actor = await client.ensure_actor("acme", "agent:refused@1", "agent")
            lane = await client.create_lane("acme", "s1", "r1", "refused", actor_id=actor.id)
        subject = Subjects().append("acme", lane.id)

        def request(append_id: str, expected: int = 0, **fields) -> bytes:
            event = {**make_event(lane.id, "ext.acme.x", actor_id=actor.id), **fields}
            body = {
                "lane_id": lane.id,
                "expected_last_seq": expected,
                "append_id": append_id,
                "events": [event],
            }
            return json.dumps(body).encode()

        in_id, in_junk, in_conflict = (SHAPED_SECRETS[4][1], SHAPED_SECRETS[3][1], SHAPED_SECRETS[7][1])
        async with Inbox(nc, tenant="acme") as inbox:
            await inbox.send(subject, request("r-1", subject_id=in_id))
            await inbox.send(subject, f'{{"lane_id": "{in_junk}", '.encode())  # not JSON
            await inbox.send(subject, request("r-3", expected=7, payload={"x": in_conflict}))
            for n in range(3):  # waiting behind them, at acme's rate
                await inbox.send(subject, request(f"pending-{n}", payload={"x": f"pending-{n}"}), reply=False)
            refusals = {(await inbox.next()).error.code for _ in range(3)}
        assert refusals == {"invalid_request", "malformed_message", "lane_conflict"}
        store = tmp_path / "nats"
        await eventually(
            lambda: files_holding(store, [b"pending-2"]),
            what="the waiting requests' bytes to reach the stream's block file",
            timeout=4,
            interval=0.05,
        )
        assert files_holding(store, [s.encode() for s in (in_id, in_junk, in_conflict)]) == {}
    finally:
        await sequencer.stop()
