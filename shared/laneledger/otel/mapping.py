"""Committed events to spans: the pure mapping (normative text: ``spec/otel.md``).

``SpanMapper`` is fed committed events in ledger order and returns each span
the moment its end event is fed: a run (``run.started`` … its terminal event)
is a trace whose root is an ``invoke_agent`` span, a sub-agent's lane an
``invoke_agent`` child (ended with its run), a model call's attempt a
``chat`` span and a tool call's attempt an ``execute_tool`` span. Ids come
from ledger ids (``ids.py``), times from the events' ``occurred_at``, and
every span names the ledger positions, lane seqs and entry hashes of the
events it starts and ends with. Content is never copied into a span: a
payload's content references become the tail's blob URLs.

It knows nothing of OpenTelemetry's SDK: ``SpanRecord`` is plain data
(``sdkspans.py`` turns it into the SDK's spans), so the mapping is tested,
and re-run after a restart, without exporting anything.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import msgspec

from laneledger.contract.contentref import hex_of, refs_in
from laneledger.contract.erasurescope import is_erasure, scope_of
from laneledger.contract.model import CommittedEvent, Lane
from laneledger.contract.vocabulary import TERMINAL_EVENT_TYPES
from laneledger.otel import ids
from laneledger.sdk.spine import spawned_by

AttributeValue = str | int | list[str]
SpanKind = Literal["internal", "client"]
StatusCode = Literal["unset", "ok", "error"]

RUN_TERMINAL = frozenset(TERMINAL_EVENT_TYPES["run"])
ATTEMPT_TERMINAL = frozenset(TERMINAL_EVENT_TYPES["attempt"])
OPERATIONS = {"model_call": "chat", "tool_call": "execute_tool"}
# Runs whose spans were sent: a late event of one (after its terminal event)
# opens no new lane span. Bounded: the oldest are forgotten first.
ENDED_RUNS_KEPT = 10_000


@dataclass(frozen=True)
class SpanRecord:
    """One finished span, as plain data."""

    trace_id: int
    span_id: int
    parent_span_id: int | None
    name: str
    kind: SpanKind
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    status: StatusCode = "unset"
    status_message: str | None = None
    end_position: int = 0  # the ledger position of the event that ended it


@dataclass
class _LaneMeta:
    name: str
    kind: str
    parent_lane_id: str | None
    actor_id: str | None


@dataclass
class _RunState:
    first: CommittedEvent  # run.started, or the first event of the run seen
    sub_lanes: dict[str, tuple[CommittedEvent, CommittedEvent]] = field(default_factory=dict)
    requested: dict[str, str] = field(default_factory=dict)  # attempt.requested event id -> attempt id
    spawned: dict[str, str] = field(default_factory=dict)  # sub-agent lane id -> spawning attempt id


RunKey = tuple[str, str, str]


class SpanMapper:
    def __init__(self, *, tail_url: str) -> None:
        self._tail_url = tail_url.rstrip("/")
        self._lanes: dict[tuple[str, str], _LaneMeta] = {}
        self._runs: dict[RunKey, _RunState] = {}
        self._ended: OrderedDict[RunKey, None] = OrderedDict()
        self._attempts: dict[tuple[str, str], CommittedEvent] = {}  # open attempts: their request

    # -- what the caller supplies ---------------------------------------------------------

    def knows_lane(self, tenant: str, lane_id: str) -> bool:
        return (tenant, lane_id) in self._lanes

    def add_lane(self, lane: Lane) -> None:
        """A lane's name, kind and parent (``load_structure``, ``get_lane``):
        events carry only its id."""
        self._lanes[(lane.tenant, lane.id)] = _LaneMeta(
            lane.name, lane.kind, lane.parent_lane_id, lane.actor_id
        )

    @property
    def open_spans(self) -> int:
        """Spans started and not yet ended (runs, sub-agent lanes, attempts)."""
        return len(self._runs) + sum(len(r.sub_lanes) for r in self._runs.values()) + len(self._attempts)

    def _forget(self, erasure: CommittedEvent) -> None:
        """An erasure (spec/erasure.md, Readers): the events held for open
        spans that it erased lose their content, so no span ended afterwards
        carries it. A scope of a kind not known here is left alone."""
        scope = scope_of(erasure.payload.get("scope"))
        if scope is None:
            return

        def erased(held: CommittedEvent) -> CommittedEvent:
            if (
                held.tenant == erasure.tenant
                and held.position < erasure.position
                and scope.covers(
                    session_id=held.session_id,
                    run_id=held.run_id,
                    data_subject=held.data_subject or None,
                    committed_at=held.committed_at,
                )
            ):
                # An open attempt keeps its operation (one of OPERATIONS' names,
                # not content), so its span still ends as a chat or a tool call.
                kept = {"action_type": held.payload["action_type"]} if "action_type" in held.payload else {}
                return msgspec.structs.replace(held, payload=kept, extensions={})
            return held

        self._attempts = {key: erased(request) for key, request in self._attempts.items()}
        for run in self._runs.values():
            run.first = erased(run.first)
            run.sub_lanes = {lane: (erased(a), erased(b)) for lane, (a, b) in run.sub_lanes.items()}

    # -- the mapping ----------------------------------------------------------------------

    def feed(self, event: CommittedEvent) -> list[SpanRecord]:
        """The spans ``event`` ends (usually none or one; a run's end also
        ends its sub-agent lanes)."""
        if is_erasure(event.event_type, event.session_id, event.run_id):
            self._forget(event)
            return []  # the ledger's own lane is no run of an agent
        tenant = event.tenant
        lane_key = (tenant, event.lane_id)
        if event.event_type == "lane.created" and lane_key not in self._lanes:
            p = event.payload
            self._lanes[lane_key] = _LaneMeta(
                str(p.get("name") or event.lane_id),
                str(p.get("kind") or "main"),
                p.get("parent_lane_id") if isinstance(p.get("parent_lane_id"), str) else None,
                event.actor_id,
            )
        key: RunKey = (tenant, event.session_id, event.run_id)
        run = self._runs.get(key)
        if run is None and key not in self._ended:
            run = self._runs[key] = _RunState(first=event)
        if run is not None:
            if event.event_type == "run.started" and run.first.event_type != "run.started":
                run.first = event
            if self._parent_lane(event) is not None:
                first, _ = run.sub_lanes.get(event.lane_id, (event, event))
                run.sub_lanes[event.lane_id] = (first, event)
            spawner = spawned_by(event.event_type, event.payload)
            if spawner is not None and spawner in run.requested:
                run.spawned[event.lane_id] = run.requested[spawner]

        done: list[SpanRecord] = []
        if event.event_type == "attempt.requested" and event.payload.get("action_type") in OPERATIONS:
            self._attempts[(tenant, event.subject_id)] = event
            if run is not None:
                run.requested[event.id] = event.subject_id
        elif event.event_type in ATTEMPT_TERMINAL:
            request = self._attempts.pop((tenant, event.subject_id), None)
            if request is not None:
                done.append(self._attempt_span(request, event))
        elif event.event_type in RUN_TERMINAL and event.subject_id == event.run_id and run is not None:
            done.append(self._run_span(run.first, event))
            for lane_id, (first, last) in run.sub_lanes.items():
                done.append(self._lane_span(run, lane_id, first, last, event))
            del self._runs[key]
            self._ended[key] = None
            if len(self._ended) > ENDED_RUNS_KEPT:
                self._ended.popitem(last=False)
        return done

    # -- the spans ------------------------------------------------------------------------

    def _meta(self, event: CommittedEvent) -> _LaneMeta:
        return self._lanes.get((event.tenant, event.lane_id)) or _LaneMeta(
            event.lane_id, "main", None, event.actor_id
        )

    def _parent_lane(self, event: CommittedEvent) -> str | None:
        return self._meta(event).parent_lane_id

    def _container_span(self, event: CommittedEvent) -> int:
        """The span an attempt on ``event``'s lane belongs to: its sub-agent
        lane's, or the run's for a lane without a parent."""
        if self._parent_lane(event) is not None:
            return ids.lane_span_id(event.tenant, event.lane_id)
        return ids.run_span_id(event.tenant, event.session_id, event.run_id)

    def _run_span(self, first: CommittedEvent, end: CommittedEvent) -> SpanRecord:
        meta = self._meta(first)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": meta.name,
            "gen_ai.agent.id": meta.actor_id or first.actor_id,
        }
        return self._span(
            first,
            end,
            name=f"invoke_agent {meta.name}",
            kind="internal",
            span_id=ids.run_span_id(first.tenant, first.session_id, first.run_id),
            parent=None,
            attributes=attributes,
            failed=end.event_type != "run.completed",
        )

    def _lane_span(
        self,
        run: _RunState,
        lane_id: str,
        first: CommittedEvent,
        last: CommittedEvent,
        run_end: CommittedEvent,
    ) -> SpanRecord:
        meta = self._meta(first)
        if lane_id in run.spawned:  # the tool call that spawned the sub-agent (spine §2b)
            parent = ids.attempt_span_id(first.tenant, run.spawned[lane_id])
        elif meta.parent_lane_id is not None and (first.tenant, meta.parent_lane_id) in self._lanes:
            parent_meta = self._lanes[(first.tenant, meta.parent_lane_id)]
            parent = (
                ids.lane_span_id(first.tenant, meta.parent_lane_id)
                if parent_meta.parent_lane_id is not None
                else ids.run_span_id(first.tenant, first.session_id, first.run_id)
            )
        else:
            parent = ids.run_span_id(first.tenant, first.session_id, first.run_id)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": meta.name,
            "gen_ai.agent.id": meta.actor_id or first.actor_id,
            "laneledger.lane_kind": meta.kind,
        }
        return self._span(
            first,
            last,
            name=f"invoke_agent {meta.name}",
            kind="internal",
            span_id=ids.lane_span_id(first.tenant, lane_id),
            parent=parent,
            attributes=attributes,
            failed=False,
            ended_by=run_end,
        )

    def _attempt_span(self, request: CommittedEvent, end: CommittedEvent) -> SpanRecord:
        p = request.payload
        operation = OPERATIONS[str(p["action_type"])]
        name = str(p.get("name") or "")
        attributes: dict[str, AttributeValue] = {"gen_ai.operation.name": operation}
        if isinstance(p.get("attempt_no"), int):
            attributes["laneledger.attempt_no"] = p["attempt_no"]
        if operation == "chat":
            requested = _text(p.get("model"))
            if requested is not None:
                attributes["gen_ai.request.model"] = requested
            if isinstance(p.get("provider"), str):
                attributes["gen_ai.provider.name"] = p["provider"]
            outcome = end.payload.get("outcome")
            responded: str | None = None
            if isinstance(outcome, dict):
                responded = _text(outcome.get("model"))
                if responded is not None:
                    attributes["gen_ai.response.model"] = responded
                for ours, theirs in (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens")):
                    value = outcome.get(ours)
                    if type(value) is int:
                        attributes[f"gen_ai.usage.{theirs}"] = value
            # {operation} {request model}; a request that does not know its
            # model (a Responses API call) is named by the model that answered.
            span_name = f"chat {requested or responded or name}"
        else:
            attributes["gen_ai.tool.name"] = name
            call_id = _text(p.get("tool_use_id")) or _text(p.get("tool_call_id"))
            attributes["gen_ai.tool.call.id"] = call_id or request.subject_id
            span_name = f"execute_tool {name}"
        meta = self._meta(request)
        attributes["gen_ai.agent.name"] = meta.name
        return self._span(
            request,
            end,
            name=span_name,
            kind="client" if operation == "chat" else "internal",
            span_id=ids.attempt_span_id(request.tenant, request.subject_id),
            parent=self._container_span(request),
            attributes=attributes,
            failed=end.event_type == "attempt.failed",
        )

    def _span(
        self,
        start: CommittedEvent,
        end: CommittedEvent,
        *,
        name: str,
        kind: SpanKind,
        span_id: int,
        parent: int | None,
        attributes: dict[str, AttributeValue],
        failed: bool,
        ended_by: CommittedEvent | None = None,
    ) -> SpanRecord:
        start_ns = ids.timestamp_ns(start.occurred_at)
        end_ns = max(start_ns, ids.timestamp_ns(end.occurred_at))  # producers' clocks may disagree
        common: dict[str, AttributeValue] = {
            "gen_ai.conversation.id": start.session_id,
            "laneledger.tenant": start.tenant,
            "laneledger.session_id": start.session_id,
            "laneledger.run_id": start.run_id,
            "laneledger.lane_id": start.lane_id,
            "laneledger.subject_id": start.subject_id,
        }
        for edge, event in (("start", start), ("end", end)):
            common[f"laneledger.{edge}.event_id"] = event.id
            common[f"laneledger.{edge}.position"] = event.position
            common[f"laneledger.{edge}.lane_seq"] = event.seq
            common[f"laneledger.{edge}.entry_hash"] = event.entry_hash
            common[f"laneledger.{edge}.event_url"] = f"{self._tail_url}/api/v1/events/{event.position}"
            blobs = self._blob_urls(event)
            if blobs:
                common[f"laneledger.{edge}.content"] = blobs
        status: StatusCode = "unset"
        message: str | None = None
        if failed:
            status = "error"
            error = end.payload.get("error")
            if isinstance(error, dict):
                code = error.get("code") or error.get("type")
                if isinstance(code, str):
                    common["error.type"] = code
                if isinstance(error.get("message"), str):
                    message = error["message"]
            common.setdefault("error.type", end.event_type)
        return SpanRecord(
            trace_id=ids.trace_id(start.tenant, start.session_id, start.run_id),
            span_id=span_id,
            parent_span_id=parent,
            name=name,
            kind=kind,
            start_ns=start_ns,
            end_ns=end_ns,
            attributes={**common, **attributes},
            status=status,
            status_message=message,
            end_position=(ended_by or end).position,
        )

    def _blob_urls(self, event: CommittedEvent) -> list[str]:
        return [
            f"{self._tail_url}/api/v1/blobs/{hex_of(ref)}?tenant={_query(event.tenant)}"
            for ref, _size in refs_in(event.payload)
        ]


def _text(value: Any) -> str | None:
    """A non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def _query(value: str) -> str:
    return quote(value, safe="")


def describe(span: SpanRecord) -> dict[str, Any]:
    """A span as JSON-able data (hex ids, as OTLP/JSON spells them)."""
    return {
        "trace_id": f"{span.trace_id:032x}",
        "span_id": f"{span.span_id:016x}",
        "parent_span_id": None if span.parent_span_id is None else f"{span.parent_span_id:016x}",
        "name": span.name,
        "kind": span.kind,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "status": span.status,
        "attributes": span.attributes,
    }
