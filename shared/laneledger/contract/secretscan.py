"""Secret-shaped values in stored bytes that cannot be redacted, only refused.

A content blob or a checkpoint artifact is named by the hash of its bytes,
so a secret in it cannot be replaced by a marker as an inline value's is
(``redaction.py``): it is looked for with the same rules, and the bytes are
refused when one matches. Normative text: spec/content.md, "Redaction".
"""

from __future__ import annotations

import msgspec

from laneledger.contract.redaction import Redactor


def json_secret_rules(data: bytes, redactor: Redactor) -> dict[str, int] | None:
    """The rules that match in ``data`` read as one JSON value, by key and by
    shape exactly as an inline value's (count per rule; ``{}``: clean); None
    when the bytes are not JSON."""
    try:
        value = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    if redactor.surely_clean(value):
        return {}
    return dict(redactor.redact(value).rules)


def secret_rules(data: bytes, redactor: Redactor) -> dict[str, int]:
    """The rules that match anywhere in ``data``: as JSON when it is JSON
    (what the SDK externalizes always is: keys and shapes, escapes decoded),
    else by shape over the bytes read as Latin-1 (one character per byte,
    so an ASCII secret is seen wherever it sits, even among binary bytes).
    The whole of ``data`` in one pass: nothing is split across pieces, so
    its size must be bounded by the caller (``blobstore.MAX_BLOB_BYTES``)."""
    found = json_secret_rules(data, redactor)
    if found is not None:
        return found
    rules: dict[str, int] = {}
    redactor.redact_text(data.decode("latin-1"), rules)
    return rules
