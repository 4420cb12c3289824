"""Batched JetStream direct get: the last message of many subjects in one request.

nats-py has no call for it, so it is built on the core request API: one
request to ``$JS.API.DIRECT.GET.<stream>`` with ``{"multi_last": [...],
"batch": n}`` (ADR-31, nats-server 2.11 and later; the stream must allow
direct gets, as the object store's and the KV's do). The server answers with
one message per subject that has one, then an end-of-batch marker (status
204, ``EOB``); a request naming more than ``MULTI_LAST_MAX`` subjects is
refused by the server (413), so larger sets are sent in chunks of that size.
A subject with no message is absent from the answer; a request matching
nothing is answered 404 alone.

Subjects come from callers that built them (the blob store's meta subjects):
no wildcards are expected, and an answer's subject outside the asked set is
ignored, so a subject matching more than itself cannot grow the result.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from laneledger.contract.errors import LedgerTimeout, LedgerUnavailable

# Subjects one multi_last request may name (nats-server answers 413 beyond 1024).
MULTI_LAST_MAX = 1000
_STATUS, _DESCRIPTION = "Status", "Description"
_SUBJECT = "Nats-Subject"


class NoDirectGet(LedgerUnavailable):
    """Nobody answers direct gets for the stream: it does not allow them (or
    does not exist). Callers may fall back to one lookup per subject."""


async def last_messages(
    nc: NATS, stream: str, subjects: Sequence[str], *, timeout_s: float = 10.0
) -> dict[str, Msg]:
    """The last message of each of ``subjects`` in ``stream`` that has one, by
    subject, in ``ceil(len / MULTI_LAST_MAX)`` requests, one after another.
    ``LedgerTimeout`` when an answer does not end within ``timeout_s``,
    ``NoDirectGet`` when nobody answers, ``LedgerUnavailable`` for any other
    refusal."""
    wanted = list(dict.fromkeys(subjects))
    found: dict[str, Msg] = {}
    for start in range(0, len(wanted), MULTI_LAST_MAX):
        chunk = wanted[start : start + MULTI_LAST_MAX]
        asked = set(chunk)
        for msg in await _multi_last(nc, stream, chunk, timeout_s):
            subject = (msg.headers or {}).get(_SUBJECT, "")
            if subject in asked:
                found[subject] = msg
    return found


async def _multi_last(nc: NATS, stream: str, subjects: list[str], timeout_s: float) -> list[Msg]:
    inbox = nc.new_inbox()
    answers: asyncio.Queue[Msg] = asyncio.Queue()
    # At most one answer per subject, the end marker, and a status: the
    # subscription's own bound keeps a misbehaving peer from growing it.
    sub = await nc.subscribe(inbox, cb=answers.put, pending_msgs_limit=len(subjects) + 2)
    request = json.dumps({"multi_last": subjects, "batch": len(subjects)}).encode()
    got: list[Msg] = []
    try:
        await nc.publish(f"$JS.API.DIRECT.GET.{stream}", request, reply=inbox)
        async with asyncio.timeout(timeout_s):
            while True:
                msg = await answers.get()
                status = (msg.headers or {}).get(_STATUS)
                if status is None:
                    got.append(msg)
                    if len(got) > len(subjects):
                        raise LedgerUnavailable(
                            "a batched direct get answered more messages than subjects asked",
                            stream=stream,
                            asked=len(subjects),
                        )
                elif status in ("204", "404"):  # the end of the batch; nothing matched
                    return got
                elif status == "503":
                    raise NoDirectGet("no direct get responder for the stream", stream=stream)
                else:
                    description = (msg.headers or {}).get(_DESCRIPTION, "")
                    raise LedgerUnavailable(
                        f"a batched direct get was refused: {status} {description}".rstrip(),
                        stream=stream,
                        status=status,
                    )
    except TimeoutError:
        raise LedgerTimeout(
            f"batched direct get on {stream}: no end of batch in {timeout_s:g}s", stream=stream
        ) from None
    finally:
        await sub.unsubscribe()
