"""Schemathesis against the tail's HTTP API, as served: a real nats-server, the
real sequencer, some committed events, and the tail as its own OS process.

Every operation of the OpenAPI document the tail serves at
``/api/v1/openapi.json`` gets generated requests (valid and invalid by the
document; path parameters sometimes swapped for ids that exist, so reads hit
data). Every answer must be something other than a 5xx and conform to the
document: a listed status, a declared content type, a body matching its
schema; and a request the document calls invalid (schemathesis's negative
cases) must be refused with a 4xx.

It runs twice, with the operator's bearer token and with a tenant's
(``bearer`` below is the one place that says how a request authenticates).
``LANELEDGER_FUZZ_EXAMPLES`` sets the examples per operation for a long run.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis import checks as sc

from bad_input_strategies import fuzz_examples
from laneledger.client import LedgerClient
from tail_support import TailProcess, ev, fill, new_lane, start_tail  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(300)

CHECKS = [sc.not_a_server_error, sc.status_code_conformance, sc.content_type_conformance,
          sc.response_schema_conformance, sc.response_headers_conformance,
          sc.negative_data_rejection]
SSE = "text/event-stream"


def bearer(token: str) -> dict[str, str]:
    """The headers every request carries (the tail's access, spec/tail.md)."""
    return {"Authorization": f"Bearer {token}"}


def fuzz_operation(operation, base_url: str, headers: dict[str, str], known: dict[str, Any],
                   examples: int) -> set[int]:
    """Generated cases of one operation against the running tail; raises on
    the first that fails a check (after hypothesis has shrunk it). Returns
    the statuses seen."""
    session = requests.Session()
    statuses: set[int] = set()

    def with_known_ids(case, use: list[bool]):
        # Some cases name things that exist, so reads get past 404.
        for params, use_it in zip((case.path_parameters, case.query), use):
            if params and use_it:
                for name in list(params):
                    if name in known:
                        params[name] = known[name]
        return case

    # The token is fixed, not generated: every case is authenticated, so a
    # negative case is refused for what is wrong with it, not for a lost token.
    valid = operation.as_strategy(GenerationMode.POSITIVE, headers=headers)
    invalid = operation.as_strategy(GenerationMode.NEGATIVE, headers=headers)
    strategy = st.builds(with_known_ids, valid, st.lists(st.booleans(), min_size=2, max_size=2)) \
        | invalid

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def each(case) -> None:
        # Sent with requests directly, streaming: schemathesis's own call
        # reads a whole event stream, which for a live tail never ends.
        kwargs = case.as_transport_kwargs(base_url=base_url)
        response = session.request(**kwargs, timeout=30, stream=True)
        statuses.add(response.status_code)
        try:
            if response.status_code == 200 and response.headers.get(
                    "Content-Type", "").startswith(SSE):
                # A live tail never ends by itself: its headers and first
                # line are what can be checked.
                assert next(response.iter_lines()) == b"retry: 1000", case
                return
            case.validate_response(response, checks=CHECKS, headers=headers)
        finally:
            response.close()

    each()
    return statuses


async def test_the_tail_api_survives_schemathesis(client: LedgerClient, actor, nats_server,
                                                   tmp_path):
    lane = await new_lane(client, actor)
    positions = await fill(client, lane, actor, 30, per_append=10)
    await client.append(lane, 30, [ev(lane, actor, "session.completed", subject_id=lane.id)])
    # A second tenant, so that the operator's reads span tenants.
    await new_lane(client, await client.ensure_actor("globex", "agent:g@1", "agent"),
                   session="g1", tenant="globex")
    token, tenant_token = secrets.token_hex(16), secrets.token_hex(16)
    (tmp_path / "operator.token").write_text(token + "\n")
    (tmp_path / "tokens").write_text(f"acme {tenant_token}\n")
    tail = await TailProcess(nats_server.url, tmp_path / "tail", "--tokens-file",
                             str(tmp_path / "tokens"), "--operator-token-file",
                             str(tmp_path / "operator.token")).start()
    try:
        headers = bearer(token)
        await wait_until(lambda: requests.get(f"{tail.url}/api/v1/verify", headers=headers,
                                              timeout=10).json().get("last_position", 0)
                         > positions[-1])
        schema = schemathesis.openapi.from_url(f"{tail.url}/api/v1/openapi.json")
        known = {"lane_id": lane.id, "session_id": "s1", "run_id": "r1",
                 "position": positions[5], "tenant": "acme"}
        never_ok = await fuzz_every_operation(schema, tail.url, headers, known)
        # Authenticated, and aimed at data that exists: every read succeeded
        # at least once (there are no blobs to read).
        assert [line for line in never_ok if "/blobs/" not in line] == [], never_ok
        # A tenant's token: the same answers, narrowed to its tenant.
        await fuzz_every_operation(schema, tail.url, bearer(tenant_token), known)
        # The Korg appends it made went through the sequencer like any other.
        report = requests.get(f"{tail.url}/api/v1/verify", headers=headers, timeout=30).json()
        assert report["intact"] is True, report
    finally:
        tail.stop()


async def fuzz_every_operation(schema, base_url: str, headers: dict[str, str],
                               known: dict[str, Any]) -> list[str]:
    """Fuzz every operation of the served document; fail listing every
    operation that failed a check. Returns the operations that never
    answered 2xx, with the statuses they gave."""
    failures: dict[str, BaseException] = {}
    never_ok = []
    for result in schema.get_all_operations():
        operation = result.ok()
        try:
            statuses = await asyncio.to_thread(fuzz_operation, operation, base_url, headers,
                                               known, fuzz_examples(40))
        except Exception as exc:  # noqa: BLE001 - collected: every operation is reported
            failures[operation.label] = exc
            continue
        if not any(200 <= status < 300 for status in statuses):
            never_ok.append(f"{operation.label}: {sorted(statuses)}")
    assert not failures, "\n\n".join(f"{label}: {exc}" for label, exc in failures.items())
    return never_ok


async def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(predicate):
        assert asyncio.get_running_loop().time() < deadline, "not reached in time"
        await asyncio.sleep(0.1)


async def test_a_long_documented_request_line_gets_a_typed_answer(client, start_tail):
    """Found by the test above: four query parameters of 256 four-byte
    characters (allowed by the document) make a 12 KB request line, past
    aiohttp's default limit (8190), whose plain-text 400 no middleware sees."""
    tail = await start_tail()
    text = "\U0001d11e" * 256
    params = {name: text for name in ("tenant", "session_id", "run_id", "lane_id")}
    answer = await tail.api.get("/api/v1/events", params={**params, "from_position": "x"})
    assert answer.status == 400 and answer.error["details"]["parameter"] == "from_position"
