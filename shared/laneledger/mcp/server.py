"""The MCP server: Korg §8's resources, templates, tools, errors and
subscriptions, and laneledger's own (proofs, bundles, checkpoints), on the
official SDK's low-level ``Server`` (normative text: ``spec/mcp.md``).

Every read is one request to the tail with the caller's token (``Caller``):
the tail decides what the token may see, and a ledger it may not read
answers exactly as one that does not exist (``unknown_ledger``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from laneledger import __version__
from laneledger.compat.korg_view import TOOL_CALL_FIELDS

from . import catalog
from .catalog import Contents
from .subscriptions import MAX_SUBSCRIPTIONS, ReadRecord, SessionGone, Subscriptions
from .tailclient import TailClient, TailError
from .uris import KORG, SUBSCRIBABLE, BadUri, Target, parse

NAME = "laneledger"
BLOB_CAP = 10 * 1024 * 1024  # Korg §8.4.2: larger blobs are blob_too_large, never partial
INVALID_PARAMS, INTERNAL = -32602, -32603
QUERY_LIMITS = (20, 200)  # korg_query_events: default, max (Korg's tool)
MAX_LISTENS = 16  # open subscriptions/listen streams per token: each holds feeds
MAX_LISTENS_TOTAL = 1024  # and in all (an open tail takes any token string)
QUERY_PAGES = 5  # korg_query_events reads at most this many pages when it filters by tool_name


def error(code: int, message: str, reason: str, **data: Any) -> MCPError:
    return MCPError(code, message, {"reason": reason, **data})


@dataclass(frozen=True)
class Caller:
    """Who is asking: the token the tail is read with."""

    token: str | None


TokenOf = Callable[[Any], str | None]  # the request context -> the caller's token
_SUBSCRIPTIONS = "laneledger.subscriptions"  # the key of a connection's registry in its state


class LedgerServer:
    """One ``mcp`` low-level ``Server`` over one tail (and the ingest service,
    for appends). ``token_of`` reads the caller's token from the request context (stdio: the configured one;
    streamable HTTP: the request's ``Authorization``)."""

    def __init__(self, tail: TailClient, token_of: TokenOf, ingest: TailClient | None = None) -> None:
        """``ingest``: where ``korg_append_event`` posts (the ingest service,
        spec/korg-mapping.md); None: the tail's URL, for a deployment that
        routes Korg's writes and reads behind one base URL."""
        self.tail = tail
        self.ingest = ingest or tail
        self._token_of = token_of
        self._listens: dict[str | None, int] = {}  # open listen streams per token
        schemas = {tool.name: tool.input_schema for tool in catalog.tools()}
        self.server: Server[Any] = Server(
            NAME,
            version=__version__,
            instructions=catalog.INSTRUCTIONS,
            get_tool_input_schema=schemas.get,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_templates,
            on_read_resource=self.read_resource,
            on_subscribe_resource=self.subscribe,
            on_unsubscribe_resource=self.unsubscribe,
            on_subscriptions_listen=self.listen,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    def initialization_options(self) -> InitializationOptions:
        return self.server.create_initialization_options()

    def _caller(self, ctx: Any) -> Caller:
        return Caller(self._token_of(ctx))

    # -- ledgers ---------------------------------------------------------------------------

    async def _ledgers(self, caller: Caller) -> tuple[list[str], str | None]:
        found = await self._get(caller, "/api/korg", None)
        return list(found["ledgers"]), found.get("local_tenant")

    async def _tenant(self, caller: Caller, ledger: str) -> str:
        """The tenant behind ``ledger`` for laneledger's own routes."""
        ledgers, local = await self._ledgers(caller)
        if ledger not in ledgers:
            raise _unknown_ledger(ledger)
        if ledger == "local":
            if local is None:
                raise _unknown_ledger(ledger)
            return str(local)
        return ledger

    # -- resources -------------------------------------------------------------------------

    async def list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        ledgers, _ = await self._ledgers(self._caller(ctx))
        return types.ListResourcesResult(resources=[r for ledger in ledgers for r in catalog.fixed(ledger)])

    async def list_templates(self, ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=catalog.templates())

    async def read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        caller = self._caller(ctx)
        uri = str(params.uri)
        target = _parse(uri)
        if target.scheme == KORG:
            contents = await self._read_korg(caller, uri, target)
        else:
            contents = await self._read_laneledger(caller, uri, target)
        return types.ReadResourceResult(contents=[contents])

    async def _read_korg(self, caller: Caller, uri: str, t: Target) -> Contents:
        base = f"/api/korg/{quote(t.ledger, safe='')}"
        if t.kind in ("schema_event", "schema_spec", "integrity"):
            await self._tenant(caller, t.ledger)  # the ledger must exist for this caller
            if t.kind == "schema_event":
                return _json(uri, catalog.RECORD_SCHEMA)
            if t.kind == "schema_spec":
                return catalog.text_contents(uri, catalog.SPEC_TEXT, "text/markdown")
            return _json(uri, await self._integrity(caller, t.ledger))
        if t.kind == "blob":
            return await self._blob(caller, uri, t)
        n = t.ids[0] if t.ids else ""
        path = {
            "recent": "/ledger/recent",
            "heads": "/ledger/heads",
            "session": f"/session/{n}",
            "summary": f"/session/{n}/summary",
            "events": f"/session/{n}/events",
            "event": f"/event/{n}",
            "agent": "/agent/recent",
        }[t.kind]
        params = dict(t.query)
        if t.kind == "agent":
            params["source_agent"] = t.ids[0]
        return _json(uri, await self._get(caller, base + path, t.ledger, params))

    async def _integrity(self, caller: Caller, ledger: str) -> dict[str, Any]:
        """§6's status, as laneledger checks it: the ledger's chains verified by the tail."""
        tenant = await self._tenant(caller, ledger)
        report = await self._get(caller, "/api/v1/verify", ledger, {"tenant": tenant})
        return {"ledger": ledger, "verify": report, "schema_version": "1.0"}

    async def _blob(self, caller: Caller, uri: str, t: Target) -> Contents:
        sha256 = t.ids[0].lower()  # Korg names blobs by lowercase hex; accept either
        tenant = await self._tenant(caller, t.ledger)
        if t.ledger == "local":  # Korg's own blob route (§8.4.1), uploads included
            path, params, http_url = f"/api/blob/{sha256}", None, f"/api/blob/{sha256}"
        else:
            path, params = f"/api/v1/blobs/{sha256}", {"tenant": tenant}
            http_url = f"{path}?tenant={quote(tenant, safe='')}"
        try:
            data, _ = await self.tail.get_bytes(path, caller.token, params, max_bytes=BLOB_CAP)
        except TailError as exc:
            if exc.code == "too_large":
                raise error(
                    INTERNAL,
                    f"blob larger than {BLOB_CAP} bytes: read it over HTTP",
                    "blob_too_large",
                    sha256=sha256,
                    size_bytes=exc.details.get("size_bytes"),
                    http_url=http_url,
                ) from None
            raise _mcp_error(exc, t.ledger) from None
        return catalog.blob_contents(uri, data)

    async def _read_laneledger(self, caller: Caller, uri: str, t: Target) -> Contents:
        """laneledger's own: the tail's answer as it serves it (JSON, or the
        proofs' and checkpoints' signed text)."""
        tenant = await self._tenant(caller, t.ledger)
        if t.kind == "ll_checkpoint":  # the signed note, with the witnesses' cosignatures it holds
            return await self._raw(caller, uri, "/api/v1/tlog/checkpoint", t.ledger)
        if t.kind in ("ll_event", "ll_proof"):
            position = t.ids[0]
            event = await self._get(caller, f"/api/v1/events/{position}", t.ledger)
            if not isinstance(event, dict) or event.get("tenant") != tenant:  # another ledger's: not here
                raise error(
                    INVALID_PARAMS, "no such event in this ledger", "not_found", position=int(position)
                )
            if t.kind == "ll_event":
                return _json(uri, event)
            return await self._raw(caller, uri, f"/api/v1/proofs/{position}", t.ledger)
        session = quote(t.ids[0], safe="")
        suffix = {
            "ll_session": "",
            "ll_timeline": "/timeline",
            "ll_causal_tree": "/causal-tree",
            "ll_bundle": "/proof",
        }
        path = f"/api/v1/sessions/{session}{suffix[t.kind]}"
        return await self._raw(caller, uri, path, t.ledger, {"tenant": tenant})

    # -- subscriptions (§8.5) ---------------------------------------------------------------

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        """The handshake era's ``resources/subscribe``: the connection's registry."""
        caller = self._caller(ctx)
        uri = str(params.uri)
        target = _subscribable(uri)
        subs = self._session_subscriptions(ctx, caller)
        if subs.has(uri):
            return types.EmptyResult()
        if len(subs) >= MAX_SUBSCRIPTIONS:
            raise _too_many(f"at most {MAX_SUBSCRIPTIONS} subscriptions per session")
        await subs.add(uri, target, *await self._feed_start(caller, target))
        return types.EmptyResult()

    async def listen(
        self, ctx: Any, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """The 2026-07-28 era's ``subscriptions/listen``: the request's response
        stream is the subscription, with §8.5's semantics for the URIs it
        names (validated, all or none, before the acknowledgement; forward-
        looking from then; one update per URI per new event; ended with the
        stream). Change-of-list events are not honoured (none is ever sent)."""
        caller = self._caller(ctx)
        listen_id = ctx.request_id
        if listen_id is None:
            raise error(INVALID_PARAMS, "subscriptions/listen needs a request id", "invalid_params")
        uris = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))  # idempotent per URI
        if len(uris) > MAX_SUBSCRIPTIONS:
            raise _too_many(f"at most {MAX_SUBSCRIPTIONS} URIs per listen stream")
        if self._listens.get(caller.token, 0) >= MAX_LISTENS:
            raise _too_many(f"at most {MAX_LISTENS} listen streams open per token")
        if sum(self._listens.values()) >= MAX_LISTENS_TOTAL:
            raise _too_many(f"at most {MAX_LISTENS_TOTAL} listen streams open on this server")
        await self._ledgers(caller)  # the tail knows this token (even with no URI to check)
        targets = [(uri, _subscribable(uri)) for uri in uris]
        starts = [await self._feed_start(caller, target) for _, target in targets]
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: listen_id}
        gone = anyio.Event()

        async def notify(uri: str) -> None:
            try:
                await ctx.session.send_notification(
                    types.ResourceUpdatedNotification(
                        params=types.ResourceUpdatedNotificationParams(uri=uri, _meta=meta)
                    ),
                    related_request_id=listen_id,
                )
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                gone.set()
                raise SessionGone(uri) from None

        honored = types.SubscriptionFilter(resource_subscriptions=uris or None)
        subs = Subscriptions(self.tail, caller.token, notify)
        self._listens[caller.token] = self._listens.get(caller.token, 0) + 1
        try:
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(
                    params=types.SubscriptionsAcknowledgedNotificationParams(
                        notifications=honored, _meta=meta
                    )
                ),
                related_request_id=listen_id,
            )
            for (uri, target), start in zip(targets, starts, strict=True):
                await subs.add(uri, target, *start)
            await gone.wait()  # or the client ends the stream: the request is cancelled
        finally:
            with anyio.CancelScope(shield=True):  # the client ended the stream: still close its feeds
                await subs.close()
            self._listens[caller.token] -= 1
            if not self._listens[caller.token]:
                del self._listens[caller.token]
        return types.SubscriptionsListenResult(_meta=meta)

    async def _feed_start(self, caller: Caller, target: Target) -> tuple[str, int, ReadRecord]:
        """What a subscription's feed needs: the ledger's tenant (refusing one
        the caller may not read), the position it starts after (the newest:
        §8.5 is forward-looking) and how it reads a new event's record."""
        tenant = await self._tenant(caller, target.ledger)
        base = f"/api/korg/{quote(target.ledger, safe='')}"
        if target.kind == "summary":  # the session must exist
            await self._get(caller, f"{base}/session/{target.ids[0]}", target.ledger)
        newest = await self._get(caller, f"{base}/ledger/recent", target.ledger, {"limit": "1"})
        after = newest["events"][0]["seq_id"] if newest["events"] else 0

        async def read(position: int) -> dict[str, Any]:
            found: dict[str, Any] = await self._get(caller, f"{base}/event/{position}", target.ledger)
            return found

        return tenant, int(after), read

    async def unsubscribe(self, ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        subs = ctx.session._connection.state.get(_SUBSCRIPTIONS)
        if subs is not None:
            subs.remove(str(params.uri))
        return types.EmptyResult()

    def _session_subscriptions(self, ctx: Any, caller: Caller) -> Subscriptions:
        """This connection's registry (§8.5.4: in memory, closed with the
        connection). The SDK hands a low-level handler a per-request session;
        its connection — state, teardown, the standalone channel that carries
        notifications — is that session's ``_connection``."""
        connection = ctx.session._connection
        subs: Subscriptions | None = connection.state.get(_SUBSCRIPTIONS)
        if subs is None:

            async def notify(uri: str) -> None:
                try:
                    await connection.send_resource_updated(uri)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    raise SessionGone(uri) from None

            subs = Subscriptions(self.tail, caller.token, notify)
            connection.state[_SUBSCRIPTIONS] = subs
            connection.exit_stack.push_async_callback(subs.close)
        return subs

    # -- tools -----------------------------------------------------------------------------

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=catalog.tools())

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        caller = self._caller(ctx)
        name, arguments = params.name, dict(params.arguments or {})
        try:
            if name == "korg_append_event":
                answer = await self._append(caller, arguments)
            elif name == "korg_query_events":
                answer = await self._query(caller, arguments)
            elif name == "laneledger_verify_session":
                tenant = await self._tenant(caller, arguments.get("ledger", "local"))
                answer = await self._get(
                    caller, "/api/v1/verify", None, {"tenant": tenant, "session_id": arguments["session_id"]}
                )
            else:
                raise error(INVALID_PARAMS, f"unknown tool {name[:256]!r}", "not_found")
        except MCPError as exc:  # a tool's failure is its result (isError), with §8.6's reason
            failure = {"error": exc.error.message, **(exc.error.data or {})}
            return types.CallToolResult(content=[_text(failure)], is_error=True)
        return types.CallToolResult(content=[_text(answer)], structured_content=answer)

    async def _append(self, caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
        body = {k: arguments[k] for k in TOOL_CALL_FIELDS if k in arguments}
        body.setdefault("payload_refs", [])
        if body.get("triggered_by") is None:
            body.pop("triggered_by", None)
        try:
            answer = await self.ingest.post_json("/api/agent/tool-call", caller.token, body)
        except TailError as exc:
            raise _mcp_error(exc, "local") from None
        seq_id = answer["seq_id"]
        return {
            "seq_id": seq_id,
            "message": f"Event recorded at seq={seq_id}. Use triggered_by={seq_id} on your next event"
            " to continue the causal chain.",
        }

    async def _query(self, caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
        ledger = arguments.get("ledger", "local")
        limit = max(1, min(int(arguments.get("limit", QUERY_LIMITS[0])), QUERY_LIMITS[1]))
        tool_name = arguments.get("tool_name")
        base = f"/api/korg/{quote(ledger, safe='')}"
        params: dict[str, str] = {"limit": str(QUERY_LIMITS[1] if tool_name else limit)}
        if arguments.get("triggered_by") is not None:
            params["triggered_by"] = str(int(arguments["triggered_by"]))
        path = base + "/ledger/recent"
        if arguments.get("source_agent"):
            path = base + "/agent/recent"
            params["source_agent"] = str(arguments["source_agent"])
        found: list[dict[str, Any]] = []
        for _ in range(QUERY_PAGES):
            page = await self._get(caller, path, ledger, params)
            found += [e for e in page["events"] if tool_name is None or e["tool_name"] == tool_name]
            if len(found) >= limit or not page["has_more"]:
                break
            params["cursor"] = str(page["next_cursor"])
        events = [
            {
                k: e[k]
                for k in (
                    "seq_id",
                    "tool_name",
                    "source_agent",
                    "success",
                    "duration_ms",
                    "triggered_by",
                    "schema_version",
                )
            }
            for e in found[:limit]
        ]
        return {
            "count": len(events),
            "events": events,
            "note": "Showing newest-first. Use triggered_by=<seq_id> to find all children of an event"
            " (forward walk). Use tool_name='user_prompt' to find session roots.",
        }

    # -- the tail --------------------------------------------------------------------------

    async def _get(
        self, caller: Caller, path: str, ledger: str | None, params: dict[str, str] | None = None
    ) -> Any:
        try:
            return await self.tail.get_json(path, caller.token, params)
        except TailError as exc:
            raise _mcp_error(exc, ledger) from None

    async def _raw(
        self, caller: Caller, uri: str, path: str, ledger: str, params: dict[str, str] | None = None
    ) -> Contents:
        """The tail's answer as text of its own media type."""
        try:
            data, ctype = await self.tail.get_bytes(path, caller.token, params)
        except TailError as exc:
            raise _mcp_error(exc, ledger) from None
        return catalog.text_contents(uri, data.decode("utf-8", "replace"), ctype.split(";")[0].strip())


def _parse(uri: str) -> Target:
    try:
        return parse(uri)
    except BadUri as exc:
        raise error(INVALID_PARAMS, str(exc), exc.reason, uri=uri[:2048]) from None


def _json(uri: str, value: Any) -> Contents:
    return catalog.text_contents(uri, json.dumps(value))


def _text(value: Any) -> types.TextContent:
    return types.TextContent(type="text", text=json.dumps(value, indent=2))


def _subscribable(uri: str) -> Target:
    target = _parse(uri)
    if target.scheme != KORG or target.kind not in SUBSCRIBABLE:
        raise error(
            INVALID_PARAMS, "this resource never changes, or is read on demand", "not_subscribable", uri=uri
        )
    return target


def _too_many(message: str) -> MCPError:
    return error(INVALID_PARAMS, message, "too_many_subscriptions")


def _unknown_ledger(ledger: str | None) -> MCPError:
    return error(INVALID_PARAMS, "no such ledger", "unknown_ledger", ledger=(ledger or "")[:256])


def _mcp_error(exc: TailError, ledger: str | None) -> MCPError:
    """§8.6: what the tail refused, as the reason an MCP client sees."""
    if (
        exc.code == "entity_not_found" and exc.details.get("kind") == "ledger"
    ) or exc.code == "tenant_mismatch":
        return _unknown_ledger(ledger)
    if exc.code == "entity_not_found":
        return error(INVALID_PARAMS, str(exc), "not_found", **_detail(exc))
    if exc.code == "invalid_request":
        return error(INVALID_PARAMS, str(exc), "invalid_params", **_detail(exc))
    if exc.code == "unavailable" and not exc.status:
        return error(INTERNAL, str(exc), "tail_unreachable")
    return error(INTERNAL, str(exc), exc.code, **_detail(exc))


def _detail(exc: TailError) -> dict[str, Any]:
    return {"details": exc.details} if exc.details else {}
