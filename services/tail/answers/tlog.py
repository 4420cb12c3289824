"""The JSON answers of the transparency log's routes (``handlers/transparency.py``);
its checkpoints and proofs are text (C2SP notes)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from . import Answer, Count

Base64Hash = Annotated[str, Meta(pattern="^[A-Za-z0-9+/]{43}=$")]


class TlogConsistency(Answer, kw_only=True):
    old_size: Count
    new_size: Count
    proof: list[Base64Hash]


class TlogCosigned(Answer, kw_only=True):
    size: Count
    witnesses: Annotated[list[str], Meta(min_length=1)]
    kept_newer: Annotated[
        list[str],
        Meta(
            description="those of witnesses whose posted cosignature is older than the one the tail "
            "holds for this size, which it keeps"
        ),
    ]


class BundleEvent(Answer, kw_only=True):
    index: Count
    event: Annotated[str, Meta(description="base64 of the committed bytes")]
    proof: list[Base64Hash]


class SessionBundle(Answer, kw_only=True):
    format: Literal["laneledger-session-bundle/v1"]
    tenant: str
    session_id: str
    checkpoint: Annotated[str, Meta(description="the signed checkpoint, verbatim")]
    events: list[BundleEvent]
