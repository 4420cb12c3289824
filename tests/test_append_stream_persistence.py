"""How each stream is persisted (spec/replication.md, "Durability"): on one
server the append requests are not fsynced one by one (their promise is the
receipt; a lost request is resent), while the transaction log and the
committed stream, which a receipt reports, are. An append stream made before
this, which JetStream cannot switch in place, keeps working and is named in a
warning; a log or committed stream found in the async mode is refused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from ledger_fixtures import start_sequencer
from nats.js.api import PersistMode

from laneledger.contract.errors import InternalError
from laneledger.contract.subjects import Subjects
from laneledger.runtime.tenants import TenantLimits, parse_tenants
from laneledger.services.sequencer.service import SequencerSettings
from laneledger.services.sequencer.streams import (
    append_stream_config,
    ensure_stream,
    events_stream_config,
    tenant_append_stream_config,
    txlog_stream_config,
)

SUBJECTS = Subjects()


def test_only_r1_append_streams_skip_the_per_write_fsync() -> None:
    assert append_stream_config("A", SUBJECTS, 1).persist_mode == "async"
    assert tenant_append_stream_config("A_acme", SUBJECTS, "acme", TenantLimits(), 1).persist_mode == "async"
    # JetStream refuses the async mode on a replicated stream: R3 stays as is.
    assert append_stream_config("A", SUBJECTS, 3).persist_mode is None
    # What a receipt reports is never in the async mode.
    assert txlog_stream_config(SUBJECTS, 1, atomic=True).persist_mode is None
    assert events_stream_config(SUBJECTS.events_stream, SUBJECTS, 1, atomic=True).persist_mode is None


@pytest.mark.nats
@pytest.mark.parametrize(
    "tenants", [None, "[tenants.acme]\n[tenants.globex]\n"], ids=["shared", "per-tenant"]
)
async def test_the_sequencer_makes_async_append_streams_and_synced_commit_streams(
    nats_server, nc, js, tmp_path: Path, tenants: str | None
) -> None:
    settings = SequencerSettings(tenants=parse_tenants(tenants) if tenants else None)
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        append_streams = (
            ["LEDGER_APPEND_acme", "LEDGER_APPEND_globex"] if tenants else [SUBJECTS.append_stream]
        )
        for name in append_streams:
            assert (await js.stream_info(name)).config.persist_mode == "async", name
        for name in (SUBJECTS.txlog_stream, SUBJECTS.events_stream):
            assert (await js.stream_info(name)).config.persist_mode in (None, "default"), name
    finally:
        await sequencer.stop()


@pytest.mark.nats
async def test_an_append_stream_made_synced_is_kept_and_named_in_a_warning(
    js, caplog: pytest.LogCaptureFixture
) -> None:
    wanted = append_stream_config(SUBJECTS.append_stream, SUBJECTS, 1)
    older = append_stream_config(SUBJECTS.append_stream, SUBJECTS, 1)
    older.persist_mode = None  # as a sequencer before the async mode made it
    await js.add_stream(older)
    with caplog.at_level(logging.WARNING, logger="laneledger.sequencer"):
        await ensure_stream(js, wanted)
    assert (await js.stream_info(SUBJECTS.append_stream)).config.persist_mode in (None, "default")
    [warning] = [r.getMessage() for r in caplog.records if "persist mode" in r.getMessage()]
    assert SUBJECTS.append_stream in warning and "nats stream rm" in warning
    caplog.clear()
    await ensure_stream(
        js, append_stream_config("OTHER", Subjects("other"), 1)
    )  # made anew: async, no warning
    await ensure_stream(js, append_stream_config("OTHER", Subjects("other"), 1))
    assert not [r for r in caplog.records if "persist mode" in r.getMessage()]


@pytest.mark.nats
@pytest.mark.parametrize("stream", ["events", "txlog"])
async def test_a_commit_stream_found_async_is_refused_at_start(nc, js, tmp_path: Path, stream: str) -> None:
    """Made async by hand (or by anything else): its acknowledgements do not
    mean "on disk", which a receipt reports. The sequencer refuses to start,
    names the stream and says how to make it anew; the stream is untouched."""
    config = (
        events_stream_config(SUBJECTS.events_stream, SUBJECTS, 1)
        if stream == "events"
        else txlog_stream_config(SUBJECTS, 1)
    )
    config.persist_mode = PersistMode.ASYNC
    await js.add_stream(config)
    with pytest.raises(InternalError) as refused:
        await start_sequencer(nc, tmp_path / "ledger.db", SequencerSettings())
    assert refused.value.details["stream"] == config.name
    assert f"nats stream rm {config.name}" in refused.value.message
    assert (await js.stream_info(config.name)).config.persist_mode == "async"
