"""laneledger.runtime.requestserver against a real nats-server: the typed
replies every request gets (op/subject mismatch, a handler's bug, a reply too
large for NATS), the bounded op label, requests nobody waits for, and the
concurrent mode's ordering and drain."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
import nats.errors
import pytest
from nats.aio.client import Client as NATS
from polling import eventually
from prometheus_client import CollectorRegistry, Counter

from laneledger.contract.errors import RequestTooLarge
from laneledger.contract.model import Reply, ReplyError, ReplyOk
from laneledger.contract.subjects import RequestSubject
from laneledger.runtime.requestserver import RequestServer

BASE = "test.svc"
log = logging.getLogger("test.requestserver")


class Echo(msgspec.Struct, tag="echo", tag_field="op"):
    text: str


class Boom(msgspec.Struct, tag="boom", tag_field="op"):
    pass


class Big(msgspec.Struct, tag="big", tag_field="op"):
    pass


class Wait(msgspec.Struct, tag="wait", tag_field="op"):
    pass


Op = Echo | Boom | Big | Wait


class Service:
    """The handler side: what each op does, and what it saw."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.seen: list[tuple[str, str | None]] = []
        self.release = asyncio.Event()

    async def handle(self, cmd: Op, target: RequestSubject) -> Any:
        self.seen.append((target.op, target.tenant))
        match cmd:
            case Echo(text=text):
                return {"text": text, "tenant": target.tenant}
            case Boom():
                raise RuntimeError("boom")
            case Big():
                return "x" * self.nc.max_payload
            case Wait():
                await self.release.wait()
                return "released"


def too_large(op: str, size: int, limit: int) -> RequestTooLarge:
    return RequestTooLarge("too large for one reply", size_bytes=size, limit_bytes=limit, op=op)


def make_server(nc: NATS, service: Service, registry: CollectorRegistry, **kwargs: Any) -> RequestServer[Op]:
    counter = Counter("test_requests_total", "requests", ["op", "outcome"], registry=registry)
    return RequestServer[Op](
        nc,
        base=BASE,
        queue="test",
        commands=Op,
        handler=service.handle,
        counter=counter,
        log=log,
        what="test",
        other_op="other",
        too_large=too_large,
        **kwargs,
    )


def count(registry: CollectorRegistry, op: str, outcome: str) -> float:
    return registry.get_sample_value("test_requests_total", {"op": op, "outcome": outcome}) or 0.0


def labels(registry: CollectorRegistry) -> set[tuple[str, str]]:
    return {
        (sample.labels["op"], sample.labels["outcome"])
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == "test_requests_total"
    }


async def ask(nc: NATS, op: str, body: Any, *, subject: str | None = None) -> Reply:
    msg = await nc.request(subject or f"{BASE}.{op}", msgspec.json.encode(body), timeout=5)
    return msgspec.json.decode(msg.data, type=Reply)


@pytest.fixture
async def served(nc: NATS):
    service, registry = Service(nc), CollectorRegistry()
    server = make_server(nc, service, registry)
    await server.start()
    yield service, registry
    await server.stop()


async def test_a_request_is_answered_with_the_result_and_its_tenant(nc: NATS, served) -> None:
    service, registry = served
    reply = await ask(nc, "echo", {"op": "echo", "text": "hi"})
    assert reply == ReplyOk(result={"text": "hi", "tenant": None})
    scoped = await ask(nc, "echo", {"op": "echo", "text": "hi"}, subject=f"{BASE}.acme.echo")
    assert scoped == ReplyOk(result={"text": "hi", "tenant": "acme"})
    assert service.seen == [("echo", None), ("echo", "acme")]
    assert count(registry, "echo", "ok") == 2


async def test_a_body_whose_op_differs_from_the_subjects_is_refused(nc: NATS, served) -> None:
    service, registry = served
    reply = await ask(nc, "boom", {"op": "echo", "text": "hi"})
    assert isinstance(reply, ReplyError)
    assert reply.error.code == "invalid_request"
    assert reply.error.message == "the body's op differs from the subject's"
    assert reply.error.details == {"path": "$.op", "op": "echo", "subject_op": "boom"}
    assert service.seen == []  # the handler never saw it
    assert count(registry, "boom", "invalid_request") == 1


async def test_unknown_ops_and_bad_subjects_share_one_metric_label(nc: NATS, served) -> None:
    _, registry = served
    subjects = [f"{BASE}.nope", f"{BASE}.also-nope", f"{BASE}.a.b.echo", f"{BASE}.{'x' * 40}"]
    for subject in subjects:
        reply = await ask(nc, "", {"op": "echo", "text": "hi"}, subject=subject)
        assert isinstance(reply, ReplyError) and reply.error.code == "invalid_request", subject
    # The subject with too many tokens names a known op but is refused as a subject.
    assert labels(registry) == {("other", "invalid_request"), ("echo", "invalid_request")}
    assert count(registry, "other", "invalid_request") == 3


async def test_undecodable_bodies_get_their_typed_error(nc: NATS, served) -> None:
    _, registry = served
    msg = await nc.request(f"{BASE}.echo", b"{not json", timeout=5)
    reply = msgspec.json.decode(msg.data, type=Reply)
    assert isinstance(reply, ReplyError) and reply.error.code == "malformed_message"
    reply = await ask(nc, "echo", {"op": "echo"})
    assert isinstance(reply, ReplyError) and reply.error.code == "invalid_request"
    assert count(registry, "echo", "malformed_message") == count(registry, "echo", "invalid_request") == 1


async def test_a_reply_over_max_payload_becomes_request_too_large(nc: NATS, served) -> None:
    _, registry = served
    reply = await ask(nc, "big", {"op": "big"})
    assert isinstance(reply, ReplyError)
    assert reply.error.code == "request_too_large" and reply.error.message == "too large for one reply"
    assert reply.error.details["limit_bytes"] == nc.max_payload
    assert reply.error.details["size_bytes"] > nc.max_payload
    assert reply.error.details["op"] == "big"
    assert count(registry, "big", "ok") == 1  # the op itself succeeded


async def test_a_handler_bug_answers_internal_and_is_logged(nc: NATS, served, caplog) -> None:
    _, registry = served
    with caplog.at_level(logging.ERROR, logger=log.name):
        reply = await ask(nc, "boom", {"op": "boom"})
    assert isinstance(reply, ReplyError)
    assert (reply.error.code, reply.error.message, reply.error.retryable) == (
        "internal",
        "RuntimeError: boom",
        True,
    )
    assert [r.getMessage() for r in caplog.records] == ["test boom failed"]
    assert count(registry, "boom", "internal") == 1
    # The server goes on.
    assert await ask(nc, "echo", {"op": "echo", "text": "after"}) == ReplyOk(
        result={"text": "after", "tenant": None}
    )


async def test_a_request_without_a_reply_subject_is_served_and_not_answered(nc: NATS, served) -> None:
    service, registry = served
    await nc.publish(f"{BASE}.echo", msgspec.json.encode({"op": "echo", "text": "nobody asks"}))
    await nc.publish(f"{BASE}.big", msgspec.json.encode({"op": "big"}))  # too large, and nobody to tell
    await nc.publish(f"{BASE}.boom", msgspec.json.encode({"op": "boom"}))
    # Served in arrival order: once this is answered, those were served too.
    assert await ask(nc, "echo", {"op": "echo", "text": "asks"}) == ReplyOk(
        result={"text": "asks", "tenant": None}
    )
    assert [op for op, _ in service.seen] == ["echo", "big", "boom", "echo"]
    assert count(registry, "echo", "ok") == 2
    assert count(registry, "big", "ok") == count(registry, "boom", "internal") == 1


async def test_concurrent_requests_do_not_wait_for_each_other_and_stop_drains_them(nc: NATS) -> None:
    service, registry = Service(nc), CollectorRegistry()
    server = make_server(nc, service, registry, concurrent=True)
    await server.start()
    waiting = asyncio.create_task(ask(nc, "wait", {"op": "wait"}))
    await eventually(lambda: ("wait", None) in service.seen, what="the wait request in its handler")
    # A later request is answered while the first still waits in its handler.
    assert await ask(nc, "echo", {"op": "echo", "text": "hi"}) == ReplyOk(
        result={"text": "hi", "tenant": None}
    )
    assert not waiting.done()
    stopping = asyncio.create_task(server.stop(drain_timeout_s=30))
    service.release.set()  # the request in hand finishes during the drain, and is answered
    assert await waiting == ReplyOk(result="released")
    await stopping
    assert count(registry, "wait", "ok") == 1


async def test_stop_cancels_what_does_not_finish_in_the_drain_time(nc: NATS) -> None:
    service, registry = Service(nc), CollectorRegistry()
    server = make_server(nc, service, registry, concurrent=True)
    await server.start()
    waiting = asyncio.create_task(nc.request(f"{BASE}.wait", b'{"op": "wait"}', timeout=1))
    await eventually(lambda: ("wait", None) in service.seen, what="the wait request in its handler")
    await server.stop(drain_timeout_s=0.1)
    with pytest.raises(nats.errors.TimeoutError):  # cancelled: never answered
        await waiting
    assert count(registry, "wait", "ok") == 0
