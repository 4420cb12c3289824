"""The multi-tenant deployment works as rendered (issue 34, item 1): on the
config ``laneledger nats-config --tenants-file`` renders, with every service
as its own deploy user and the tenants file (``rendered_deployment``), both
tenants' appends are committed and acknowledged once: the append streams are
empty after the commit, nothing is redelivered or left pending, each receipt
arrives once; and the same holds after the active sequencer is killed and
the standby takes over. nats-server refuses no deploy user anything.

And a tenant's receipts go to its own inbox only (item 6): with a tenants
file an append on acme's subjects whose ``Ledger-Reply-To`` lies in the
trusted users' ``_INBOX.`` is refused, acknowledged off the stream, counted
and logged, and no receipt goes there."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import re
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from metrics_support import parse, scrape, total, value
from polling import eventually
from rendered_deployment import TENANTS_FILE, TLOG_ORIGIN, RenderedDeployment
from sequencer_process import ledger_last_position, wait_for_ledger
from service_process import ServiceProcess
from tail_support import MAIN, korg_call

from laneledger.contract.errors import EntityNotFound, InvalidRequest
from laneledger.contract.ids import new_id
from laneledger.contract.model import AppendCommitted, Receipt
from laneledger.contract.subjects import REPLY_HEADER, Subjects, inbox_prefix, reply_refusal, token
from laneledger.runtime.natsconfig import password_variable
from laneledger.runtime.throttledlog import ThrottledWarning
from laneledger.sdk.checkpoints import CheckpointClient
from laneledger.sdk.client import TENANT_INBOXES_ENV, LedgerClient, make_event, tenant_inboxes_from_env
from laneledger.services.sequencer.streams import SEQUENCER_CONSUMER
from laneledger.tlog.checkpoint import open_checkpoint

SUBJECTS = Subjects()
APPENDS = 4  # per tenant, before and after the failover
_receipts = msgspec.json.Decoder(list[Receipt])


class InboxWatch:
    """Every receipt that reaches a tenant's inbox (``_INBOX_<tenant>.>``,
    subscribed as its producer user), counted by append id."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._nc: Any = None

    async def start(self, d: RenderedDeployment, tenant: str) -> InboxWatch:
        self._nc = await nats.connect(d.url(f"producer-{tenant}"), inbox_prefix=inbox_prefix(tenant))
        await self._nc.subscribe(f"{inbox_prefix(tenant)}.>", cb=self._on_message)
        return self

    async def _on_message(self, msg: Any) -> None:
        try:
            receipts = _receipts.decode(msg.data)
        except msgspec.DecodeError:
            return  # a command's reply or a PubAck, not receipts
        self.seen.update(r.append_id for r in receipts if r.append_id is not None)

    async def close(self) -> None:
        await self._nc.close()


async def append_all(client: LedgerClient, lane: Any, actor_id: str, first: int, ids: list[str]) -> None:
    """``APPENDS`` appends, one event each, from lane seq ``first``; one
    carries a payload large enough to go by blob (the tenant's buckets),
    its own: the blob of no other tenant."""
    for n in range(first, first + APPENDS):
        payload = {"n": n, "text": f"{lane.tenant} " * 400 if n == first else "short"}  # its own blob
        event = make_event(lane.id, "stream.text_delta", actor_id=actor_id, payload=payload)
        append_id = f"{lane.id}-{n}"
        receipt = await client.append(lane, n, [event], append_id=append_id, retries=20, timeout=5.0)
        assert isinstance(receipt, AppendCommitted) and receipt.last_seq == n + 1
        ids.append(append_id)


async def settled(d: RenderedDeployment, watches: dict[str, InboxWatch], ids: dict[str, list[str]]) -> None:
    """Each tenant's append stream empty, its consumer with nothing pending
    or redelivered, and each of its appends receipted exactly once."""
    async with d.admin() as nc:
        js = nc.jetstream()
        for tenant in d.tenants:
            stream = SUBJECTS.tenant_append_stream(token(tenant))
            await eventually(
                lambda stream=stream: js.stream_info(stream),
                until=lambda info: info.state.messages == 0,
                what=f"{stream} empty (every request acknowledged)",
            )
            consumer = await js.consumer_info(stream, SEQUENCER_CONSUMER)
            assert (consumer.num_redelivered, consumer.num_ack_pending, consumer.num_pending) == (0, 0, 0)
    for tenant in d.tenants:
        want = Counter(ids[tenant])
        await eventually(
            lambda tenant=tenant: dict(watches[tenant].seen),
            until=lambda seen, want=want: seen == want,
            what=f"{tenant}'s receipts, one per append",
        )
    await asyncio.sleep(0.5)  # a redelivery would re-send a receipt: none may come
    for tenant in d.tenants:
        assert dict(watches[tenant].seen) == Counter(ids[tenant])


def sessions_of(body: bytes) -> list[tuple[str, str]]:
    return [(s["session_id"], s["tenant"]) for s in json.loads(body)["sessions"]]


def signed_size(d: RenderedDeployment, note: bytes) -> int:
    """The tree size of a checkpoint the deployment's log key signed."""
    checkpoint, _ = open_checkpoint(note, [d.tlog_key.verifier()], origin=TLOG_ORIGIN)
    return checkpoint.size


def blob_refs(db: Path, tenant: str) -> list[str]:
    """The hex digests of the blobs ``tenant``'s events reference."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT body FROM events WHERE tenant = ?", (tenant,)).fetchall()
    finally:
        conn.close()
    return [m for (body,) in rows for m in re.findall(r'"_ref":"sha256:([0-9a-f]{64})"', str(body))]


@pytest.mark.slow
async def test_the_rendered_deployment_commits_each_append_once_before_and_after_a_failover(
    rendered_deployment: RenderedDeployment,
) -> None:
    d = rendered_deployment
    watches = {t: await InboxWatch().start(d, t) for t in d.tenants}
    ids: dict[str, list[str]] = {t: [] for t in d.tenants}
    lanes = {}
    try:
        for tenant in d.tenants:
            recorder = await d.lane(tenant)
            assert recorder.lane.actor_id is not None
            lanes[tenant] = (recorder.client, recorder.lane, recorder.lane.actor_id)
        await asyncio.gather(*(append_all(c, lane, a, 0, ids[t]) for t, (c, lane, a) in lanes.items()))
        await settled(d, watches, ids)

        # The checkpoint service and the tail serve each tenant as deployed.
        client = lanes["acme"][0]
        saved = await CheckpointClient(client).save(
            "k-1", expected_revision=0, format="test/v1", state={"at": 1}, session_id="s-1", run_id="r-1"
        )
        assert saved.revision == 1
        artifact = await CheckpointClient(client).save(
            "k-2",
            expected_revision=0,
            format="test/v1",
            data=b"artifact bytes " * 100,
            media_type="application/octet-stream",
            session_id="s-1",
            run_id="r-1",
        )
        assert artifact.revision == 1
        await eventually(
            lambda: d.get(d.tail, "/api/v1/sessions", tenant="globex"),
            until=lambda got: got[0] == 200 and sessions_of(got[1]) == [("s-1", "globex")],
            what="globex's session, and only globex's, in the tail's index",
        )
        # acme's blob (its 2 KiB payload), served to acme's token, not globex's.
        (acme_blob,) = blob_refs(d.sequencer.db_path, "acme")
        assert (await d.get(d.tail, f"/api/v1/blobs/{acme_blob}", tenant="acme"))[0] == 200
        assert (await d.get(d.tail, f"/api/v1/blobs/{acme_blob}", tenant="globex"))[0] == 404
        # The transparency log: the sequencer signs checkpoints, the tail serves them.
        last = ledger_last_position(d.sequencer.db_path)
        assert last == 2 * APPENDS
        await eventually(
            lambda: d.get(d.tail, "/api/v1/tlog/checkpoint"),
            until=lambda got: got[0] == 200 and signed_size(d, got[1]) == last,
            what="a signed checkpoint of the tree with every event so far, from the tail",
        )

        await d.fail_over()
        await asyncio.gather(*(append_all(c, lane, a, APPENDS, ids[t]) for t, (c, lane, a) in lanes.items()))
        await settled(d, watches, ids)
        # The metrics service folds both tenants' events, across the failover.
        each = [2 * APPENDS] * len(d.tenants)
        await eventually(
            lambda: _samples(d.metrics),
            until=lambda s: [total(s, "laneledger_events_total", tenant=t) for t in d.tenants] == each,
            what="the metrics service's events_total of each tenant",
        )
    finally:
        for watch in watches.values():
            await watch.close()

    verified = await d.verify()
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # The killed sequencer comes back as the standby and catches up.
    await d.restart_standby()
    await wait_for_ledger(d.standby.db_path, 4 * APPENDS)
    assert d.permission_violations() == []


@pytest.fixture
def korg_producer_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendered producer-korg's password, set before nats-server reads its config."""
    monkeypatch.setenv(password_variable("korg"), "test-korg-secret")


# With a tenants file, the Korg tenant must be declared too (docs/tenants.md).
@pytest.mark.tenants_file(TENANTS_FILE + "\n[tenants.korg]\n")
async def test_korg_writes_go_through_the_ingest_service_as_deployed(
    korg_producer_password: None, rendered_deployment: RenderedDeployment
) -> None:
    """The ingest service, as its own NATS user, appends Korg's calls (one
    naming its cause, read from LEDGER_EVENTS by position; one with a value
    over 1 KiB, stored as a blob first) and uploads a blob, with no permission
    refused anyone; the tail, which may write none of it, serves it all back."""
    d = rendered_deployment
    data = b"uploaded " * 300
    digest = hashlib.sha256(data).hexdigest()
    assert (await d.send(d.ingest, "PUT", f"/api/blob/{digest}", data=data))[0] == 200
    status, body = await d.send(d.ingest, "POST", "/api/agent/tool-call", json=korg_call(MAIN, "user_prompt"))
    assert status == 200, body
    root = json.loads(body)["seq_id"]
    child = korg_call(MAIN, "Bash", root, result="x" * 2000)
    status, body = await d.send(d.ingest, "POST", "/api/agent/tool-call", json=child)
    assert status == 200, body
    refused = await d.send(d.ingest, "POST", "/api/agent/tool-call", tenant="acme", json=child)
    assert refused[0] == 403 and json.loads(refused[1])["error"]["code"] == "tenant_mismatch"
    journal = await eventually(
        lambda: d.get(d.tail, "/api/journal"),
        until=lambda got: got[0] == 200 and len(got[1].splitlines()) == 2,
        what="both calls in the tail's Korg journal",
    )
    records = [json.loads(line) for line in journal[1].splitlines()]
    assert [r["metadata"]["triggered_by"] for r in records] == [None, root]
    stored = records[1]["event"]["result"]["_ref"].removeprefix("sha256:")
    for blob in (digest, stored):
        assert (await d.get(d.tail, f"/api/blob/{blob}"))[0] == 200, blob
    assert d.permission_violations() == []


@pytest.mark.slow
async def test_a_tenant_erases_its_session_over_http_and_no_file_of_the_deployment_keeps_it(
    rendered_deployment: RenderedDeployment,
) -> None:
    """The ingest service, as its own NATS user, sends acme's erasure (its
    erase command, and the ensure_actor of who asks) on acme's subjects with
    acme's token; globex's token finds no such session; nats-server refuses
    no one anything. Then no file of the deployment — every service's data
    directory (ledger files of both sequencers, tail, checkpoint, metrics)
    and the JetStream store — holds what was planted (issue 39, item 2): in
    an event's payload and extensions, in a blob, in checkpoint state."""
    d = rendered_deployment
    email, code = "erase.me@example.org", "735102"
    recorder = await d.lane("acme")
    event = make_event(recorder.lane.id, "stream.text_delta", actor_id=recorder.lane.actor_id or "")
    payload = {"text": "forget me", "email": email, "code": int(code), "doc": f"mail {email} " + "x" * 2000}
    receipt = await recorder.append([{**event, "payload": payload, "extensions": {"contact": email}}])
    await CheckpointClient(recorder.client).save(
        "k-1", expected_revision=0, format="test/v1", state={"who": email}, session_id="s-1", run_id="r-1"
    )
    # The blob's name too: its SHA-256 would confirm a guess of its bytes.
    planted = [email, code, "forget me", hashlib.sha256(payload["doc"].encode()).hexdigest()]

    def holding() -> list[tuple[str, str]]:
        files = [p for p in d.dir.rglob("*") if p.is_file()]
        found = []
        for path in files:
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # gone since listed (nats-server's *.blk.tmp while it compacts)
                continue
            name = str(path.relative_to(d.dir))
            found += [(name, v) for v in planted for form in _encodings(v) if form in data]
        return found

    # In the streams, the ledger files and the checkpoint service's, where the scan looks.
    await eventually(
        holding, until=lambda found: len({f.split("/")[0] for f, _ in found}) >= 4, what="planted"
    )
    body = {"session_id": "s-1", "reason": "GDPR Art. 17", "actor_key": "human:dpo"}
    status, answer = await d.send(d.ingest, "POST", "/api/v1/erasures", tenant="globex", json=body)
    assert status == 404 and json.loads(answer)["error"]["code"] == "entity_not_found", answer
    status, answer = await d.send(d.ingest, "POST", "/api/v1/erasures", tenant="acme", json=body)
    assert status == 200, answer
    page = json.loads(answer)
    assert page["erased"] >= 1 and not page["has_more"], page
    erased = {e.id: e for e in (await recorder.client.load_lane(recorder.lane.id)).events}
    assert erased[receipt.event_ids[0]].payload == {}
    # The services fold the erasure event; the sequencer's background round cleans the streams.
    await eventually(holding, until=lambda found: found == [], what="no file holding a planted value")
    assert d.permission_violations() == []


def _encodings(value: str) -> list[bytes]:
    """As test_erasure.encodings: raw, base64, JSON-escaped, MessagePack."""
    raw = value.encode()
    return [raw, base64.b64encode(raw), json.dumps(value).encode()[1:-1], msgspec.msgpack.encode(value)[1:]]


# -- receipts only to the tenant's own inbox (issue 34, item 6) ----------------


@pytest.mark.parametrize(
    ("reply", "tenant_token", "trusted_inbox", "allowed"),
    [
        ("_INBOX_acme.abc.1", "acme", False, True),
        ("_INBOX.abc.1", "acme", False, False),  # the trusted users' space: not a tenant's
        ("_INBOX_globex.abc.1", "acme", False, False),
        ("_INBOX.abc.1", "acme", True, True),  # no tenants file: one account, every producer trusted
        ("_INBOX.abc.1", None, False, True),  # not on a tenant's subjects
    ],
)
def test_with_a_tenants_file_a_tenants_subjects_are_answered_in_its_inbox_only(
    reply: str, tenant_token: str | None, trusted_inbox: bool, allowed: bool
) -> None:
    refusal = reply_refusal(reply, tenant_token, trusted_inbox=trusted_inbox)
    assert (refusal is None) is allowed, refusal
    if not allowed:
        assert refusal is not None and "outside the requester's inbox" in refusal


def test_a_trusted_client_takes_tenant_inboxes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TENANT_INBOXES_ENV, raising=False)
    assert tenant_inboxes_from_env() is False
    monkeypatch.setenv(TENANT_INBOXES_ENV, "on")
    assert tenant_inboxes_from_env() is True
    monkeypatch.setenv(TENANT_INBOXES_ENV, "yes please")
    with pytest.raises(InvalidRequest, match=TENANT_INBOXES_ENV) as refused:
        tenant_inboxes_from_env()
    assert refused.value.details["value"] == "yes please"


def test_a_warning_requesters_can_cause_is_logged_at_most_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    warning = ThrottledWarning(logging.getLogger("t"), "refused", every_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t"):
        for n in range(5):
            warning.note(f"request {n}")
        now[0] = 10.0
        warning.note("request 5")
    assert [r.getMessage() for r in caplog.records] == [
        "refused (1 since the last such line): request 0",
        "refused (5 since the last such line): request 5",
    ]


async def test_a_tenants_append_aimed_at_the_trusted_inbox_is_refused_acknowledged_and_counted(
    rendered_deployment: RenderedDeployment,
) -> None:
    d = rendered_deployment
    recorder = await d.lane("acme")
    acme, lane, actor_id = recorder.client, recorder.lane, recorder.lane.actor_id
    # A trusted user listening on the trusted inbox space, where acme aims.
    trusted = await nats.connect(d.url("producer"))
    landed: list[bytes] = []  # everything published there
    subjects: list[str] = []  # where
    receipted: list[str] = []  # the append ids of receipts among it

    async def note(msg: Any) -> None:
        landed.append(msg.data)
        subjects.append(msg.subject)
        try:
            receipted.extend(r.append_id or "" for r in _receipts.decode(msg.data))
        except msgspec.DecodeError:
            pass

    await trusted.subscribe("_INBOX.>", cb=note)
    await trusted.flush()
    aimed_id = new_id()
    body = msgspec.json.encode(
        {
            "lane_id": lane.id,
            "expected_last_seq": 0,
            "append_id": aimed_id,
            "events": [make_event(lane.id, "stream.text_delta", actor_id=actor_id, payload={"n": 0})],
        }
    )
    try:
        raw = await nats.connect(d.url("producer-acme"), inbox_prefix=inbox_prefix("acme"))
        ack = await raw.request(
            SUBJECTS.append("acme", lane.id), body, headers={REPLY_HEADER: "_INBOX.trusted.1"}, timeout=5
        )
        assert b'"seq"' in ack.data  # JetStream took it
        # A checkpoint request aimed there too: served, and its reply goes to
        # the server's _R_ subject, back into acme's account, not to LEDGER's _INBOX.
        await raw.publish(SUBJECTS.checkpoint("info", "acme"), b'{"op": "info"}', reply="_INBOX.trusted.2")
        await raw.flush()
        await eventually(
            lambda: _samples(d.checkpoint),
            until=lambda s: value(s, "laneledger_checkpoint_requests_total", op="info", outcome="ok") == 1,
            what="acme's aimed checkpoint request served",
        )
        await raw.close()

        samples = await eventually(
            lambda: _samples(d.sequencer),
            until=lambda s: (
                value(s, "laneledger_sequencer_refused_reply_subjects_total", kind="receipt") == 1
            ),
            what="the aimed receipt refused and counted",
        )
        assert value(samples, "laneledger_sequencer_rejections_unanswered_total", code="invalid_request") == 1
        with pytest.raises(EntityNotFound):
            await acme.get_receipt(aimed_id)  # refused, not committed
        assert "receipt may not go where it asks" in d.sequencer.log_text()

        # A trusted harness receives a tenant's receipts in that tenant's
        # inbox (nats-config lets `producer` subscribe there).
        async with LedgerClient(trusted, tenant_inboxes=True, timeout=5.0) as harness:
            receipt = await harness.append(
                lane, 0, [make_event(lane.id, "stream.text_delta", actor_id=actor_id, payload={"n": 1})]
            )
        assert isinstance(receipt, AppendCommitted) and receipt.positions == [1]

        # Acknowledged off acme's stream, nothing redelivered; nothing in _INBOX.
        async with d.admin() as nc:
            stream = SUBJECTS.tenant_append_stream(token("acme"))
            js = nc.jetstream()
            await eventually(
                lambda: js.stream_info(stream),
                until=lambda info: info.state.messages == 0,
                what=f"{stream} empty",
            )
            consumer = await js.consumer_info(stream, SEQUENCER_CONSUMER)
            assert (consumer.num_redelivered, consumer.num_ack_pending) == (0, 0)
        await asyncio.sleep(0.3)
        # The watcher does see that space: the request itself, pulled by the
        # sequencer into its inbox; but no receipt for it.
        assert any(aimed_id.encode() in data for data in landed)
        assert aimed_id not in receipted
        assert not {"_INBOX.trusted.1", "_INBOX.trusted.2"} & set(subjects)
    finally:
        await trusted.close()
    assert d.permission_violations() == []


async def _samples(service: ServiceProcess) -> Any:
    assert service.http_url is not None
    return parse(await scrape(service.http_url))
