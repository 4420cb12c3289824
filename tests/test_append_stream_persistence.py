"""How each stream is persisted (spec/replication.md, "Durability"): on one
server the append requests are not fsynced one by one (their promise is the
receipt; a lost request is resent), nor, with the transaction log on, the
committed stream (no receipt reports it; it is refilled from the ledger),
while the log is. An append stream made before this, which JetStream cannot
switch in place, keeps working and is named in a warning; a committed stream
made async, met by a sequencer with the log off, is refused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from ledger_fixtures import start_sequencer

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


def test_the_committed_stream_is_async_only_behind_the_log_on_one_server() -> None:
    behind = events_stream_config(SUBJECTS.events_stream, SUBJECTS, 1, atomic=True, behind_log=True)
    assert behind.persist_mode == "async"
    assert not behind.allow_atomic  # JetStream refuses the two together (error 10052)
    replicated = events_stream_config(SUBJECTS.events_stream, SUBJECTS, 3, atomic=True, behind_log=True)
    assert replicated.persist_mode is None and replicated.allow_atomic
    alone = events_stream_config(SUBJECTS.events_stream, SUBJECTS, 1, atomic=True)  # --txlog off
    assert alone.persist_mode is None and alone.allow_atomic


@pytest.mark.nats
@pytest.mark.parametrize(
    "tenants", [None, "[tenants.acme]\n[tenants.globex]\n"], ids=["shared", "per-tenant"]
)
async def test_the_sequencer_makes_async_append_streams_and_a_synced_log(
    nats_server, nc, js, tmp_path: Path, tenants: str | None
) -> None:
    settings = SequencerSettings(tenants=parse_tenants(tenants) if tenants else None)
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        append_streams = (
            ["LEDGER_APPEND_acme", "LEDGER_APPEND_globex"] if tenants else [SUBJECTS.append_stream]
        )
        for name in [*append_streams, SUBJECTS.events_stream]:
            assert (await js.stream_info(name)).config.persist_mode == "async", name
        assert (await js.stream_info(SUBJECTS.txlog_stream)).config.persist_mode in (None, "default")
    finally:
        await sequencer.stop()


@pytest.mark.nats
async def test_without_the_log_the_committed_stream_is_synced_and_an_async_one_refused(
    nats_server, nc, js, tmp_path: Path
) -> None:
    sequencer = await start_sequencer(nc, tmp_path / "alone.db", SequencerSettings(txlog=False))
    try:
        info = await js.stream_info(SUBJECTS.events_stream)
        assert info.config.persist_mode in (None, "default") and info.config.allow_atomic
    finally:
        await sequencer.stop()
    await js.delete_stream(SUBJECTS.events_stream)
    # Made by a sequencer with the log on, then met by one with it off: its
    # acknowledgements do not mean "on disk", which a receipt there reports.
    behind = await start_sequencer(nc, tmp_path / "behind.db", SequencerSettings())
    await behind.stop()
    with pytest.raises(InternalError) as refused:
        await start_sequencer(nc, tmp_path / "alone.db", SequencerSettings(txlog=False))
    assert refused.value.details["stream"] == SUBJECTS.events_stream
    assert f"nats stream rm {SUBJECTS.events_stream}" in refused.value.message
    assert (await js.stream_info(SUBJECTS.events_stream)).config.persist_mode == "async"  # untouched


@pytest.mark.nats
async def test_a_committed_stream_made_synced_is_kept_behind_the_log_with_a_warning(
    nats_server, nc, js, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    older = events_stream_config(SUBJECTS.events_stream, SUBJECTS, 1, atomic=True)  # before this change
    await js.add_stream(older)
    with caplog.at_level(logging.WARNING, logger="laneledger.sequencer"):
        sequencer = await start_sequencer(nc, tmp_path / "ledger.db", SequencerSettings())
    try:
        info = await js.stream_info(SUBJECTS.events_stream)
        assert info.config.persist_mode in (None, "default") and info.config.allow_atomic
        assert sequencer.mirror.atomic  # its rounds still go out as atomic batches
    finally:
        await sequencer.stop()
    [warning] = [r.getMessage() for r in caplog.records if "persist mode" in r.getMessage()]
    assert SUBJECTS.events_stream in warning and "nats stream rm" in warning


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
