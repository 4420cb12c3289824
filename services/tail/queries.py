"""Each tail route's parameters as a msgspec Struct: a field named in the
route's path template (``{name}``) is a path parameter, every other a query
parameter. The bounds and defaults are written here once; the OpenAPI
document's parameters are generated from these (``routetable.py``).

``X | None = None``: a query parameter that may be left out.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

Text = Annotated[str, Meta(min_length=1, max_length=256)]
Position = Annotated[int, Meta(ge=1)]
Size = Annotated[int, Meta(ge=0)]  # a tree size, a cursor
Flag = Literal["false", "true"]
Sha256 = Annotated[
    str,
    Meta(
        pattern="^(sha256:)?[0-9a-f]{64}$",
        description="lowercase hex sha256 (a content ref's `sha256:` prefix allowed)",
    ),
]

OWNER = Meta(
    description="whose id it is (every id is its tenant's own): the token's own by default; with the "
    "operator token or on an open tail, needed only when several tenants have the id"
)
SESSION = Meta(description="host session id")
RUN = Meta(description="host run id")
POSITION = Meta(description="ledger position")
EXCLUDE = Meta(description="true: leave out the session's events its session.rewound events invalidate")


class Parameters(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of the routes' parameters: an unknown one is refused."""


class NoParameters(Parameters):
    """A route that takes no parameter."""


class EventPageQuery(Parameters, kw_only=True):
    """A page of events (handlers/history.py)."""

    cursor: (
        Annotated[
            Size,
            Meta(description="exclusive start key: forward returns keys > cursor, backward keys < cursor"),
        ]
        | None
    ) = None
    direction: Annotated[
        Literal["forward", "backward"], Meta(description="forward: oldest first; backward: newest first")
    ] = "forward"
    limit: Annotated[int, Meta(ge=1, le=1000, description="events per page")] = 100
    exclude_invalidated: Annotated[Flag, EXCLUDE] = "false"
    tenant: Annotated[Text, OWNER] | None = None


class LaneEventsQuery(EventPageQuery, kw_only=True):
    lane_id: Annotated[Text, Meta(description="lane id")]
    with_origin: Annotated[
        Flag,
        Meta(
            description="true: a fork's full history, keyed by position: the origin lane's events up "
            "to the fork point (recursively), then the lane's own; a page holds one lane's events"
        ),
    ] = "false"


class SessionQuery(EventPageQuery, kw_only=True):
    session_id: Annotated[Text, SESSION]


class RunQuery(SessionQuery, kw_only=True):
    run_id: Annotated[Text, RUN]


class InspectionQuery(Parameters, kw_only=True):
    session_id: Annotated[Text, SESSION]
    run_id: Annotated[Text, RUN]
    tenant: Annotated[Text, OWNER] | None = None


class OwnedSessionQuery(Parameters, kw_only=True):
    """A session, of the tenant the token or ``tenant`` names."""

    session_id: Annotated[Text, SESSION]
    tenant: Annotated[Text, OWNER] | None = None


class CausalTreeQuery(OwnedSessionQuery, kw_only=True):
    cursor: Annotated[Size, Meta(description="nodes with position > cursor (default 0)")] | None = None
    limit: Annotated[int, Meta(ge=1, le=2000, description="nodes per page")] = 500
    exclude_invalidated: Annotated[Flag, EXCLUDE] = "false"


SPANS_DEFAULT = 2000  # spans per timeline page, unless asked
SPANS_MAX = 5000


class TimelineQuery(OwnedSessionQuery, kw_only=True):
    cursor: (
        Annotated[Size, Meta(description="spans whose opening event's position is > cursor (default 0)")]
        | None
    ) = None
    limit: Annotated[int, Meta(ge=1, le=SPANS_MAX, description="spans per page")] = SPANS_DEFAULT


class TailQuery(Parameters, kw_only=True):
    """The live tail's filters (handlers/sse.py)."""

    tenant: Annotated[Text, Meta(description="only this tenant")] | None = None
    session_id: Annotated[Text, Meta(description="only this session; follows it to its end")] | None = None
    run_id: Annotated[Text, Meta(description="only this run; follows it to its end")] | None = None
    lane_id: Annotated[Text, Meta(description="only this lane")] | None = None
    actor_id: Annotated[Text, Meta(description="only this actor")] | None = None
    event_type: Annotated[Text, Meta(description="event types starting with this prefix")] | None = None
    from_position: (
        Annotated[
            Size,
            Meta(description="the last position the client has; delivery starts after it (default 0)"),
        ]
        | None
    ) = None
    exclude_invalidated: Annotated[
        Flag,
        Meta(
            description="true: leave out events the rewinds of the sessions in scope invalidated, "
            "including rewinds committed while the tail is open"
        ),
    ] = "false"


class EventQuery(Parameters, kw_only=True):
    position: Annotated[Position, POSITION]
    exclude_invalidated: Annotated[
        Flag,
        Meta(description="true: 404 (details.invalidated) for an event a rewind of its session invalidated"),
    ] = "false"


class CausationQuery(Parameters, kw_only=True):
    position: Annotated[Position, POSITION]
    limit: Annotated[int, Meta(ge=1, le=1000, description="caused (100)")] = 100


class BlobQuery(Parameters, kw_only=True):
    sha256: Sha256
    tenant: (
        Annotated[
            Text,
            Meta(
                description="the blob's tenant: the token's own by default; required with the operator "
                "token or on an open tail"
            ),
        ]
        | None
    ) = None


class VerifyQuery(Parameters, kw_only=True):
    lane_id: Annotated[Text, Meta(description="verify this lane")] | None = None
    session_id: Annotated[Text, Meta(description="verify this session's lanes")] | None = None
    tenant: (
        Annotated[
            Text,
            Meta(
                description="the tenant whose lane or session it is (as elsewhere: needed only when "
                "several tenants have the id), or alone: verify this tenant's lanes (the token's own by "
                "default)"
            ),
        ]
        | None
    ) = None


MAX_BUCKET_S = 31 * 86400  # a cost series' widest bucket


class CostsQuery(Parameters, kw_only=True):
    tenant: Annotated[Text, Meta(description="only this tenant")] | None = None
    session_id: Annotated[Text, Meta(description="only this session")] | None = None
    run_id: Annotated[Text, Meta(description="only this run")] | None = None
    bucket_s: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_BUCKET_S,
                description="series bucket width in seconds (default: chosen for at most 120 buckets)",
            ),
        ]
        | None
    ) = None


class SessionsQuery(Parameters, kw_only=True):
    tenant: Annotated[Text, Meta(description="only this tenant (a tenant's token: its own)")] | None = None
    status: (
        Annotated[
            Literal["running", "completed", "failed", "unresolved", "paused"],
            Meta(description="a status, or unresolved (attempts open) / paused (pauses pending)"),
        ]
        | None
    ) = None
    actor_id: Annotated[Text, Meta(description="sessions with an event of this actor")] | None = None
    q: Annotated[Text, Meta(description="text in the session id")] | None = None
    since: Annotated[Text, Meta(description="active at or after this time (RFC 3339)")] | None = None
    until: Annotated[Text, Meta(description="active at or before this time (RFC 3339)")] | None = None
    before: Annotated[Position, Meta(description="last event before this position")] | None = None
    limit: Annotated[int, Meta(ge=1, le=500, description="page size (50)")] = 50


class ConsoleAssetQuery(Parameters, kw_only=True):
    asset: Annotated[Literal["app.js", "app.css"], Meta(description="file name")]


# -- the transparency log (handlers/transparency.py) --------------------------------------------------

MAX_COSIGNED_BYTES = 64 * 1024  # a posted checkpoint: 100 signature lines fit many times over

CHECKPOINT_SIZE = Meta(
    description="under the checkpoint of this tree size (one the tail serves); default: the latest"
)


class CheckpointQuery(Parameters, kw_only=True):
    size: Annotated[Size, Meta(description="the tree size")]


class ConsistencyQuery(Parameters, kw_only=True):
    old: Annotated[Size, Meta(description="the older tree size, at most new")]
    new: Annotated[Size, Meta(description="the newer tree size, at most the tail's")]


class EventProofQuery(Parameters, kw_only=True):
    position: Annotated[Position, POSITION]
    size: Annotated[Size, CHECKPOINT_SIZE] | None = None


class SessionProofQuery(Parameters, kw_only=True):
    session_id: Annotated[Text, Meta(description="session id")]
    tenant: Annotated[Text, OWNER] | None = None
    size: Annotated[Size, CHECKPOINT_SIZE] | None = None


# -- Korg (handlers/korgread.py, handlers/korg.py) -------------------------------------------------

# Korg §8.3's defaults and maxima per page: (default, max).
SUMMARY_LIMITS = (100, 1000)
EVENTS_LIMITS = (50, 500)
HEADS_LIMITS = (100, 1000)

LEDGER = Meta(description="a tenant; local: the tail's Korg tenant")
ROOT = Meta(description="the seq_id of the session's root")
AGENT = Meta(description="only this agent's events")
CAUSE = Meta(description="only the events this seq_id triggered")
OLDER = Meta(description="returns seq_id < cursor")  # so at least 1
NEWER = Meta(description="returns seq_id > cursor")
AT_MOST = "at most this many"


class KorgRecentQuery(Parameters, kw_only=True):
    ledger: Annotated[Text, LEDGER]
    cursor: Annotated[Position, OLDER] | None = None
    limit: Annotated[int, Meta(ge=1, le=EVENTS_LIMITS[1], description=AT_MOST)] = EVENTS_LIMITS[0]
    triggered_by: Annotated[Position, CAUSE] | None = None


class KorgAgentRecentQuery(KorgRecentQuery, kw_only=True):
    source_agent: Annotated[Text, AGENT]


class KorgHeadsQuery(Parameters, kw_only=True):
    ledger: Annotated[Text, LEDGER]
    cursor: Annotated[Position, OLDER] | None = None
    limit: Annotated[int, Meta(ge=1, le=HEADS_LIMITS[1], description=AT_MOST)] = HEADS_LIMITS[0]


class KorgSessionQuery(Parameters, kw_only=True):
    ledger: Annotated[Text, LEDGER]
    root_seq: Annotated[Position, ROOT]


class KorgSummaryQuery(KorgSessionQuery, kw_only=True):
    cursor: Annotated[Size, NEWER] | None = None
    limit: Annotated[int, Meta(ge=1, le=SUMMARY_LIMITS[1], description=AT_MOST)] = SUMMARY_LIMITS[0]
    source_agent: Annotated[Text, AGENT] | None = None


class KorgEventsQuery(KorgSessionQuery, kw_only=True):
    cursor: Annotated[Size, NEWER] | None = None
    limit: Annotated[int, Meta(ge=1, le=EVENTS_LIMITS[1], description=AT_MOST)] = EVENTS_LIMITS[0]
    source_agent: Annotated[Text, AGENT] | None = None


class KorgEventQuery(Parameters, kw_only=True):
    ledger: Annotated[Text, LEDGER]
    seq_id: Annotated[Position, Meta(description="its ledger position")]


class KorgBlobQuery(Parameters, kw_only=True):
    sha256: Sha256


class KorgJournalQuery(Parameters, kw_only=True):
    session_id: Annotated[Text, Meta(description="only this session")] | None = None
    cursor: Annotated[Size, NEWER] | None = None
    limit: Annotated[int, Meta(ge=1, description=AT_MOST)] | None = None
    triggered_by: Annotated[Size, Meta(description="only the children of this seq_id")] | None = None
