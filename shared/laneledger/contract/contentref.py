"""Content references: large payload values live in the blob store.

The pure rule (normative text: ``spec/content.md``; Korg §7.2, §7.3). A
payload value whose canonical bytes exceed ``THRESHOLD_BYTES`` is replaced by
``{"_ref": "sha256:<hex>", "size_bytes": n}`` and described in the payload's
``payload_refs``. The rule depends on the bytes alone, so two producers with
the same payload make the same decision and the same hash.

Canonical bytes: a string is its UTF-8; any other value its RFC 8785 bytes.

Which values: the walk goes leaves first. A container is looked at only
after its own oversized children were replaced, and is replaced itself only
if it is still over the threshold (so ``args`` keeps its small fields and
only ``args.content`` moves out). Never replaced: the payload itself,
``payload_refs``, a value under a path key (``file_path``, ``path``,
``filepath``: Korg §6.3 wants paths verbatim) and a container that holds
such a path at any depth.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from laneledger.contract.canonical import canonicalize
from laneledger.contract.errors import InvalidRequest

THRESHOLD_BYTES = 1024
REFS_FIELD = "payload_refs"
PATH_KEYS = frozenset({"file_path", "path", "filepath"})
JSON_MEDIA_TYPE = "application/json"
TEXT_MEDIA_TYPE = "text/plain; charset=utf-8"
_REF = re.compile(r"^sha256:([0-9a-f]{64})$")
_HEX = re.compile(r"^[0-9a-f]{64}$")


def parse_sha256(raw: str) -> str:
    """A blob's name in an HTTP path: lowercase hex sha256, optionally written
    as a content ref's ``sha256:<hex>``."""
    value = raw[len("sha256:") :] if raw.startswith("sha256:") else raw
    if not _HEX.match(value):
        raise InvalidRequest("sha256 must be 64 lowercase hex digits", parameter="sha256", found=raw[:80])
    return value


def canonical_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return canonicalize(value)


def ref_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hex_of(ref: str) -> str:
    """The hex digest of ``sha256:<hex>`` (or of a bare hex digest)."""
    match = _REF.match(ref)
    if match:
        return match.group(1)
    if _HEX.match(ref):
        return ref
    raise InvalidRequest(
        "a content reference is sha256:<64 lowercase hex digits>", parameter="ref", found=ref[:80]
    )


def is_ref(value: Any) -> bool:
    """A content-reference sentinel: exactly ``_ref`` and ``size_bytes``."""
    return (
        isinstance(value, dict)
        and len(value) == 2
        and isinstance(value.get("_ref"), str)
        and _REF.match(value["_ref"]) is not None
        and type(value.get("size_bytes")) is int
        and value["size_bytes"] >= 0
    )


@dataclass(frozen=True)
class Externalized:
    payload: dict[str, Any]
    blobs: dict[str, bytes]  # ref -> bytes, one entry per distinct blob
    descriptors: list[dict[str, Any]]  # the ones added to payload_refs, in walk order


def externalize(payload: dict[str, Any], threshold: int = THRESHOLD_BYTES) -> Externalized:
    """Replace the oversized values of ``payload`` (returns a new payload;
    ``payload`` itself is left as it was)."""
    if len(canonical_bytes(payload)) <= threshold:
        return Externalized(payload, {}, [])
    blobs: dict[str, bytes] = {}
    descriptors: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    for key, value in payload.items():
        if key == REFS_FIELD or key in PATH_KEYS:
            out[key] = value
        else:
            out[key] = _walk(value, key, threshold, blobs, descriptors)[0]
    if descriptors:
        existing = payload.get(REFS_FIELD, [])
        if not isinstance(existing, list):
            raise InvalidRequest(
                f"payload.{REFS_FIELD} must be an array of descriptors", path=f"$.payload.{REFS_FIELD}"
            )
        out[REFS_FIELD] = [*existing, *(d for d in descriptors if d not in existing)]
    return Externalized(out, blobs, descriptors)


def _walk(
    value: Any, label: str, threshold: int, blobs: dict[str, bytes], descriptors: list[dict[str, Any]]
) -> tuple[Any, bool]:
    """``(new value, holds a path)``."""
    if is_ref(value):
        return value, False
    holds_path = False
    if isinstance(value, (dict, list)):
        raw = canonical_bytes(value)
        if len(raw) <= threshold:  # nothing inside can be bigger than the whole
            return value, _has_path(value)
        if isinstance(value, dict):
            new: Any = {}
            for key, item in value.items():
                if key in PATH_KEYS:
                    new[key], holds_path = item, True
                else:
                    new[key], inner = _walk(item, f"{label}.{key}", threshold, blobs, descriptors)
                    holds_path = holds_path or inner
        else:
            new = []
            for i, item in enumerate(value):
                walked, inner = _walk(item, f"{label}[{i}]", threshold, blobs, descriptors)
                new.append(walked)
                holds_path = holds_path or inner
        value = new
        if holds_path:
            return value, True
    raw = canonical_bytes(value)
    if len(raw) <= threshold:
        return value, holds_path
    ref = ref_of(raw)
    blobs.setdefault(ref, raw)
    descriptors.append(
        {
            "sha256": ref[len("sha256:") :],
            "size_bytes": len(raw),
            "label": label,
            "media_type": TEXT_MEDIA_TYPE if isinstance(value, str) else JSON_MEDIA_TYPE,
        }
    )
    return {"_ref": ref, "size_bytes": len(raw)}, False


def _has_path(value: Any) -> bool:
    if isinstance(value, dict):
        return any(k in PATH_KEYS or _has_path(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_path(v) for v in value)
    return False


# Content references one append request may name, its events' together: each
# is looked up (and, when only uploaded, copied) before the append commits,
# so their number bounds that work (spec/content.md, "What an event references").
MAX_REFS_PER_APPEND = 1000


def refs_in(payload: Any) -> list[tuple[str, int]]:
    """Every ``(ref, size_bytes)`` a committed payload depends on: its
    sentinels and the descriptors of its ``payload_refs``, each once, in
    order. A descriptor that is not well formed is not a reference (the
    payload is a producer's own JSON)."""
    if not _may_reference(payload):
        return []
    found: dict[tuple[str, int], None] = {}

    def walk(value: Any) -> None:
        if is_ref(value):
            found[(value["_ref"], value["size_bytes"])] = None
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(payload)
    if isinstance(payload, dict) and isinstance(payload.get(REFS_FIELD), list):
        for d in payload[REFS_FIELD]:
            if (
                isinstance(d, dict)
                and isinstance(d.get("sha256"), str)
                and _HEX.match(d["sha256"])
                and type(d.get("size_bytes")) is int
                and d["size_bytes"] >= 0
            ):
                found[("sha256:" + d["sha256"], d["size_bytes"])] = None
    return list(found)


def blob_hexes(payload: Any) -> list[str]:
    """The hex sha256 of every blob a committed payload references
    (``refs_in``), each once: the blobs its erasure may leave unreferenced."""
    return list(dict.fromkeys(hex_of(ref) for ref, _size in refs_in(payload)))


def _may_reference(payload: Any) -> bool:
    # Nearly every payload holds no reference: skip the Python walk unless a
    # sentinel key or the descriptor list can be there. A "_ref" key is
    # always written exactly '"_ref":' by the JSON encoder (C, twice as fast
    # as repr); a string that merely contains it only costs the walk.
    if isinstance(payload, dict) and REFS_FIELD in payload:
        return True
    try:
        return _REF_KEY in _encode(payload)
    except (TypeError, ValueError, OverflowError):  # not plain JSON: let the walk decide
        return True


_REF_KEY = b'"_ref":'
_encode = msgspec.json.encode


def request_may_reference(raw: bytes) -> bool:
    """Whether raw JSON bytes (a producer's, so written any way JSON allows)
    can hold a content reference: a ``"_ref"`` or ``"payload_refs"`` key,
    or a ``\\u`` escape, the only way to spell either otherwise. False is
    certain; True only means decode and look."""
    return b'"_ref"' in raw or b'"' + REFS_FIELD.encode() + b'"' in raw or b"\\u" in raw
