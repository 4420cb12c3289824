"""Secret-shaped values in stored bytes that cannot be redacted, only refused.

A content blob or a checkpoint artifact is named by the hash of its bytes,
so a secret in it cannot be replaced by a marker as an inline value's is
(``redaction.py``): it is looked for with the same rules, and the bytes are
refused when one matches. Normative text: spec/content.md, "Redaction".

Long strings are looked at in overlapping windows: Python's regex engine
holds the GIL for the whole of one call, so one pattern run over a 64 MiB
string would stall every other thread (the sequencer's event loop among
them) for seconds; a window bounds each call. Consecutive windows overlap by
``REACH``, longer than any secret the rules are meant for (a PEM private key
of 8192-bit RSA is about 6.5 KiB), so such a secret lies whole in one window
wherever it sits.
"""

from __future__ import annotations

from typing import Any

import msgspec

from laneledger.contract.redaction import Redactor, is_marker

WINDOW = 64 << 10  # characters a pattern runs over in one call
REACH = 16 << 10  # how far consecutive windows overlap


def json_secret_rules(data: bytes, redactor: Redactor) -> set[str] | None:
    """The rules that match in ``data`` read as one JSON value, by key and by
    shape exactly as an inline value's (empty: clean); None when the bytes
    are not JSON."""
    try:
        value = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    return _rules(value, redactor)


def secret_rules(data: bytes, redactor: Redactor) -> set[str]:
    """The rules that match anywhere in ``data``: as JSON when it is JSON
    (what the SDK externalizes always is: keys and shapes, escapes decoded),
    else by shape over the bytes read as Latin-1 (one character per byte,
    so an ASCII secret is seen wherever it sits, even among binary bytes).
    The caller bounds the size (``blobstore.MAX_BLOB_BYTES``)."""
    found = json_secret_rules(data, redactor)
    return found if found is not None else _rules(data.decode("latin-1"), redactor)


def _rules(value: Any, redactor: Redactor) -> set[str]:
    """By key on the value's skeleton (its strings stood in for), then by
    shape on its strings, a window's worth at a time: no call sees more
    than about ``WINDOW`` characters, joined hints included."""
    strings: list[str] = []
    found = set(redactor.redact(_skeleton(value, strings)).rules)
    batch: list[str] = []
    size = 0
    for text in strings:
        for piece in _windows(text):
            batch.append(piece)
            size += len(piece)
            if size >= WINDOW:
                _add(found, redactor, batch)
                batch, size = [], 0
    _add(found, redactor, batch)
    return found


def _add(found: set[str], redactor: Redactor, batch: list[str]) -> None:
    if batch and not redactor.surely_clean(batch):
        found.update(redactor.redact(batch).rules)


def _skeleton(value: Any, strings: list[str]) -> Any:
    """``value`` with each string (but an empty one or a marker, which the key
    rule treats apart) replaced by ``"x"`` — too short for any shape, yet a
    value under a secret-named key — and gathered into ``strings``."""
    if isinstance(value, str):
        if not value or is_marker(value):
            return value
        strings.append(value)
        return "x"
    if isinstance(value, dict):
        return {key: _skeleton(item, strings) for key, item in value.items()}
    if isinstance(value, list):
        return [_skeleton(item, strings) for item in value]
    return value


def _windows(text: str) -> list[str]:
    """``text`` in windows of ``WINDOW`` characters, each overlapping the next by ``REACH``."""
    if len(text) <= WINDOW:
        return [text]
    return [text[i : i + WINDOW] for i in range(0, len(text) - REACH, WINDOW - REACH)]
