"""``GET /api/v1/blobs/{sha256}``: content-referenced blobs, served raw.

Blobs live in JetStream object store buckets (``laneledger.sdk.blobstore``,
``spec/content.md``): the tenant's own, then the shared one. A read names its
tenant, which comes from the request's token (``laneledger.runtime.access``; an
operator or open tail names it with ``tenant=``), so one tenant never reads
another's blob by its hash. A blob is checked
against its name before it is served: bytes that do not hash to their name
are an integrity failure, never served as if they were the blob.

The content type is sniffed the way Korg's MCP layer does: JSON (what a
structured value's canonical bytes are), else UTF-8 text, else octet-stream.
"""

from __future__ import annotations

import json

from aiohttp import web
from nats.js.client import JetStreamContext

from laneledger.contract.contentref import parse_sha256
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.subjects import Subjects
from laneledger.runtime.access import scope_of
from laneledger.sdk.blobstore import BlobBuckets

from ..api import decode_parameters
from ..queries import BlobQuery


class BlobReader:
    """The blob buckets, never created by the tail: a tenant without one
    (and no blob in the shared bucket) reads 404."""

    def __init__(self, js: JetStreamContext, subjects: Subjects, timeout_s: float) -> None:
        self._buckets = BlobBuckets(js, subjects=subjects, timeout_s=timeout_s)

    async def read(self, tenant: str, sha256: str) -> tuple[bytes, str]:
        data = await self._buckets.get(tenant, f"sha256:{sha256}")
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


def blob_route(store: BlobReader) -> web.RouteDef:
    async def get_blob(request: web.Request) -> web.Response:
        query = decode_parameters(request, BlobQuery)
        sha256 = parse_sha256(query.sha256)
        tenant = scope_of(request).narrow(query.tenant)
        if tenant is None:  # an operator (or open) read: blobs live per tenant
            raise InvalidRequest("name the blob's tenant (tenant=)", parameter="tenant")
        data, ctype = await store.read(tenant, sha256)
        return blob_response(data, ctype, sha256)

    return web.get("/api/v1/blobs/{sha256}", get_blob, name="blob")


def blob_response(data: bytes, ctype: str, sha256: str) -> web.Response:
    """A blob's bytes as served: immutable, but a tenant's own, so shared
    caches must not keep it."""
    return web.Response(
        body=data,
        headers={
            "Content-Type": ctype,
            "ETag": f'"{sha256}"',
            "Cache-Control": "private, max-age=31536000, immutable",
        },
    )
