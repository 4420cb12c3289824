"""No secret in a referenced blob reaches the committed bucket (spec/content.md,
"Redaction"): the sequencer looks for secret-shaped values in a tenant's
upload before it copies it, with the redaction rules of inline values; one
holding any is erased from the uploads bucket and the append refused."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from ledger_fixtures import start_sequencer
from polling import eventually
from secret_corpus import PEM, SHAPED_SECRETS
from test_secret_leaks import files_holding

from laneledger.contract import errors
from laneledger.contract.redaction import DEFAULT_REDACTOR, marker
from laneledger.contract.secretscan import REACH, WINDOW, secret_rules
from laneledger.runtime.tenants import parse_tenants
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.sequencer.service import SequencerSettings

GITHUB = SHAPED_SECRETS[4][1]
LOG = ("build step ok\n" * 200).encode()  # over 1 KiB: what becomes a blob


@pytest.mark.parametrize(
    ("data", "rules"),
    [
        (msgspec.json.encode({"stdout": LOG.decode(), "env": {"api_key": "plainvalue"}}), {"secret_key"}),
        (msgspec.json.encode(LOG.decode() + f"token {GITHUB}\n"), {"github_token"}),
        # Escaped in JSON: the value decoded is what is looked at.
        (
            json.dumps(LOG.decode() + GITHUB).replace(GITHUB, GITHUB.replace("_", "\\u005f")).encode(),
            {"github_token"},
        ),
        (
            b"\x00\xff\x10binary" * 300 + b"\x00" + GITHUB.encode() + b"\x00" * 50,
            {"github_token"},
        ),  # not JSON
        (msgspec.json.encode(LOG.decode()), set()),
    ],
    ids=["json-key", "json-shape", "json-escaped", "binary", "clean"],
)
def test_a_blob_is_looked_at_with_the_inline_rules(data: bytes, rules: set[str]) -> None:
    assert secret_rules(data, DEFAULT_REDACTOR) == rules


@pytest.mark.parametrize(("rule", "secret"), [("github_token", GITHUB), ("pem_private_key", PEM)])
def test_a_secret_in_a_large_blob_is_found_wherever_it_sits(rule: str, secret: str) -> None:
    """Long text is looked at in overlapping windows (a regex call holds the
    GIL): a secret across any window boundary lies whole in the next window."""
    step = WINDOW - REACH
    size = 1 << 20
    for at in (0, WINDOW - 100, step - 10, 5 * step - len(secret) // 2, 7 * step + WINDOW - 1, size):
        data = bytearray(b"x " * (size // 2))
        data[at:at] = f" {secret} ".encode()
        for blob in (bytes(data), msgspec.json.encode({"stdout": data.decode()})):
            assert secret_rules(blob, DEFAULT_REDACTOR) == {rule}, at


def test_what_the_sdk_redacted_and_externalized_is_clean() -> None:
    """A marker under a secret-named key is what the SDK leaves: not a secret."""
    data = msgspec.json.encode(
        {"env": {"api_key": marker("secret_key"), "home": "/root"}, "log": LOG.decode()}
    )
    assert secret_rules(data, DEFAULT_REDACTOR) == set()


async def test_an_upload_holding_a_secret_is_refused_erased_and_never_committed(
    nats_server, nc, js, tmp_path: Path
) -> None:
    settings = SequencerSettings(tenants=parse_tenants("[tenants.acme]\n[tenants.globex]\n"))
    sequencer = await start_sequencer(nc, tmp_path / "ledger.db", settings)
    try:
        async with await LedgerClient.connect(nats_server.url, tenant="acme", timeout=10.0) as acme:
            agent = await acme.ensure_actor("acme", "agent:acme", "agent")  # makes its buckets
            lane = await acme.create_lane("acme", "s", "r", "main", actor_id=agent.id)
            blobs = await acme.blob_store()
            # An upload no append references (yet): it stays in the uploads
            # bucket's block, where a purge alone would leave the secret's bytes.
            await blobs.put("acme", LOG + b"waiting-upload\n")
            # A producer that uploads without the SDK's redaction: the raw bytes.
            data = LOG + f"export GITHUB_TOKEN={GITHUB}\n".encode() + LOG
            ref = await blobs.put("acme", data)
            event = make_event(
                lane.id,
                "ext.acme.x",
                actor_id=agent.id,
                payload={"log": {"_ref": ref, "size_bytes": len(data)}},
            )
            with pytest.raises(errors.InvalidRequest) as refused:
                await acme.append(lane, 0, [event], retries=0)
            details = refused.value.details
            assert details["reason"] == "blob_secret" and details["ref"] == ref
            assert details["event_id"] == event["id"] and details["path"] == "$.events[0].payload"
            assert "github_token" in details["rules"] or "secret_assignment" in details["rules"]
            assert GITHUB not in json.dumps(details)
            assert (await acme.get_lane(lane.id)).last_seq == 0
            # Neither bucket holds it; the uploads bucket was erased, not only purged.
            assert not await blobs.has("acme", ref, len(data))
            assert (await js.stream_info("OBJ_LEDGER_BLOBS_acme")).state.messages == 0
            # A clean blob still goes through.
            clean = LOG + b"nothing to hide\n"
            good = make_event(
                lane.id,
                "ext.acme.x",
                actor_id=agent.id,
                payload={"log": {"_ref": await blobs.put("acme", clean), "size_bytes": len(clean)}},
            )
            assert (await acme.append(lane, 0, [good])).last_seq == 1
    finally:
        await sequencer.stop()
    store = tmp_path / "nats"
    await eventually(  # the block files searched hold what they should
        lambda: files_holding(store, [b"waiting-upload"]), what="the waiting upload on disk", timeout=10
    )
    assert files_holding(store, [GITHUB.encode()]) == {}
