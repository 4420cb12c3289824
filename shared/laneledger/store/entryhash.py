"""A committed event's entry hash and stored bytes, from one canonicalization
(spec/canonical.md, spec/object-model.md step 6)."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import CONTENT_DIGEST, CONTENT_SALT, content_digest

# In the canonical bytes of a committed event, "entry_hash" is immediately
# followed by "event_type" (no allowed top-level key sorts between them), and a
# quote inside a string value is always escaped, so the first ',"event_type":'
# is the key itself.
_BEFORE_EVENT_TYPE = b',"event_type":'
# "signature" sorts between "session_id" and "subject_id"; everything after it
# is a string, and payload/extensions (where a nested "subject_id" key could
# sit) come before, so the *last* ',"subject_id":' is the top-level key.
_BEFORE_SUBJECT_ID = b',"subject_id":'
# In a sealed event's canonical bytes, the keys before "extensions" and
# between it and "payload" hold strings only, and those after "payload" only
# strings and ints: so the first ',"extensions":', the first ',"payload":'
# after it and the last ',"position":' are the top-level keys, and the
# payload's bytes lie between the last two.
_SALT_MEMBER = b'"content_salt":"'
_EXTENSIONS = b',"extensions":'
_PAYLOAD = b',"payload":'
_BEFORE_POSITION = b',"position":'


def hashed_body(record: dict[str, Any], key: bytes | None, *, admitted: bool = False) -> tuple[str, bytes]:
    """The entry hash of a committed event (``record`` has every field but
    ``entry_hash``) and its stored canonical bytes, with ``entry_hash`` in.

    Canonicalizes once and splices the hash (and a ``signature``, which is
    outside the preimage: spec/canonical.md §3) in, instead of canonicalizing
    the record twice; ``tests/test_store_writer.py`` checks the result equals
    ``canonicalize`` of the full record. ``admitted``: see ``canonicalize``.
    A record with a ``content_salt`` is sealed (``sealed_body``); it is the
    caller's fresh dict, and loses its ``signature`` (spliced back in the body).
    """
    if CONTENT_SALT in record:
        return sealed_body(record, key, admitted=admitted)
    signature = record.get("signature")
    if signature is not None:
        record = {k: v for k, v in record.items() if k != "signature"}
    preimage = canonicalize(record, admitted=admitted)
    digest = _hash(preimage, key)
    at = preimage.index(_BEFORE_EVENT_TYPE)
    body = b'%s,"entry_hash":"%s"%s' % (preimage[:at], digest.encode(), preimage[at:])
    if signature is not None:  # 128 hex digits (model.Signature): nothing to escape
        at = body.rindex(_BEFORE_SUBJECT_ID)
        body = b'%s,"signature":"%s"%s' % (body[:at], signature.encode(), body[at:])
    return digest, body


def sealed_body(record: dict[str, Any], key: bytes | None, *, admitted: bool = False) -> tuple[str, bytes]:
    """``hashed_body`` of a sealed event. The whole record, salt in, is
    canonicalized once (the stored body but for the hash); the content's
    bytes are sliced out of it for ``content_digest``, and the preimage is
    the same bytes with the content cut out and the salt's member replaced
    by the digest's ("content_digest" and "content_salt" sort to the same
    place)."""
    signature = record.pop("signature", None)
    salt = record[CONTENT_SALT]
    whole = canonicalize(record, admitted=admitted)
    at_salt = whole.index(_SALT_MEMBER)
    salt_end = at_salt + len(_SALT_MEMBER) + 65  # 64 hex digits and the closing quote
    at_ext = whole.index(_EXTENSIONS, salt_end)
    ext_end = at_ext + len(_EXTENSIONS)
    extensions = record["extensions"]
    ext_end += 2 if not extensions else len(canonicalize(extensions, admitted=admitted))
    at_payload = whole.index(_PAYLOAD, ext_end)
    payload_end = whole.rindex(_BEFORE_POSITION)
    content = b'{"extensions":%s,"payload":%s}' % (
        whole[at_ext + len(_EXTENSIONS) : ext_end],
        whole[at_payload + len(_PAYLOAD) : payload_end],
    )
    digest_member = b'"%s":"%s"' % (CONTENT_DIGEST.encode(), content_digest(salt, content).encode())
    preimage = b"".join(
        (
            whole[:at_salt],
            digest_member,
            whole[salt_end:at_ext],
            whole[ext_end:at_payload],
            whole[payload_end:],
        )
    )
    digest = _hash(preimage, key)
    at = whole.index(_BEFORE_EVENT_TYPE, salt_end)
    body = b'%s,"entry_hash":"%s"%s' % (whole[:at], digest.encode(), whole[at:])
    if signature is not None:
        at = body.rindex(_BEFORE_SUBJECT_ID)
        body = b'%s,"signature":"%s"%s' % (body[:at], signature.encode(), body[at:])
    return digest, body


def _hash(preimage: bytes, key: bytes | None) -> str:
    if key is None:
        return hashlib.sha256(preimage).hexdigest()
    return hmac.new(key, preimage, hashlib.sha256).hexdigest()
