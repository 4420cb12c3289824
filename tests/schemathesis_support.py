"""Schemathesis against a service's HTTP API as served (not a test module):
the machinery the tail's and the checkpoint service's fuzz tests share.

``fuzz_every_operation`` gives every operation of a served OpenAPI document
generated requests (valid and invalid by the document; path and query
parameters sometimes swapped for ids that exist, so reads hit data). Every
answer must be something other than a 5xx and conform to the document: a
listed status, a declared content type, a body matching its schema; and a
request the document calls invalid (schemathesis's negative cases) must be
refused with a 4xx. ``bearer`` is the one place that says how a request
authenticates; ``LANELEDGER_FUZZ_EXAMPLES`` sets the examples per operation
for a long run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import requests
from bad_input_strategies import fuzz_examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis import checks as sc

CHECKS = [
    sc.not_a_server_error,
    sc.status_code_conformance,
    sc.content_type_conformance,
    sc.response_schema_conformance,
    sc.response_headers_conformance,
    sc.negative_data_rejection,
]
SSE = "text/event-stream"


def bearer(token: str) -> dict[str, str]:
    """The headers every request carries (spec/tail.md, "Access"; the
    checkpoint service reads tokens the same way)."""
    return {"Authorization": f"Bearer {token}"}


def fuzz_operation(
    operation, base_url: str, headers: dict[str, str], known: dict[str, Any], examples: int
) -> set[int]:
    """Generated cases of one operation against the running service; raises on
    the first that fails a check (after hypothesis has shrunk it). Returns
    the statuses seen."""
    session = requests.Session()
    statuses: set[int] = set()

    def with_known_ids(case, use: list[bool]):
        # Some cases name things that exist, so reads get past 404.
        for params, use_it in zip((case.path_parameters, case.query), use, strict=True):
            if params and use_it:
                for name in list(params):
                    if name in known:
                        params[name] = known[name]
        return case

    # The token is fixed, not generated: every case is authenticated, so a
    # negative case is refused for what is wrong with it, not for a lost token.
    valid = operation.as_strategy(GenerationMode.POSITIVE, headers=headers)
    invalid = operation.as_strategy(GenerationMode.NEGATIVE, headers=headers)
    strategy = st.builds(with_known_ids, valid, st.lists(st.booleans(), min_size=2, max_size=2)) | invalid

    def send(case) -> None:
        # Sent with requests directly, streaming: schemathesis's own call
        # reads a whole event stream, which for a live tail never ends.
        kwargs = case.as_transport_kwargs(base_url=base_url)
        response = session.request(**kwargs, timeout=30, stream=True)
        statuses.add(response.status_code)
        try:
            if response.status_code == 200 and response.headers.get("Content-Type", "").startswith(SSE):
                # A live tail never ends by itself: its headers and first
                # line are what can be checked.
                assert next(response.iter_lines()) == b"retry: 1000", case
                return
            case.validate_response(response, checks=CHECKS, headers=headers)
        finally:
            response.close()

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def each(case) -> None:
        send(case)

    each()
    # Random cases can all miss the known ids (about 1 run in 12 did, for the
    # run read). The plainest valid requests settle whether the operation can
    # succeed: the known ids, with no optional parameter, then with one.
    for plain in _plainest_cases(operation, headers, known):
        if any(200 <= status < 300 for status in statuses):
            break
        send(plain)
    return statuses


def _plainest_cases(operation, headers: dict[str, str], known: dict[str, Any]):
    """Cases with every required path and query parameter set to its known id
    and nothing else, then the same with each optional one that has a known
    id (for operations needing one of several); none when a required
    parameter has no known value."""
    required: dict[str, dict[str, Any]] = {"path": {}, "query": {}}
    optional: list[str] = []
    for parameter in operation.iter_parameters():
        if parameter.location not in required:
            continue
        if parameter.is_required:
            if parameter.name not in known:
                return
            required[parameter.location][parameter.name] = known[parameter.name]
        elif parameter.location == "query" and parameter.name in known:
            optional.append(parameter.name)
    for extra in [None, *optional]:
        query = dict(required["query"], **({extra: known[extra]} if extra else {}))
        yield operation.Case(path_parameters=required["path"], query=query, headers=headers)


async def fuzz_every_operation(
    schema, base_url: str, headers: dict[str, str], known: dict[str, Any], examples: int = 40
) -> list[str]:
    """Fuzz every operation of the served document; fail listing every
    operation that failed a check. Returns the operations that never
    answered 2xx, with the statuses they gave."""
    failures: dict[str, BaseException] = {}
    never_ok = []
    for result in schema.get_all_operations():
        operation = result.ok()
        try:
            statuses = await asyncio.to_thread(
                fuzz_operation, operation, base_url, headers, known, fuzz_examples(examples)
            )
        except Exception as exc:  # noqa: BLE001 - collected: every operation is reported
            failures[operation.label] = exc
            continue
        if not any(200 <= status < 300 for status in statuses):
            never_ok.append(f"{operation.label}: {sorted(statuses)}")
    assert not failures, "\n\n".join(f"{label}: {exc}" for label, exc in failures.items())
    return never_ok
