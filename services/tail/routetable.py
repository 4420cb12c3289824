"""The tail's routes as its OpenAPI 3.1 document shows them, and the document
generated from them, served at ``/api/v1/openapi.json``.

Each ``Operation`` names the Struct its handler's parameters are
(``queries.py``) and the Struct it answers with (``answers/``), or for what
is not JSON (the live tail's event stream, blobs, the transparency log's
notes, the console's files) the response as the document has it. The
parameters and the schemas are generated from those Structs
(``laneledger.runtime.apidoc``), so the document cannot drift from them.
``tests/test_tail_openapi_document.py`` checks it names exactly the routes
served; every tail test checks its answers against it (``tests/tail_support.py``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from laneledger.contract.model import Action, Attempt, CommittedEvent, Lane, Turn
from laneledger.runtime.access import ACCESS_TOKEN_PARAMETER
from laneledger.runtime.apidoc import (
    JSON_MEDIA,
    Operation,
    answer_schemas,
    document,
    openapi_paths,
    operation_paths,
    ops_paths,
    parameter,
    schema_ref,
    secure_guarded,
)
from laneledger.runtime.httpjson import json_response

from . import queries as q
from .answers.activity import Activity
from .answers.causal import CausalTree, EventCausation
from .answers.costs import CostReport
from .answers.history import Inspection, LaneEvents, Run, Session
from .answers.korg import (
    KorgEnvelope,
    KorgHeads,
    KorgLedgers,
    KorgPage,
    KorgRecord,
    KorgSession,
    KorgSkeletonPage,
)
from .answers.sessions import SessionPage
from .answers.timeline import Timeline
from .answers.tlog import SessionBundle, TlogConsistency, TlogCosigned
from .answers.verify import VerifyReport
from .queries import MAX_COSIGNED_BYTES

TEXT = "text/plain"
# The typed errors a read from the read model may answer: 400 for a parameter
# it refuses, 404 for what is absent, 500 for what it cannot read.
READ_ERRORS = (400, 404, 500)
# A history read also asks the sequencer (503/504) and holds read memory (429).
HISTORY_ERRORS = (400, 404, 429, 503, 504)

_BLOB_BYTES = {
    "description": "the blob's bytes; content type sniffed",
    "content": {
        "application/octet-stream": {
            "schema": {"type": "string", "contentMediaType": "application/octet-stream"}
        },
        JSON_MEDIA: {"schema": {}},
        TEXT: {"schema": {"type": "string"}},
    },
}
_NOTE = {"description": "a C2SP signed note", "content": {TEXT: {"schema": {"type": "string"}}}}
_TEXT_FILE = {"schema": {"type": "string"}}

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "/",
        "console",
        "the web console (HTML): live tail, session view, costs",
        {"description": "the console", "content": {"text/html": _TEXT_FILE}},
    ),
    Operation(
        "/console/{asset}",
        "consoleAsset",
        "a static file of the web console",
        {"description": "the file", "content": {"text/javascript": _TEXT_FILE, "text/css": _TEXT_FILE}},
        params=q.ConsoleAssetQuery,
        errors=(404,),
    ),
    Operation(
        "/api/v1/events",
        "tailEvents",
        "live tail (server-sent events): backfill after the resume position, then live",
        {
            "description": "an event stream",
            "content": {
                "text/event-stream": {**_TEXT_FILE, "x-data-schema": schema_ref(CommittedEvent.__name__)}
            },
        },
        params=q.TailQuery,
        errors=(400, 429),
        description=(
            "Frames: `id: <position>`, `event: ledger-event`, `data: <CommittedEvent JSON>`. "
            "Idle connections get `: keepalive` comments. A tail that names run_id (or else "
            "session_id) ends after that run's (session's) terminal event with an "
            "`event: end` frame whose id is the terminal event's position."
        ),
        extra_parameters=(
            parameter(
                "Last-Event-ID",
                "header",
                {"type": "string", "pattern": "^[0-9]+$"},
                "as from_position, and wins over it",
            ),
        ),
    ),
    Operation(
        "/api/v1/events/{position}",
        "getEvent",
        "one committed event by ledger position",
        CommittedEvent,
        "the committed event",
        params=q.EventQuery,
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/v1/events/{position}/causation",
        "eventCausation",
        "an event's cause and the events it caused (same tenant), oldest first",
        EventCausation,
        "its cause and what it caused",
        params=q.CausationQuery,
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/v1/lanes/{lane_id}/events",
        "laneEvents",
        "a lane's events; cursor is a lane seq (a position with with_origin)",
        LaneEvents,
        "one page",
        params=q.LaneEventsQuery,
        errors=HISTORY_ERRORS,
    ),
    Operation(
        "/api/v1/sessions",
        "sessions",
        "the sessions index: one summary per session, newest (last event) first",
        SessionPage,
        "a page of sessions",
        params=q.SessionsQuery,
        errors=(400, 403, 500),
    ),
    Operation(
        "/api/v1/sessions/{session_id}",
        "getSession",
        "a session: runs, lanes, structure, and its events; cursor is a position",
        Session,
        "the session and one page of its events",
        params=q.SessionQuery,
        errors=HISTORY_ERRORS,
    ),
    Operation(
        "/api/v1/sessions/{session_id}/runs/{run_id}",
        "getRun",
        "a run: lanes, structure, and its events; cursor is a position",
        Run,
        "the run and one page of its events",
        params=q.RunQuery,
        errors=HISTORY_ERRORS,
    ),
    Operation(
        "/api/v1/sessions/{session_id}/runs/{run_id}/inspection",
        "inspectRun",
        "terminal events, linked checkpoints and unresolved attempts of a run",
        Inspection,
        "the run's inspection",
        params=q.InspectionQuery,
        errors=(400, 404, 503, 504),
    ),
    Operation(
        "/api/v1/sessions/{session_id}/causal-tree",
        "causalTree",
        "a session's causal tree: nodes (paged by position) with their cause, "
        "spines (main agent, sub-agents, forks) and rewinds",
        CausalTree,
        "one page of the tree",
        params=q.CausalTreeQuery,
        errors=(400, 404, 503, 504),
    ),
    Operation(
        "/api/v1/sessions/{session_id}/timeline",
        "sessionTimeline",
        "a session's turns and attempts as spans on a time axis, by lane "
        "(spans paged by the position of their opening event), with spawn links and retries",
        Timeline,
        "the session's lanes and one page of its spans",
        params=q.TimelineQuery,
        errors=(400, 404, 500, 503, 504),
    ),
    Operation(
        "/api/v1/sessions/{session_id}/activity",
        "sessionActivity",
        "a session's turns, actions and attempts with outcome, duration and cost, "
        "and its human-in-the-loop pauses, from its events",
        Activity,
        "the session's activity",
        params=q.OwnedSessionQuery,
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/v1/blobs/{sha256}",
        "getBlob",
        "a content-addressed blob, raw",
        _BLOB_BYTES,
        params=q.BlobQuery,
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/v1/verify",
        "verify",
        "recompute the hash chains of a lane, a session or (no parameter) the ledger",
        VerifyReport,
        "intact, or the first fault",
        params=q.VerifyQuery,
        errors=HISTORY_ERRORS,
    ),
    Operation(
        "/api/v1/costs",
        "costs",
        "cost.recorded totals by currency, model and tenant, and a series over time",
        CostReport,
        "the report",
        params=q.CostsQuery,
        errors=(400, 403, 500),
    ),
    # -- the transparency log (handlers/transparency.py) ------------------------------------------------
    Operation(
        "/api/v1/tlog/checkpoint",
        "tlogCheckpoint",
        "the latest checkpoint the tail serves, with the witnesses' cosignatures it holds (public)",
        _NOTE,
        errors=(400, 404),
    ),
    Operation(
        "/api/v1/tlog/checkpoints/{size}",
        "tlogCheckpointOfSize",
        "the checkpoint of one tree size, with its cosignatures (public)",
        _NOTE,
        params=q.CheckpointQuery,
        errors=(400, 404),
    ),
    Operation(
        "/api/v1/tlog/consistency",
        "tlogConsistency",
        "a consistency proof of the tree from size old to size new (public)",
        TlogConsistency,
        "the proof, base64 hashes",
        params=q.ConsistencyQuery,
        errors=(400,),
    ),
    Operation(
        "/api/v1/tlog/cosignatures",
        "tlogCosign",
        "a witness's cosignatures of a checkpoint the tail serves: kept and served with it "
        "(public: the signature authenticates)",
        TlogCosigned,
        "the witnesses whose cosignatures the tail holds (an older one never replaces a newer)",
        method="post",
        errors=(400, 404, 413),
        request_body={
            "required": True,
            "content": {TEXT: {"schema": {"type": "string", "maxLength": MAX_COSIGNED_BYTES}}},
        },
    ),
    Operation(
        "/api/v1/proofs/{position}",
        "eventProof",
        "a C2SP tlog-proof of one event (with the event), under a checkpoint the tail serves",
        {"description": "the tlog-proof", "content": {TEXT: _TEXT_FILE}},
        params=q.EventProofQuery,
        errors=(400, 404, 503),
    ),
    Operation(
        "/api/v1/sessions/{session_id}/proof",
        "sessionProof",
        "a session bundle: every event of the session with its inclusion proof under one "
        "checkpoint the tail serves",
        SessionBundle,
        "the session bundle (streamed)",
        params=q.SessionProofQuery,
        errors=(400, 404, 429, 503),
    ),
    # -- Korg's reads (handlers/korgread.py, handlers/korg.py) --------------------------------------
    Operation(
        "/api/journal",
        "korgJournal",
        "Korg: the Korg tenant's journal as NDJSON, one KorgEnvelope per line, oldest first",
        {
            "description": "NDJSON; each line a KorgEnvelope",
            "content": {
                "application/x-ndjson": {
                    "schema": {"type": "string"},
                    "x-line-schema": schema_ref(KorgEnvelope.__name__),
                }
            },
        },
        params=q.KorgJournalQuery,
        errors=(400,),
        refers_to=(KorgEnvelope,),
    ),
    Operation(
        "/api/blob/{sha256}",
        "korgGetBlob",
        "Korg: a blob of the Korg tenant, raw (Korg §8.4.1)",
        _BLOB_BYTES,
        params=q.KorgBlobQuery,
        errors=(400, 404, 500, 503, 504),
    ),
    Operation(
        "/api/korg",
        "korgLedgers",
        "Korg §8: the ledgers this token may read",
        KorgLedgers,
        "Korg §8: the ledgers this token may read",
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/korg/{ledger}/ledger/recent",
        "korgRecent",
        "Korg §8: recent events, newest first",
        KorgPage,
        "Korg §8: recent events, newest first",
        params=q.KorgRecentQuery,
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/korg/{ledger}/ledger/heads",
        "korgHeads",
        "Korg §8: session roots, newest first",
        KorgHeads,
        "Korg §8: session roots, newest first",
        params=q.KorgHeadsQuery,
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/korg/{ledger}/agent/recent",
        "korgAgentRecent",
        "Korg §8: one agent's recent events, newest first",
        KorgPage,
        "Korg §8: one agent's recent events, newest first",
        params=q.KorgAgentRecentQuery,
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/korg/{ledger}/session/{root_seq}",
        "korgSession",
        "Korg §8.3: a session's metadata",
        KorgSession,
        "Korg §8.3: a session's metadata",
        params=q.KorgSessionQuery,
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/korg/{ledger}/session/{root_seq}/summary",
        "korgSessionSummary",
        "Korg §8.3: a session's skeleton, oldest first",
        KorgSkeletonPage,
        "Korg §8.3: a session's skeleton, oldest first",
        params=q.KorgSummaryQuery,
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/korg/{ledger}/session/{root_seq}/events",
        "korgSessionEvents",
        "Korg §8.3: a session's events, oldest first",
        KorgPage,
        "Korg §8.3: a session's events, oldest first",
        params=q.KorgEventsQuery,
        errors=READ_ERRORS,
    ),
    Operation(
        "/api/korg/{ledger}/event/{seq_id}",
        "korgEvent",
        "Korg §8: one event",
        KorgRecord,
        "Korg §8: one event",
        params=q.KorgEventQuery,
        errors=READ_ERRORS,
    ),
)

# The routes that also take the bearer token as a query parameter: the live
# tail's (EventSource cannot set headers).
QUERY_TOKEN_PATHS = ("/api/v1/events",)


def _paths() -> dict[str, Any]:
    """The operations' paths, then the probes' and the document's own; every
    guarded one takes a bearer token and may answer 401, and 403 for a tenant
    its token does not grant (``apidoc.secure_guarded``)."""
    paths = {
        **ops_paths("connected to NATS and caught up within the configured lag"),
        **openapi_paths(),
        **operation_paths(OPERATIONS),
    }
    for path, operation in secure_guarded(paths, "401", "403"):
        if path in QUERY_TOKEN_PATHS:
            operation["security"].append({"accessTokenQuery": []})
            operation["parameters"].append(
                parameter(
                    ACCESS_TOKEN_PARAMETER,
                    "query",
                    {"type": "string", "minLength": 1},
                    "the bearer token, for clients that cannot set Authorization",
                )
            )
    return paths


DOCUMENT: dict[str, Any] = document(
    title="laneledger tail",
    description="Live tail, history, blobs, verification and Korg compatibility over the "
    'laneledger committed stream. Every error is {"error": ErrorBody} '
    "(spec/errors.md); see spec/tail.md.",
    paths=_paths(),
    # The structure's Structs omit their defaults on NATS, and the history routes
    # show every field (history.full); every other Struct is required as it is
    # sent by apidoc's rule (require_what_is_sent).
    schemas=answer_schemas(OPERATIONS, in_full=(Lane, Turn, Action, Attempt)),
    bearer_description="a tenant's token (sees that tenant only) or the "
    "operator's (every tenant); spec/tail.md, Access",
    security_schemes={
        "accessTokenQuery": {
            "type": "apiKey",
            "in": "query",
            "name": ACCESS_TOKEN_PARAMETER,
            "description": "the same token, on the live tail only",
        },
    },
)


def openapi_route() -> web.RouteDef:
    async def get_openapi(_: web.Request) -> web.Response:
        return json_response(DOCUMENT)

    return web.get("/api/v1/openapi.json", get_openapi, name="openapi")
