"""deploy/nats.conf on a real nats-server: it parses, every service works under
its own user, and a producer's credentials cannot write the committed stream."""

from __future__ import annotations

import contextlib
import subprocess

import aiohttp
import msgspec
import nats
import nats.errors
import pytest
from deployment_support import CONF, TENANTS, attempts, connections_of, deployed_sequencer, refused, url_for
from nats_fixtures import jetstream_settings
from polling import eventually
from prometheus_client import CollectorRegistry

from laneledger.contract.errors import EntityNotFound, InvalidRequest, LedgerError, TenantMismatch
from laneledger.contract.subjects import (
    TENANT_HEADER,
    TENANT_JS_API_PREFIX,
    RequestSubject,
    Subjects,
    tenant_headers,
    token,
)
from laneledger.devtools.natsserver import find_nats_server
from laneledger.runtime.access import AccessPolicy
from laneledger.runtime.opsserver import start_http
from laneledger.sdk.checkpoints import AnchorNotCommitted, CheckpointClient, RevisionConflict, anchor_of
from laneledger.sdk.client import LaneRecorder, LedgerClient
from laneledger.services.checkpoint.http import checkpoint_app
from laneledger.services.checkpoint.metrics import CheckpointMetrics
from laneledger.services.checkpoint.service import CheckpointService, CheckpointSettings
from laneledger.services.checkpoint.store import CheckpointStore
from laneledger.services.sequencer.metrics import SequencerMetrics
from laneledger.services.sequencer.service import Sequencer, SequencerSettings
from laneledger.services.sequencer.streams import erased_stream_config
from laneledger.services.sequencer.treeheads import TreeHeadSettings
from laneledger.services.tail.service import TailService, TailSettings
from laneledger.store import LedgerWriter, open_ledger
from laneledger.store.erasedcopies import erased_event, publish_erased_event
from laneledger.tlog.note import Signer


@pytest.mark.nats
def test_nats_server_accepts_the_config(passwords):
    result = subprocess.run([find_nats_server(), "-t", "-c", str(CONF)], capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert b"is valid" in result.stdout + result.stderr


@pytest.mark.nats
@pytest.mark.parametrize("server", ["secured_server", "tenant_server"])
def test_the_shipped_and_rendered_configs_fsync_every_write(server, request):
    assert jetstream_settings(request.getfixturevalue(server))["sync_always"] is True


def test_a_template_that_does_not_fsync_every_write_is_not_rendered():
    from laneledger.runtime.natsconfig import TemplateError, render

    template = CONF.read_text()
    for lax in ("sync_interval: 2m", "# sync_interval: always", ""):
        with pytest.raises(TemplateError, match="sync_interval: always"):
            render(template.replace("sync_interval: always", lax), ["acme"])


@pytest.mark.nats
async def test_services_run_under_their_users_and_producers_cannot_forge(secured_server, passwords, tmp_path):
    violations: list[Exception] = []

    async def remember(exc: Exception) -> None:
        violations.append(exc)

    seq_nc, seq_replies = await connections_of(secured_server, "sequencer", passwords)
    sequencer = deployed_sequencer(seq_nc, seq_replies, tmp_path / "ledger.db")
    await sequencer.start()
    try:
        async with await LedgerClient.connect(url_for(secured_server, "producer", passwords)) as client:
            actor = await client.ensure_actor("acme", "agent:secured@1", "agent")
            lane = await LaneRecorder.open(client, "acme", "s", "r", "main", actor_id=actor.id)
            receipt = await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r")])
            assert receipt.positions == [1]

        forger = await nats.connect(url_for(secured_server, "producer", passwords), error_cb=remember)
        try:
            js = forger.jetstream(timeout=1.0)  # its unanswered request below times out
            await forger.publish("ledger.events.acme.s.r.forged", b'{"forged": true}')
            # No permission to talk to the stream API at all: the request is
            # dropped, unanswered.
            with pytest.raises(nats.errors.TimeoutError):
                await js.stream_info("LEDGER_EVENTS")
            await forger.flush()
            await eventually(
                lambda: [str(e).lower() for e in violations],
                until=lambda found: refused(found, "ledger.events.acme.s.r.forged"),
                what="the forged publish to be refused",
            )
        finally:
            await forger.close()

        # Only the sequencer's committed event is in the stream.
        info = await seq_nc.jetstream().stream_info("LEDGER_EVENTS")
        assert info.state.messages == 1
    finally:
        await sequencer.stop()
        await seq_nc.close()
        await seq_replies.close()


@pytest.mark.nats
async def test_the_tail_user_reads_the_transparency_logs_checkpoints(secured_server, passwords, tmp_path):
    """The sequencer signs checkpoints onto LEDGER_TLOG as its user; the tail,
    as its own, reads them and serves them; it may not write that stream."""
    signer = Signer.generate("ledger.example/deployed")
    seq_nc, seq_replies = await connections_of(secured_server, "sequencer", passwords)
    sequencer = Sequencer(
        seq_nc,
        LedgerWriter(open_ledger(tmp_path / "ledger.db")),
        SequencerMetrics(CollectorRegistry()),
        SequencerSettings(tree_heads=TreeHeadSettings(signer, interval_s=0.2)),
        reply_nc=seq_replies,
    )
    await sequencer.start()
    tail_nc = await nats.connect(url_for(secured_server, "tail", passwords))
    tail = TailService(tail_nc, TailSettings(data_dir=tmp_path / "tail", watch_interval_s=0.2))
    port = await tail.start("127.0.0.1", 0)
    try:
        async with await LedgerClient.connect(url_for(secured_server, "producer", passwords)) as client:
            actor = await client.ensure_actor("acme", "agent:secured@1", "agent")
            lane = await LaneRecorder.open(client, "acme", "s", "r", "main", actor_id=actor.id)
            await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r")])
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:

            async def latest() -> str:
                async with http.get("/api/v1/tlog/checkpoint") as answer:
                    return await answer.text() if answer.status == 200 else ""

            note = await eventually(
                latest, until=lambda text: text.startswith(f"{signer.name}\n1\n"), what="checkpoint 1"
            )
        last = await seq_nc.jetstream().get_last_msg("LEDGER_TLOG", "ledger.tlog.checkpoint")
        assert note == last.data.decode()
        violations = await attempts(
            url_for(secured_server, "tail", passwords), publish=["ledger.tlog.checkpoint"]
        )
        assert refused(violations, "ledger.tlog.checkpoint"), violations
    finally:
        await tail.stop()
        await tail_nc.close()
        await sequencer.stop()
        await seq_nc.close()
        await seq_replies.close()


@pytest.mark.nats
async def test_wrong_password_is_refused(secured_server, passwords):
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(
            f"nats://producer:wrong@127.0.0.1:{secured_server.port}",
            max_reconnect_attempts=0,
            connect_timeout=2,
            allow_reconnect=False,
        )


@pytest.mark.nats
async def test_readers_of_the_committed_stream_read_erased_copies_and_write_none(secured_server, passwords):
    """Each reader of LEDGER_EVENTS reads an erased event's copy on
    LEDGER_ERASED, as it reads the stream (spec/erasure.md); none writes,
    deletes or purges one."""
    subjects = Subjects()
    seq_nc = await nats.connect(url_for(secured_server, "sequencer", passwords))
    try:  # as the sequencer makes them
        await seq_nc.jetstream().add_stream(erased_stream_config(subjects, 1))
        await publish_erased_event(seq_nc.jetstream(), subjects, 1, b'{"erased": 1}', timeout_s=5)
    finally:
        await seq_nc.close()
    writes = [
        subjects.erased_event(1),
        "$JS.API.STREAM.MSG.DELETE.LEDGER_ERASED",
        "$JS.API.STREAM.PURGE.LEDGER_ERASED",
    ]
    for user in ("tail", "ingest", "metrics", "checkpoint", "otel"):
        reader = await nats.connect(url_for(secured_server, user, passwords))
        try:
            assert await erased_event(reader.jetstream(timeout=2.0), subjects, 1) == b'{"erased": 1}', user
        finally:
            await reader.close()
        violations = await attempts(url_for(secured_server, user, passwords), publish=writes)
        assert all(refused(violations, subject) for subject in writes), (user, violations)


@pytest.mark.nats
async def test_readers_cannot_publish_committed_events(secured_server, passwords):
    for user in ("tail", "ingest", "metrics", "checkpoint", "otel"):
        violations = await attempts(
            url_for(secured_server, user, passwords), publish=["ledger.events.acme.s.r.l"]
        )
        assert refused(violations, "ledger.events.acme.s.r.l"), (user, violations)


# -- per-tenant producers (laneledger nats-config) ---------------------------------


@pytest.mark.nats
async def test_a_tenant_producer_appends_for_its_tenant_and_reads_only_its_inbox(
    tenant_server, passwords, tmp_path
):
    seq_nc, seq_replies = await connections_of(tenant_server, "sequencer", passwords)
    sequencer = deployed_sequencer(seq_nc, seq_replies, tmp_path / "ledger.db")
    await sequencer.start()
    try:
        for tenant in TENANTS:  # each tenant's producer works end to end on its own inbox
            async with await LedgerClient.connect(
                url_for(tenant_server, f"producer-{tenant}", passwords), tenant=tenant
            ) as client:  # its commands, its inbox
                actor = await client.ensure_actor(tenant, "agent:secured@1", "agent")
                lane = await LaneRecorder.open(client, tenant, f"s-{tenant}", "r", "main", actor_id=actor.id)
                receipt = await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r")])
                assert receipt.last_seq == 1

        url = url_for(tenant_server, "producer-acme", passwords)
        violations = await attempts(
            url,
            subscribe=["_INBOX.>", "_INBOX_globex.>", "ledger.append.>", "ledger.append.globex.>"],
            publish=[
                "ledger.append.globex.l1",
                "ledger.events.acme.s.r.l",
                "$JS.API.CONSUMER.CREATE.LEDGER_APPEND",
                "$JS.API.STREAM.PURGE.LEDGER_EVENTS",
                # listing streams would name every tenant's buckets
                "$JS.API.STREAM.NAMES",
                "$JS.API.STREAM.LIST",
            ],
        )
        for subject in (
            "_INBOX.>",
            "_INBOX_globex.>",
            "ledger.append.>",
            "ledger.append.globex.>",
            "ledger.append.globex.l1",
            "ledger.events.acme.s.r.l",
            "$JS.API.CONSUMER.CREATE.LEDGER_APPEND",
            "$JS.API.STREAM.PURGE.LEDGER_EVENTS",
            "$JS.API.STREAM.NAMES",
            "$JS.API.STREAM.LIST",
        ):
            assert refused(violations, subject), (subject, violations)
        # What it may do, it may: no violation for its own subjects.
        allowed = await attempts(url, subscribe=["_INBOX_acme.x.>"], publish=["ledger.append.acme.some-lane"])
        assert allowed == [], allowed

        info = await seq_nc.jetstream().stream_info("LEDGER_EVENTS")
        assert info.state.messages == 2  # the two tenants' run.started, nothing forged
    finally:
        await sequencer.stop()
        await seq_nc.close()
        await seq_replies.close()


@pytest.mark.nats
async def test_only_the_sequencer_writes_events_and_consumers_append_as_no_one_else(tenant_server, passwords):
    forged_events = [
        "ledger.events.acme.s.r.l",
        "$JS.API.STREAM.PURGE.LEDGER_EVENTS",
        "$JS.API.STREAM.DELETE.LEDGER_EVENTS",
        "$JS.API.STREAM.MSG.DELETE.LEDGER_EVENTS",
    ]
    for user in ("producer", "producer-acme", "tail", "ingest", "metrics", "checkpoint"):
        violations = await attempts(url_for(tenant_server, user, passwords), publish=forged_events)
        for subject in forged_events:
            assert refused(violations, subject), (user, subject, violations)
    for user in ("tail", "metrics", "checkpoint"):  # readers append as no tenant's producer
        violations = await attempts(
            url_for(tenant_server, user, passwords),
            publish=["ledger.append.acme.l1"],
            subscribe=["ledger.append.>"],
        )
        assert refused(violations, "ledger.append.acme.l1"), (user, violations)
        assert refused(violations, "ledger.append.>"), (user, violations)
    # The tail only reads: not even in the Korg tenant may it append, command
    # or write a blob (issue 38); the ingest service's user does that, in the
    # Korg tenant only, and gets its receipts in that tenant's inbox
    # (spec/wire.md, "Replies").
    korg_writes = [
        "ledger.append.korg.l1",
        "ledger.cmd.korg.create_lane",
        "$O.LEDGER_UPLOADS_korg.korg.abc",
        "$JS.API.STREAM.PURGE.OBJ_LEDGER_UPLOADS_korg",
    ]
    tail_writes = await attempts(
        url_for(tenant_server, "tail", passwords), publish=korg_writes, subscribe=["_INBOX_korg.abc"]
    )
    for subject in [*korg_writes, "_INBOX_korg.abc"]:
        assert refused(tail_writes, subject), (subject, tail_writes)
    ingest_url = url_for(tenant_server, "ingest", passwords)
    assert await attempts(ingest_url, publish=korg_writes, subscribe=["_INBOX_korg.abc"]) == []
    # A rendered tenant's erasures over HTTP (spec/erasure.md): its erase
    # command and who asks, on its subjects; the tail sends neither.
    erasures = ["ledger.cmd.acme.erase", "ledger.cmd.acme.ensure_actor"]
    assert await attempts(ingest_url, publish=erasures) == []
    tail_erasures = await attempts(url_for(tenant_server, "tail", passwords), publish=erasures)
    assert all(refused(tail_erasures, subject) for subject in erasures), tail_erasures
    elsewhere = [
        "ledger.append.acme.l1",
        "ledger.cmd.acme.create_lane",
        "ledger.cmd.create_lane",
        "$O.LEDGER_UPLOADS_acme.acme.abc",
        "$JS.API.STREAM.MSG.GET.LEDGER_TLOG",
        "$JS.API.CONSUMER.CREATE.LEDGER_EVENTS",
    ]
    ingest_elsewhere = await attempts(ingest_url, publish=elsewhere, subscribe=["_INBOX_acme.abc"])
    for subject in [*elsewhere, "_INBOX_acme.abc"]:
        assert refused(ingest_elsewhere, subject), (subject, ingest_elsewhere)
    tail_elsewhere = await attempts(url_for(tenant_server, "tail", passwords), subscribe=["_INBOX_acme.abc"])
    assert refused(tail_elsewhere, "_INBOX_acme.abc")
    # The shared producer receives a rendered tenant's receipts in its inbox.
    assert await attempts(url_for(tenant_server, "producer", passwords), subscribe=["_INBOX_acme.abc"]) == []


async def test_the_sequencer_acknowledges_on_every_append_stream_whatever_the_tenants_file(
    tenant_server, passwords
):
    """Its consumer on the shared stream, a rendered tenant's, and one the
    config does not name (a tenant dropped from the file: its retired
    stream is still read until empty); no other consumer's."""
    acks = [
        f"$JS.ACK.{stream}.sequencer.1.1.1.1796444927286999513.0"
        for stream in ("LEDGER_APPEND", "LEDGER_APPEND_acme", "LEDGER_APPEND_initech")
    ]
    other = "$JS.ACK.LEDGER_EVENTS.otel.1.1.1.1796444927286999513.0"
    violations = await attempts(url_for(tenant_server, "sequencer", passwords), publish=[*acks, other])
    assert [v for v in violations if not refused([v], other)] == []
    assert refused(violations, other)


def test_nats_config_renders_the_shipped_file_and_refuses_bad_tenants(tmp_path):
    from laneledger.cli import main
    from laneledger.runtime.natsconfig import render

    template = CONF.read_text()
    assert render(template, []) == template  # the shipped file is the template, unchanged
    out = tmp_path / "rendered.conf"
    assert (
        main(
            [
                "nats-config",
                "--template",
                str(CONF),
                "--tenant",
                "acme",
                "--korg-tenant",
                "korg-tools",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    text = out.read_text()
    assert "user: producer-acme" in text and '"ledger.append.korg-tools.>"' in text
    assert '"ledger.append.korg.>"' not in text  # the ingest's one append subject moved
    assert '"_INBOX_korg-tools.>"' in text and '"_INBOX_korg.>"' not in text  # and its receipts inbox
    ingest_block = text[text.index("user: ingest\n") : text.index("user: metrics\n")]
    assert '"ledger.append.korg-tools.>"' in ingest_block and '"ledger.cmd.korg-tools.*"' in ingest_block
    assert '"$O.LEDGER_UPLOADS_korg-tools.>"' in ingest_block
    # The tail reads acme's committed blob bucket and may not write it;
    # producer-acme writes its uploads bucket and only reads the committed
    # one, which the sequencer alone writes; no other blob bucket is acme's.
    tail_block = text[text.index("user: tail\n") : text.index("user: ingest\n")]
    assert "ledger.append." not in tail_block and "$O.LEDGER_UPLOADS" not in tail_block  # it only reads
    assert '"$JS.API.STREAM.MSG.GET.OBJ_LEDGER_BLOBS_acme"' in tail_block
    assert '"$O.LEDGER_BLOBS_acme.>"' not in tail_block
    # producer-acme is alone in its account, which imports from LEDGER the
    # JetStream calls on its own buckets only, none creating a consumer.
    acme_account = text[text.index("  tenant-acme {\n") :]
    assert acme_account.count("user: ") == 1 and "jetstream" not in acme_account
    assert '{ service: { account: LEDGER, subject: "$O.LEDGER_UPLOADS_acme.>" } }' in acme_account
    assert '"JS.LEDGER.API.STREAM.MSG.GET.OBJ_LEDGER_BLOBS_acme"' in acme_account
    assert '"$O.LEDGER_BLOBS_acme.>"' not in acme_account and '"$O.LEDGER_BLOBS.>"' not in acme_account
    assert "CONSUMER" not in acme_account and "LEDGER_UPLOADS_globex" not in acme_account
    assert "limits: { max_connections: 100, max_subscriptions: 10000 }" in acme_account
    sequencer_block = text[text.index("user: sequencer\n") : text.index("user: sequencer-replies\n")]
    assert '"$O.LEDGER_BLOBS_acme.>"' in sequencer_block and "UPLOADS" not in sequencer_block
    for bad in ("a b", "acme.x", "*", ""):
        assert main(["nats-config", "--template", str(CONF), "--tenant", bad]) == 2, bad
    assert main(["nats-config", "--template", str(CONF), "--tenant", "a-b", "--tenant", "a_b"]) == 2


@pytest.mark.nats
async def test_a_tenants_account_holds_no_more_connections_and_subscriptions_than_its_limits(
    passwords, monkeypatch, tmp_path
):
    """The limits nats-config renders are nats-server's to enforce, per
    tenant account: acme's third connection is refused, and a fifth
    subscription on one of its connections; globex (other limits) is not
    held to acme's."""
    from laneledger.devtools.natsserver import NatsServer
    from laneledger.runtime.natsconfig import password_variable, render
    from laneledger.runtime.tenants import TenantLimits

    for tenant in TENANTS:
        passwords[f"producer-{tenant}"] = f"test-{tenant}-secret"
        monkeypatch.setenv(password_variable(tenant), passwords[f"producer-{tenant}"])
    limits = {
        "acme": TenantLimits(max_connections=2, max_subscriptions=4),
        "globex": TenantLimits(max_connections=5, max_subscriptions=50),
    }
    rendered = tmp_path / "nats.conf"
    rendered.write_text(render(CONF.read_text(), TENANTS, limits=limits))
    with NatsServer(tmp_path / "nats", config=rendered, extra_args=("-m", "-1")) as server:
        errors: list[str] = []

        async def remember(exc: Exception) -> None:
            errors.append(str(exc).lower())

        def connect(tenant: str):
            return nats.connect(
                url_for(server, f"producer-{tenant}", passwords),
                inbox_prefix=f"_INBOX_{tenant}",
                error_cb=remember,
                allow_reconnect=False,
            )

        acme = [await connect("acme"), await connect("acme")]
        with pytest.raises(Exception, match="maximum account active connections exceeded"):
            await connect("acme")
        globex = [await connect("globex") for _ in range(3)]  # acme's limit is not globex's
        replies = await nats.connect(url_for(server, "sequencer-replies", passwords))
        try:
            got: dict[str, list[str]] = {"acme": [], "globex": []}

            def keeper(tenant: str):
                async def keep(msg: nats.aio.msg.Msg) -> None:
                    got[tenant].append(msg.subject)

                return keep

            # acme's four subscriptions, all the account may hold; globex's ten.
            counts = {"acme": 4, "globex": 10}
            for tenant, nc in (("acme", acme[0]), ("globex", globex[0])):
                for n in range(counts[tenant]):
                    await nc.subscribe(f"_INBOX_{tenant}.sub{n}", cb=keeper(tenant))
                await nc.flush()

            async def publish_all() -> dict[str, list[str]]:
                # Again each time: a subscription's interest reaches the
                # ledger's account (through the inbox import) a moment later.
                for tenant, count in counts.items():
                    for n in range(count):
                        await replies.publish(f"_INBOX_{tenant}.sub{n}", b"x")
                await replies.flush()
                return got

            await eventually(
                publish_all,
                until=lambda g: all(
                    {f"_INBOX_{t}.sub{n}" for n in range(c)} <= set(g[t]) for t, c in counts.items()
                ),
                what="messages on every subscription within the limits",
            )
            # A fifth on that connection (nats-server counts them per connection
            # of the account): refused, and nats-py closes a connection the
            # server sent an error. The other connections go on.
            await acme[0].subscribe("_INBOX_acme.fifth")
            with contextlib.suppress(nats.errors.Error):  # closed under the flush, or not yet
                await acme[0].flush(timeout=2)
            await eventually(
                lambda: acme[0],
                until=lambda nc: nc.is_closed,
                what="acme's connection closed over its fifth subscription",
            )
            assert "maximum subscriptions exceeded" in str(acme[0].last_error).lower()
            for n in range(4):
                await acme[1].subscribe(f"_INBOX_acme.other{n}")
            await acme[1].flush()
            assert not acme[1].is_closed and not globex[0].is_closed
        finally:
            for nc in [*acme, *globex, replies]:
                if not nc.is_closed:
                    await nc.close()


def test_nats_config_renders_the_tenants_of_the_tenants_file(tmp_path, capsys):
    from laneledger.cli import main

    shipped = CONF.parent / "tenants.toml"
    out = tmp_path / "rendered.conf"
    args = ["nats-config", "--template", str(CONF), "--tenants-file", str(shipped), "--tenant", "initech"]
    assert main([*args, "-o", str(out)]) == 0
    users = [
        line.strip() for line in out.read_text().splitlines() if line.strip().startswith("user: producer-")
    ]
    assert users == ["user: producer-initech", "user: producer-acme", "user: producer-globex"]
    # Each account carries its tenant's connection and subscription limits.
    limited = tmp_path / "limited.toml"
    limited.write_text("[defaults]\nmax_subscriptions = 50\n[tenants.acme]\nmax_connections = 7\n")
    assert main(["nats-config", "--template", str(CONF), "--tenants-file", str(limited), "-o", str(out)]) == 0
    assert "limits: { max_connections: 7, max_subscriptions: 50 }" in out.read_text()
    # A file the services would refuse is refused here too, naming the key.
    bad = tmp_path / "tenants.toml"
    bad.write_text("[tenants.acme]\nblob_byte = 5\n")
    assert main(["nats-config", "--template", str(CONF), "--tenants-file", str(bad)]) == 2
    assert "'blob_byte'" in capsys.readouterr().err


# -- tenant-scoped commands, checkpoint requests and artifact buckets ------------------


def not_found_shape(err: LedgerError) -> tuple:
    """What a caller sees of a "not found", less the id it asked for."""
    return type(err), err.code, err.message, sorted(err.details)


@pytest.mark.nats
async def test_a_tenant_producer_reads_nothing_of_another_tenant_over_nats(
    tenant_server, passwords, tmp_path
):
    """globex's producer, on its own subjects, cannot load acme's session,
    run, lane or receipt, touch acme's lanes, or read acme's checkpoints and
    artifacts, by any command; acme's producer can (the control). Another
    tenant's thing is answered exactly as a missing one."""
    urls = {
        user: url_for(tenant_server, user, passwords)
        for user in ("sequencer", "checkpoint", "producer-acme", "producer-globex", "producer")
    }
    seq_nc, seq_replies = await connections_of(tenant_server, "sequencer", passwords)
    ckpt_nc, ckpt_replies = await connections_of(tenant_server, "checkpoint", passwords)
    sequencer = deployed_sequencer(seq_nc, seq_replies, tmp_path / "ledger.db")
    store = CheckpointStore.open(tmp_path / "checkpoints.db")
    service = CheckpointService(
        ckpt_nc,
        store,
        CheckpointMetrics(CollectorRegistry()),
        CheckpointSettings(anchor_wait_s=10.0, max_inline_bytes=1024),
        reply_nc=ckpt_replies,
    )
    await sequencer.start()
    await service.start()
    acme = await LedgerClient.connect(urls["producer-acme"], tenant="acme")
    globex = await LedgerClient.connect(urls["producer-globex"], tenant="globex")
    try:
        # acme's data: a lane with an event, a turn, an action; an anchored
        # checkpoint and one whose state is an artifact in acme's bucket.
        actor = await acme.ensure_actor("acme", "agent:a@1", "agent")
        lane = await LaneRecorder.open(acme, "acme", "s-acme", "r", "main", actor_id=actor.id)
        receipt = await lane.append([lane.event("run.started", actor_id=actor.id, subject_id="r")])
        turn = await acme.create_turn(lane.lane.id, 1)
        action = await acme.create_action(
            lane.lane.id, turn.id, "tool", "ls", effect="read", idempotency="inherent"
        )
        acme_ckpt = CheckpointClient(acme)
        anchored = await acme_ckpt.save(
            "k-acme",
            expected_revision=0,
            format="application/json",
            state={"n": 1},
            anchor=anchor_of(receipt),
        )
        secret = b"acme's artifact " * 200
        spilled = await acme_ckpt.save(
            "k-acme",
            expected_revision=1,
            format="application/x-tests",
            data=secret,
            media_type="application/octet-stream",
        )
        assert (await acme_ckpt.info()).artifact_bucket == "LEDGER_CHECKPOINT_ARTIFACTS_acme"

        # The control: acme reads all of it back over its own subjects.
        assert (await acme.get_lane(lane.lane.id)).last_seq == 1
        assert (await acme.load_session("s-acme")).tenant == "acme"
        assert len((await acme.load_run("s-acme", "r")).events) == 1
        assert (await acme.get_receipt(receipt.append_id)).positions == receipt.positions
        assert (await acme_ckpt.get(anchored.id)).tenant == "acme"
        assert (await acme_ckpt.latest("k-acme")).id == spilled.id
        assert await acme_ckpt.load_state(spilled) == secret
        assert (await acme_ckpt.recovery_plan(lane_id=lane.lane.id)).lane_id == lane.lane.id

        # globex: every read of acme's things is "not found", exactly as a missing one.
        reads = [
            (lambda i: globex.get_lane(i), lane.lane.id),
            (lambda i: globex.load_lane(i), lane.lane.id),
            (lambda i: globex.load_session(i), "s-acme"),
            (lambda i: globex.load_run(i, "r"), "s-acme"),
            (lambda i: globex.get_receipt(i), receipt.append_id),
            (lambda i: globex.create_turn(i, 2), lane.lane.id),
            (
                lambda i: globex.create_action(
                    lane.lane.id, i, "tool", "x", effect="read", idempotency="inherent"
                ),
                turn.id,
            ),
        ]
        for call, acme_id in reads:
            with pytest.raises(EntityNotFound) as theirs:
                await call(acme_id)
            with pytest.raises(EntityNotFound) as missing:
                await call("no-such-id-" + acme_id[-6:])
            assert not_found_shape(theirs.value) == not_found_shape(missing.value)
        # A turn of acme's lane, named from globex's own lane, is as missing.
        own = await LaneRecorder.open(globex, "globex", "s-globex", "r", "main")
        with pytest.raises(EntityNotFound):
            await globex.create_action(
                own.lane.id, turn.id, "tool", "x", effect="read", idempotency="inherent"
            )
        with pytest.raises(EntityNotFound):
            await globex.create_attempt(own.lane.id, action.id, 1)
        # Writes naming acme are refused.
        for call in (
            lambda: globex.ensure_actor("acme", "agent:x@1", "agent"),
            lambda: globex.create_lane("acme", "s-new", "r", "main"),
        ):
            with pytest.raises(TenantMismatch) as named:
                await call()
            assert named.value.details["subject_tenant"] == "globex"
        # Ids are each tenant's own: globex's session s-acme is its own, beside acme's.
        look_alike = await globex.create_lane("globex", "s-acme", "r-globex", "other")
        assert (look_alike.tenant, look_alike.session_id) == ("globex", "s-acme")
        assert [lane.tenant for lane in (await acme.load_session("s-acme")).lanes] == ["acme"]

        # Checkpoints: acme's are not there for globex, by any operation.
        globex_ckpt = CheckpointClient(globex)
        with pytest.raises(EntityNotFound) as theirs:
            await globex_ckpt.get(anchored.id)
        with pytest.raises(EntityNotFound) as missing:
            await globex_ckpt.get("no-such-checkpoint")
        assert not_found_shape(theirs.value) == not_found_shape(missing.value)
        assert await globex_ckpt.latest("k-acme") is None
        assert (await globex_ckpt.revisions("k-acme")).revisions == []
        with pytest.raises(EntityNotFound):
            await globex_ckpt.recovery_plan(lane_id=lane.lane.id)
        with pytest.raises(EntityNotFound):
            await globex_ckpt.inspect_run("s-acme", "r")
        assert (await globex_ckpt.reconcile(session_id="s-acme")).unlinked == []
        # Keys and ids are each tenant's own: under acme's key and id globex
        # saves its own revision 1, told nothing of acme's (a conflict says 0).
        with pytest.raises(RevisionConflict) as conflict:
            await globex_ckpt.save("k-acme", expected_revision=2, format="application/json", state={})
        assert conflict.value.details["actual_revision"] == 0
        look_alike_ckpt = await globex_ckpt.save(
            "k-acme", expected_revision=0, format="application/json", state={}, checkpoint_id=anchored.id
        )
        assert (look_alike_ckpt.tenant, look_alike_ckpt.revision) == ("globex", 1)
        assert (await acme_ckpt.get(anchored.id)).tenant == "acme"
        with pytest.raises(TenantMismatch):  # naming acme is refused, whatever exists
            await globex_ckpt.save(
                "k-new", expected_revision=0, format="application/json", state={}, tenant="acme"
            )
        # Anchored at acme's event: globex has no such lane, so no such event.
        with pytest.raises(AnchorNotCommitted) as unanchored:
            await globex_ckpt.save(
                "k-g",
                expected_revision=0,
                format="application/json",
                state={},
                anchor=anchor_of(receipt),
                anchor_wait_s=0.2,
            )
        assert unanchored.value.details["lane_last_seq"] == 0
        assert (await acme_ckpt.latest("k-acme")).revision == 2  # untouched
        # Its artifact bucket is its own: acme's artifact is not in it.
        assert (await globex_ckpt.info()).artifact_bucket == "LEDGER_CHECKPOINT_ARTIFACTS_globex"
        with pytest.raises(EntityNotFound):
            await globex_ckpt.read_artifact(spilled.artifact)

        # Over HTTP the artifact is found in acme's bucket for acme's token
        # and the operator's, and is "missing" for globex's.
        tokens = {"acme": "acme-token-0123456789", "globex": "globex-token-0123456789"}
        app = checkpoint_app(service, AccessPolicy.from_tokens(tokens, operator="operator-token-0123456789"))
        runner, port = await start_http(app, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                for token_, expected in (
                    (tokens["acme"], 200),
                    ("operator-token-0123456789", 200),
                    (tokens["globex"], 404),
                ):
                    async with http.get(
                        f"/api/v1/artifacts/{spilled.artifact.sha256}",
                        headers={"Authorization": f"Bearer {token_}"},
                    ) as response:
                        body = await response.read()
                        assert response.status == expected, (token_, body)
                        assert (body == secret) == (expected == 200)
        finally:
            await runner.cleanup()

        # A subject's tenant cannot be re-labelled by the header.
        forged = await globex.nc.request(
            "ledger.cmd.globex.get_lane",
            msgspec.json.encode({"op": "get_lane", "lane_id": lane.lane.id}),
            timeout=10,
            headers={TENANT_HEADER: "acme"},
        )
        assert b'"invalid_request"' in forged.data and b"run.started" not in forged.data

        # And on the wire: nothing else is open to globex's producer.
        violations = await attempts(
            urls["producer-globex"],
            publish=[
                "ledger.cmd.get_lane",
                "ledger.cmd.acme.get_lane",
                "ledger.checkpoint.get",
                "ledger.checkpoint.acme.get",
                "ledger.cmd.globex.x.get_lane",
                "$JS.API.STREAM.INFO.OBJ_LEDGER_CHECKPOINT_ARTIFACTS_acme",
                "$JS.API.STREAM.MSG.GET.OBJ_LEDGER_CHECKPOINT_ARTIFACTS_acme",
                "$JS.API.CONSUMER.CREATE.OBJ_LEDGER_CHECKPOINT_ARTIFACTS_acme",
                "$JS.API.STREAM.MSG.GET.OBJ_LEDGER_CHECKPOINT_ARTIFACTS",
                "$O.LEDGER_CHECKPOINT_ARTIFACTS_acme.M.x",
            ],
        )
        for subject in (
            "ledger.cmd.get_lane",
            "ledger.cmd.acme.get_lane",
            "ledger.checkpoint.get",
            "ledger.checkpoint.acme.get",
            "ledger.cmd.globex.x.get_lane",
            "$JS.API.STREAM.INFO.OBJ_LEDGER_CHECKPOINT_ARTIFACTS_acme",
            "$JS.API.STREAM.MSG.GET.OBJ_LEDGER_CHECKPOINT_ARTIFACTS_acme",
            "$JS.API.CONSUMER.CREATE.OBJ_LEDGER_CHECKPOINT_ARTIFACTS_acme",
            "$JS.API.STREAM.MSG.GET.OBJ_LEDGER_CHECKPOINT_ARTIFACTS",
            "$O.LEDGER_CHECKPOINT_ARTIFACTS_acme.M.x",
        ):
            assert refused(violations, subject), (subject, violations)

        # The shared producer stays trusted: it reads any tenant (ledger.cmd.<op>).
        async with await LedgerClient.connect(urls["producer"]) as trusted:
            assert (await trusted.load_session("s-acme", tenant="acme")).tenant == "acme"
            with pytest.raises(InvalidRequest) as ambiguous:  # acme's and globex's look-alike
                await trusted.load_session("s-acme")
            assert ambiguous.value.details["tenants"] == ["acme", "globex"]
            trusted_ckpt = CheckpointClient(trusted)
            with pytest.raises(InvalidRequest) as ambiguous:  # acme's and globex's checkpoint of one id
                await trusted_ckpt.get(anchored.id)
            assert ambiguous.value.details["path"] == "$.tenant"
            assert ambiguous.value.details["tenants"] == ["acme", "globex"]
            assert (await trusted_ckpt.get(anchored.id, tenant="acme")).key == "k-acme"
            assert (await trusted_ckpt.get(anchored.id, tenant="globex")).revision == 1
    finally:
        await globex.close()
        await acme.close()
        await service.stop()
        await sequencer.stop()
        await ckpt_nc.close()
        await ckpt_replies.close()
        await seq_nc.close()
        await seq_replies.close()
        store.close()


@pytest.mark.nats
async def test_a_tenant_producer_reads_no_other_tenants_blob_over_nats(tenant_server, passwords, tmp_path):
    """Content references under the rendered config: each tenant's blobs live
    in its own buckets (uploads, committed), which the sequencer creates on
    the tenant's first command. acme's producer uploads, appends with a
    reference (the sequencer copies the upload into the committed bucket),
    and reads its blob raw; the tail serves it to acme's token only; globex's
    producer can neither read, list nor write acme's buckets (nor the shared
    one) by raw JetStream object store calls."""
    from nats.js.object_store import ObjectStore

    from laneledger.contract.contentref import hex_of, refs_in
    from laneledger.contract.errors import BlobMissing
    from laneledger.contract.subjects import inbox_prefix
    from laneledger.sdk.blobstore import object_name
    from laneledger.sdk.objectstores import open_object_store, read_chunks
    from laneledger.services.tail.service import TailService, TailSettings

    urls = {
        user: url_for(tenant_server, user, passwords)
        for user in ("sequencer", "tail", "producer-acme", "producer-globex")
    }
    seq_nc, seq_replies = await connections_of(tenant_server, "sequencer", passwords)
    sequencer = deployed_sequencer(seq_nc, seq_replies, tmp_path / "ledger.db")
    await sequencer.start()
    tokens = {"acme": "acme-token-0123456789", "globex": "globex-token-0123456789"}
    tail_nc = await nats.connect(urls["tail"])
    tail = TailService(
        tail_nc, TailSettings(data_dir=tmp_path / "tail", access=AccessPolicy.from_tokens(tokens))
    )
    tail_port = await tail.start("127.0.0.1", 0)
    globex_errors: list[str] = []

    async def remember(exc: Exception) -> None:
        globex_errors.append(str(exc).lower())

    acme = await LedgerClient.connect(urls["producer-acme"], tenant="acme")
    globex = await LedgerClient.connect(urls["producer-globex"], tenant="globex")
    # globex's producer user on a bare connection, its violations reported here
    raw_globex = await nats.connect(
        urls["producer-globex"], error_cb=remember, inbox_prefix=inbox_prefix("globex")
    )
    try:
        big = {"text": "acme's private tool output " * 100}  # over 1 KiB: a blob
        # Before acme's first command it has no bucket, and may not create one
        # (STREAM.CREATE is refused below): the SDK has the sequencer create
        # them with a command that changes nothing.
        assert "OBJ_LEDGER_BLOBS_acme" not in {i.config.name for i in await seq_nc.jetstream().streams_info()}
        assert (await acme.blob_store("acme")).bucket == "LEDGER_BLOBS_acme"

        actor = await acme.ensure_actor("acme", "agent:a@1", "agent")
        lane = await LaneRecorder.open(acme, "acme", "s-acme", "r", "main", actor_id=actor.id)
        event = lane.event("stream.text_delta", actor_id=actor.id, payload=big)
        [(ref, size)] = refs_in(event["payload"])
        receipt = await lane.append([event])  # the SDK uploads the blob; the sequencer copies it
        assert receipt.last_seq == 1
        name = object_name(token("acme"), ref)

        # acme's producer, raw (through the ledger account's JetStream API,
        # JS.LEDGER.API): gets its committed blob by message (no consumer:
        # laneledger.sdk.objectstores), and puts another in its uploads
        # bucket, each opened bound to its stream: nats-py's own read would
        # first ask STREAM.NAMES, which producers are not granted.
        acme_obs = await open_object_store(acme.js, "LEDGER_BLOBS_acme")
        info = await acme_obs.get_info(name)
        assert len(await read_chunks(acme.js, "LEDGER_BLOBS_acme", info.nuid, info.size)) == size
        acme_uploads = await open_object_store(acme.js, "LEDGER_UPLOADS_acme")
        await acme_uploads.put(object_name(token("acme"), "sha256:" + "0" * 64), b"acme's own")

        # The tail serves it to acme's token, and to globex's it is missing.
        async with aiohttp.ClientSession(f"http://127.0.0.1:{tail_port}") as http:
            for who, status in (("acme", 200), ("globex", 404)):
                async with http.get(
                    f"/api/v1/blobs/{hex_of(ref)}", headers={"Authorization": f"Bearer {tokens[who]}"}
                ) as response:
                    body = await response.read()
                    assert response.status == status, (who, body)
                    assert (b"acme's private tool output" in body) == (who == "acme")

        # globex's producer: its first command creates its own bucket; acme's
        # reference is not a blob of globex's (refused before it is sent).
        own = await LaneRecorder.open(globex, "globex", "s-g", "r", "main")
        stolen = own.event(
            "stream.text_delta", actor_id=actor.id, payload={"text": {"_ref": ref, "size_bytes": size}}
        )
        with pytest.raises(BlobMissing):
            await own.append([stolen])
        globex_blobs = await globex.blob_store("globex")
        assert (globex_blobs.bucket, globex_blobs.uploads.bucket) == (
            "LEDGER_BLOBS_globex",
            "LEDGER_UPLOADS_globex",
        )

        # Raw JetStream calls on acme's buckets and the shared one: refused.
        # (A refused request is dropped by the server: the caller times out.)
        js = raw_globex.jetstream(timeout=0.5, prefix=TENANT_JS_API_PREFIX)
        for bucket in ("LEDGER_BLOBS_acme", "LEDGER_UPLOADS_acme", "LEDGER_BLOBS"):
            with pytest.raises(nats.errors.TimeoutError):
                await js.object_store(bucket)
            raw = ObjectStore(bucket, f"OBJ_{bucket}", js)  # skip the stream lookup
            with pytest.raises(nats.errors.TimeoutError):
                await raw.get(name)
            with pytest.raises(nats.errors.TimeoutError):
                await raw.list()
        assert any("permissions violation" in e for e in globex_errors), globex_errors
        subjects = [
            f"{prefix}.{api}.OBJ_{bucket}_acme"
            for bucket in ("LEDGER_BLOBS", "LEDGER_UPLOADS")
            for prefix in ("$JS.API", TENANT_JS_API_PREFIX)
            for api in ("STREAM.INFO", "STREAM.MSG.GET", "DIRECT.GET", "CONSUMER.CREATE", "STREAM.PURGE")
        ]
        # nor may it create a consumer on its own buckets (a push consumer
        # delivers where its creator says)
        subjects += [
            f"{TENANT_JS_API_PREFIX}.CONSUMER.CREATE.OBJ_{bucket}_globex"
            for bucket in ("LEDGER_BLOBS", "LEDGER_UPLOADS", "LEDGER_CHECKPOINT_ARTIFACTS")
        ]
        subjects += [
            "$O.LEDGER_BLOBS_acme.C.x",
            "$O.LEDGER_BLOBS_acme.M.x",
            "$O.LEDGER_UPLOADS_acme.M.x",
            "$JS.API.STREAM.MSG.GET.OBJ_LEDGER_BLOBS",
            "$O.LEDGER_BLOBS.M.x",
            "$JS.API.STREAM.CREATE.OBJ_LEDGER_BLOBS_globex",
            "$JS.API.STREAM.CREATE.OBJ_LEDGER_UPLOADS_globex",
            "$JS.API.STREAM.PURGE.OBJ_LEDGER_BLOBS_globex",
            "$JS.API.STREAM.DELETE.OBJ_LEDGER_BLOBS_globex",
            "$JS.API.STREAM.MSG.DELETE.OBJ_LEDGER_BLOBS_globex",
            # its own committed blobs are read only: no chunk, no meta (a delete is a meta)
            "$O.LEDGER_BLOBS_globex.C.x",
            "$O.LEDGER_BLOBS_globex.M.x",
        ]
        violations = await attempts(urls["producer-globex"], publish=subjects)
        for subject in subjects:
            assert refused(violations, subject), (subject, violations)
        # The control: its own buckets' subjects are open to it (reading the
        # committed one, writing the uploads).
        assert (
            await attempts(
                urls["producer-globex"],
                publish=[
                    f"{TENANT_JS_API_PREFIX}.STREAM.INFO.OBJ_LEDGER_BLOBS_globex",
                    f"{TENANT_JS_API_PREFIX}.STREAM.MSG.GET.OBJ_LEDGER_BLOBS_globex",
                    f"{TENANT_JS_API_PREFIX}.STREAM.INFO.OBJ_LEDGER_UPLOADS_globex",
                    "$O.LEDGER_UPLOADS_globex.M.x",
                    # nats-py purges a failed put's chunks: its uploads are its own
                    f"{TENANT_JS_API_PREFIX}.STREAM.PURGE.OBJ_LEDGER_UPLOADS_globex",
                ],
            )
            == []
        )
    finally:
        await raw_globex.close()
        await globex.close()
        await acme.close()
        await tail.stop()
        await tail_nc.close()
        await sequencer.stop()
        await seq_nc.close()
        await seq_replies.close()


def test_a_request_subject_names_its_tenant_by_token_and_header():
    """Hashed tenant tokens travel with the tenant in a header that must hash
    to the subject's token; anything else is a typed invalid_request."""
    base = Subjects().command_base
    hashed = "acme corp/eu"
    subject = Subjects().command("get_lane", hashed)
    assert subject == f"ledger.cmd.{token(hashed)}.get_lane" and token(hashed).startswith("_")
    assert RequestSubject.parse(subject, base, tenant_headers(hashed)) == RequestSubject(
        op="get_lane", tenant=hashed
    )
    assert RequestSubject.parse("ledger.cmd.acme.get_lane", base, None).tenant == "acme"
    assert tenant_headers("acme") is None  # the token is the tenant
    assert RequestSubject.parse("ledger.cmd.get_lane", base, None) == RequestSubject(
        op="get_lane", tenant=None
    )
    for bad_subject, headers in (
        (subject, None),  # a hash with no header
        (subject, {TENANT_HEADER: "acme"}),  # a header of another token
        ("ledger.cmd.acme.get_lane", {TENANT_HEADER: "globex"}),
        (subject, {TENANT_HEADER: "%ff"}),  # not UTF-8
        ("ledger.cmd.a.b.get_lane", None),
    ):
        with pytest.raises(InvalidRequest):
            RequestSubject.parse(bad_subject, base, headers)
