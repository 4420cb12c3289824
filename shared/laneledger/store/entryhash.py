"""A committed event's entry hash and stored bytes, from one canonicalization
(spec/canonical.md, spec/object-model.md step 6)."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from laneledger.contract.canonical import canonicalize

# In the canonical bytes of a committed event, "entry_hash" is immediately
# followed by "event_type" (no allowed top-level key sorts between them), and a
# quote inside a string value is always escaped, so the first ',"event_type":'
# is the key itself.
_BEFORE_EVENT_TYPE = b',"event_type":'
# "signature" sorts between "session_id" and "subject_id"; everything after it
# is a string, and payload/extensions (where a nested "subject_id" key could
# sit) come before, so the *last* ',"subject_id":' is the top-level key.
_BEFORE_SUBJECT_ID = b',"subject_id":'


def hashed_body(record: dict[str, Any], key: bytes | None, *, admitted: bool = False) -> tuple[str, bytes]:
    """The entry hash of a committed event (``record`` has every field but
    ``entry_hash``) and its stored canonical bytes, with ``entry_hash`` in.

    Canonicalizes once and splices the hash (and a ``signature``, which is
    outside the preimage: spec/canonical.md §3) in, instead of canonicalizing
    the record twice; ``tests/test_store_writer.py`` checks the result equals
    ``canonicalize`` of the full record. ``admitted``: see ``canonicalize``.
    """
    signature = record.get("signature")
    if signature is not None:
        record = {k: v for k, v in record.items() if k != "signature"}
    preimage = canonicalize(record, admitted=admitted)
    digest = (
        hashlib.sha256(preimage).hexdigest()
        if key is None
        else hmac.new(key, preimage, hashlib.sha256).hexdigest()
    )
    at = preimage.index(_BEFORE_EVENT_TYPE)
    body = b'%s,"entry_hash":"%s"%s' % (preimage[:at], digest.encode(), preimage[at:])
    if signature is not None:  # 128 hex digits (model.Signature): nothing to escape
        at = body.rindex(_BEFORE_SUBJECT_ID)
        body = b'%s,"signature":"%s"%s' % (body[:at], signature.encode(), body[at:])
    return digest, body
