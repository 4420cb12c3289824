"""``korg://{ledger}/…`` and ``laneledger://{ledger}/…`` URIs → what to read.

Pure. A URI is parsed whole and checked (its scheme, its path against the
catalog, its query against the parameters that resource takes) before
anything is read: what does not parse is §8.6 ``not_found``, a bad query
``invalid_params``. Query values are bounded like the tail's (1–256
characters; integers the tail checks again).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

KORG, LANELEDGER = "korg", "laneledger"
MAX_URI = 2048

# (kind, path pattern, query parameters it takes). Groups are percent-decoded.
_KORG = (
    ("recent", r"ledger/recent", ("cursor", "limit")),
    ("heads", r"ledger/heads", ("cursor", "limit")),
    ("schema_event", r"schema/event", ()),
    ("schema_spec", r"schema/spec", ()),
    ("integrity", r"stats/integrity", ()),
    ("session", r"session/(\d+)", ()),
    ("summary", r"session/(\d+)/summary", ("cursor", "limit", "source_agent")),
    ("events", r"session/(\d+)/events", ("cursor", "limit", "source_agent")),
    ("event", r"event/(\d+)", ()),
    ("agent", r"agent/(.+)/recent", ("cursor", "limit")),
    ("blob", r"blob/([0-9a-fA-F]{64})", ()),
)
_LANELEDGER = (
    ("ll_checkpoint", r"log/checkpoint", ()),
    ("ll_session", r"session/([^/]+)", ()),
    ("ll_timeline", r"session/([^/]+)/timeline", ()),
    ("ll_causal_tree", r"session/([^/]+)/causal-tree", ()),
    ("ll_bundle", r"session/([^/]+)/bundle", ()),
    ("ll_event", r"event/(\d+)", ()),
    ("ll_proof", r"proof/(\d+)", ()),
)
_CATALOG: dict[str, list[tuple[str, re.Pattern[str], tuple[str, ...]]]] = {
    KORG: [(k, re.compile(p), q) for k, p, q in _KORG],
    LANELEDGER: [(k, re.compile(p), q) for k, p, q in _LANELEDGER],
}
# Korg §8.5.2: what a subscription may name.
SUBSCRIBABLE = frozenset({"recent", "heads", "summary", "agent"})


class BadUri(ValueError):
    """``reason``: ``not_found`` (no such resource) or ``invalid_params``."""

    def __init__(self, message: str, reason: str = "not_found") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Target:
    scheme: str
    ledger: str
    kind: str
    ids: tuple[str, ...] = ()
    query: dict[str, str] = field(default_factory=dict)

    def integer(self, index: int = 0) -> int:
        return int(self.ids[index])


def parse(uri: str) -> Target:
    if len(uri) > MAX_URI:
        raise BadUri(f"URI longer than {MAX_URI} characters")
    parts = urlsplit(uri)
    catalog = _CATALOG.get(parts.scheme)
    if catalog is None or not parts.netloc:
        raise BadUri("not a korg:// or laneledger:// resource URI")
    ledger = unquote(parts.netloc)
    # Match on the raw path, then decode each part: an agent name's "/" may be
    # sent raw or as %2F (Korg §2b names hold one).
    path = parts.path.lstrip("/")
    for kind, pattern, allowed in catalog:
        found = pattern.fullmatch(path)
        if found is not None:
            return Target(
                parts.scheme,
                ledger,
                kind,
                tuple(unquote(g) for g in found.groups()),
                _query(parts.query, allowed),
            )
    raise BadUri(f"no resource at {parts.scheme}://{ledger}/{path[:200]}")


def _query(raw: str, allowed: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in parse_qsl(raw, keep_blank_values=True):
        if name not in allowed:
            raise BadUri(f"unknown query parameter {name!r}", "invalid_params")
        if name in out:
            raise BadUri(f"query parameter {name!r} given more than once", "invalid_params")
        if not 1 <= len(value) <= 256:
            raise BadUri(f"{name} must be 1 to 256 characters", "invalid_params")
        if name in ("cursor", "limit") and not value.isdigit():
            raise BadUri(f"{name} must be a non-negative integer", "invalid_params")
        out[name] = value
    return out
