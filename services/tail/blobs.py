"""``GET /api/v1/blobs/{sha256}``: content-addressed blobs, served raw.

A blob lives at ``<data>/blobs/<sha[:2]>/<sha>`` (the Korg layout). The tail
only serves the directory; putting blobs there belongs to the content-reference
machinery of a later issue. A blob is checked against its name before it is
served: bytes that do not hash to their name are an integrity failure, never
served as if they were the blob.

The content type is sniffed the way Korg's MCP layer does: JSON (what a
structured value's canonical bytes are), else UTF-8 text, else octet-stream.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path

from aiohttp import web

from laneledger.errors import EntityNotFound, IntegrityError, InvalidRequest

from .api import Query

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
MAX_BLOB_BYTES = 64 << 20  # served from memory after the check; larger is refused


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def read(self, sha256: str) -> tuple[bytes, str]:
        path = self.path(sha256)
        try:
            size = path.stat().st_size
            if size > MAX_BLOB_BYTES:
                raise IntegrityError("blob larger than this service serves", kind="blob_too_large",
                                     sha256=sha256, size_bytes=size, limit_bytes=MAX_BLOB_BYTES)
            data = path.read_bytes()
        except FileNotFoundError:
            raise EntityNotFound("no such blob", kind="blob", sha256=sha256) from None
        except OSError as exc:
            raise IntegrityError(f"blob unreadable: {exc}", kind="blob_unreadable",
                                 sha256=sha256) from exc
        found = hashlib.sha256(data).hexdigest()
        if found != sha256:
            raise IntegrityError("blob content does not match its sha256", kind="blob_mismatch",
                                 sha256=sha256, found=found)
        return data, content_type(data)


def content_type(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "application/octet-stream"
    try:
        json.loads(text)
    except ValueError:
        return "text/plain; charset=utf-8"
    return "application/json"


def parse_sha256(raw: str) -> str:
    """A lowercase hex sha256, optionally written as a content ref's ``sha256:<hex>``."""
    value = raw[len("sha256:"):] if raw.startswith("sha256:") else raw
    if not _SHA256.match(value):
        raise InvalidRequest("sha256 must be 64 lowercase hex digits", parameter="sha256",
                             found=raw[:80])
    return value


def blob_route(store: BlobStore, readers) -> web.RouteDef:
    async def get_blob(request: web.Request) -> web.Response:
        Query(request, ())
        sha256 = parse_sha256(request.match_info["sha256"])
        data, ctype = await asyncio.get_running_loop().run_in_executor(readers, store.read, sha256)
        return web.Response(body=data, headers={
            "Content-Type": ctype,
            "ETag": f'"{sha256}"',
            "Cache-Control": "public, max-age=31536000, immutable",
        })

    return web.get("/api/v1/blobs/{sha256}", get_blob, name="blob")
