"""Korg's dogfood checklist (agent event spec §6) and causal rules (§2, §2a,
§2b) as test helpers, over a journal's records as JSON objects: flat
korg-ledger-v1 records (``laneledger export``) or §1.2.2 envelopes
(``GET /api/journal``, the call in ``event``, the parent in
``metadata.triggered_by``).

Written from Korg's spec, not from laneledger's code, so an export or a
journal is judged by what Korg says. ``dogfood`` also runs Korg's reference
verification (korg-ledger-v1 SPEC §5, as its JavaScript verifier does it:
the chain in journal order and the DAG, with no other rule), so a journal
that only laneledger's verifier would refuse is told apart.

Each check raises ``AssertionError`` naming the check and the ``seq_id``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GENESIS = "0" * 64
PREFIXES = ("agent:", "human:", "korg:", "mcp:", "import:")  # §1.1 (import: since revision 1.1)
PATH_KEYS = ("file_path", "path", "filepath")
INLINE_LIMIT = 1024  # §6.3 / §7.3
MAX_HOPS = 200  # §6.1
# Records that are neither on a spine nor a tool call hanging off one (§2a).
OFF_SPINE = frozenset({"user_prompt", "session_complete", "rewind"})


@dataclass(frozen=True)
class Call:
    """One record, as the checks read it."""

    seq: int
    parent: Any  # triggered_by: an int, or None/absent for a root
    tool: Any
    agent: Any
    args: Any
    result: Any
    refs: Any
    schema_version: Any


def calls_of(records: Sequence[Mapping[str, Any]]) -> list[Call]:
    out = []
    for r in records:
        event = r.get("event")
        if isinstance(event, dict):  # a §1.2.2 envelope
            meta = r.get("metadata") or {}
            source, parent, refs = event, meta.get("triggered_by"), event.get("payload_refs")
        else:
            source, parent, refs = r, r.get("triggered_by"), r.get("payload_refs")
        out.append(
            Call(
                seq=r["seq_id"],
                parent=parent,
                tool=source.get("tool_name"),
                agent=source.get("source_agent"),
                args=source.get("args"),
                result=source.get("result"),
                refs=refs,
                schema_version=r.get("schema_version"),
            )
        )
    return out


def korg_preimage(record: Mapping[str, Any]) -> bytes:
    """What Korg hashes and signs: the record minus ``entry_hash`` and
    ``event_sig``, ``json.dumps(sort_keys, compact)``, ASCII."""
    body = {k: v for k, v in record.items() if k not in ("entry_hash", "event_sig")}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("ascii")


def korg_hash(record: Mapping[str, Any], key: bytes | None = None) -> str:
    """A record's ``entry_hash`` as Korg computes it (SHA-256, or HMAC-SHA256 keyed)."""
    data = korg_preimage(record)
    return hmac.new(key, data, hashlib.sha256).hexdigest() if key else hashlib.sha256(data).hexdigest()


def korg_reference_verify(records: Sequence[Mapping[str, Any]], key: bytes | None = None) -> list[str]:
    """Korg's reference verification, ``korg_ledger._hash`` ``verify_chain``
    then ``verify_dag`` (SPEC §5) transcribed: the errors, in Korg's order
    (``[]`` = valid). The chain runs in journal order; seq_ids need only be
    unique integers (no order, no density); an integer ``triggered_by`` must
    be one of them and smaller. The parent is read as ``calls_of`` reads it
    (top level, or ``metadata.triggered_by`` of an envelope, SPEC §9.3)."""
    errors: list[str] = []
    expected: str | None = GENESIS
    for r in records:
        seq, stored = r.get("seq_id"), r.get("entry_hash")
        if stored is None:
            errors.append(f"seq {seq}: missing entry_hash")
            expected = None
            continue
        if r.get("prev_hash") != expected:
            errors.append(f"seq {seq}: prev_hash breaks the chain")
        if korg_hash(r, key) != stored:
            errors.append(f"seq {seq}: entry_hash mismatch")
        expected = stored
    calls = calls_of(records)
    seqs = [c.seq for c in calls if isinstance(c.seq, int)]
    if len(set(seqs)) != len(seqs):
        errors.append("duplicate seq_id present")
    for c in calls:
        if type(c.parent) is not int:
            continue
        if c.parent not in seqs:
            errors.append(f"seq {c.seq}: triggered_by {c.parent} does not exist")
        elif isinstance(c.seq, int) and c.parent >= c.seq:
            errors.append(f"seq {c.seq}: triggered_by {c.parent} is not strictly earlier")
    return errors


def dogfood(
    records: Sequence[Mapping[str, Any]],
    blobs: Mapping[str, bytes | None],
    *,
    key: bytes | None = None,
) -> Call:
    """Korg §6 on one session's journal; returns its root. ``blobs``: sha256
    -> the bytes the blob store holds for it (None: absent)."""
    assert records, "an empty journal"
    assert korg_reference_verify(records, key) == [], korg_reference_verify(records, key)
    calls = calls_of(records)
    by_seq = {c.seq: c for c in calls}
    # §2: exactly one root, a user_prompt.
    roots = [c for c in calls if c.parent is None]
    assert len(roots) == 1, f"§2: {len(roots)} roots: seqs {[c.seq for c in roots]}"
    root = roots[0]
    assert root.tool == "user_prompt", f"§2: the root (seq {root.seq}) is a {root.tool!r}, not a user_prompt"
    children: dict[int, list[int]] = {}
    for c in calls:
        # §6.5
        assert c.schema_version == "1.0", f"§6.5: seq {c.seq}: schema_version {c.schema_version!r}"
        assert isinstance(c.agent, str) and c.agent.startswith(PREFIXES), f"§6.5: seq {c.seq}: {c.agent!r}"
        if c.parent is None:
            continue
        # §6.1: every pointer resolves to an earlier record (no dead pointers).
        assert type(c.parent) is int and c.parent in by_seq, f"§6.1: seq {c.seq}: dead pointer {c.parent!r}"
        assert c.parent < c.seq, f"§6.1: seq {c.seq}: triggered_by {c.parent} is not earlier"
        children.setdefault(c.parent, []).append(c.seq)
    # §6.1: leaf -> root within MAX_HOPS, from every record.
    for c in calls:
        hops, at = 0, c
        while at.parent is not None:
            at, hops = by_seq[at.parent], hops + 1
            assert hops <= MAX_HOPS, f"§6.1: seq {c.seq} is more than {MAX_HOPS} hops from a root"
        assert at is root, f"§6.1: seq {c.seq} walks back to seq {at.seq}, not the root"
    # §6.2 (and §7.6): the forward walk from the root reaches every record.
    seen, todo = {root.seq}, [root.seq]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    assert len(seen) >= 2, "§6.2: the root has no descendant"
    assert seen == set(by_seq), f"§6.2: not reached from the root: {sorted(set(by_seq) - seen)}"
    for c in calls:
        _check_inline(c)
        _check_blobs(c, blobs)
    return root


def _check_inline(c: Call) -> None:
    """§6.3: paths verbatim, and no args/result field value over 1 KiB inline."""
    for part, value in (("args", c.args), ("result", c.result)):
        fields = value.items() if isinstance(value, dict) else [("", value)]
        for name, item in fields:
            if name in PATH_KEYS:
                assert isinstance(item, str), f"§6.3: seq {c.seq}: {part}.{name} is not a verbatim path"
                continue
            size = len(_korg_bytes(item))
            assert size <= INLINE_LIMIT, f"§6.3: seq {c.seq}: {part}.{name} is {size} bytes inline"


def _check_blobs(c: Call, blobs: Mapping[str, bytes | None]) -> None:
    """§6.4: every payload_refs[].sha256 is a stored blob that hashes to it;
    and every content reference in args/result is described there."""
    assert isinstance(c.refs, list), f"§6.4: seq {c.seq}: payload_refs is {c.refs!r}"
    described = set()
    for d in c.refs:
        sha256 = d["sha256"]
        data = blobs.get(sha256)
        assert data is not None, f"§6.4: seq {c.seq}: blob {sha256} missing"
        assert hashlib.sha256(data).hexdigest() == sha256, (
            f"§6.4: seq {c.seq}: blob {sha256} does not hash to it"
        )
        assert len(data) == d["size_bytes"], f"§6.4: seq {c.seq}: blob {sha256} is not size_bytes long"
        described.add(sha256)
    for sentinel in sentinels([c.args, c.result]):
        sha256 = sentinel["_ref"].removeprefix("sha256:")
        assert sha256 in described, f"§6.4: seq {c.seq}: content ref {sha256} not in payload_refs"


def sentinels(value: Any) -> list[dict[str, Any]]:
    """Every content-ref sentinel (§7.3) in ``value``."""
    if isinstance(value, dict):
        if set(value) == {"_ref", "size_bytes"}:
            return [value]
        return [s for item in value.values() for s in sentinels(item)]
    if isinstance(value, list):
        return [s for item in value for s in sentinels(item)]
    return []


def blob_refs(records: Sequence[Mapping[str, Any]]) -> set[str]:
    """The sha256 of every payload_refs descriptor: what ``dogfood`` will ask ``blobs`` for."""
    return {d["sha256"] for c in calls_of(records) if isinstance(c.refs, list) for d in c.refs}


def _korg_bytes(value: Any) -> bytes:
    # §7.2: a string is its UTF-8, a structured value its compact sorted JSON.
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")


def check_spines(records: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """§2a within each agent and §2b across them; returns each agent's
    llm_inference seqs (its spine). Within an agent, the first inference is
    triggered by a user_prompt (the root, or the sub-agent's own prompt) and
    every later one by the previous inference; a tool call hangs off an
    inference of its agent. A sub-agent (``…/sub-…``) begins with a
    user_prompt triggered by an inference of another agent, its spawner,
    under which the parent's ``Agent``/``Task`` call hangs too (the diamond)."""
    calls = calls_of(records)
    by_seq = {c.seq: c for c in calls}
    spines: dict[str, list[int]] = {}
    for c in calls:
        parent = by_seq.get(c.parent) if c.parent is not None else None
        if c.tool == "llm_inference":
            spine = spines.setdefault(c.agent, [])
            assert parent is not None, f"§2a: seq {c.seq}: an inference without a cause"
            if spine:
                assert c.parent == spine[-1], (
                    f"§2a: seq {c.seq}: triggered_by {c.parent}, not the previous inference {spine[-1]}"
                )
            else:
                assert parent.tool == "user_prompt", (
                    f"§2a: seq {c.seq}: the first inference hangs off {parent.tool}"
                )
            spine.append(c.seq)
        elif c.tool not in OFF_SPINE and parent is not None:
            assert parent.tool == "llm_inference" and parent.agent == c.agent, (
                f"§2a: seq {c.seq} ({c.tool}) hangs off seq {parent.seq} ({parent.tool}, {parent.agent})"
            )
    for agent in {c.agent for c in calls if isinstance(c.agent, str) and "/sub-" in c.agent}:
        first = next(c for c in calls if c.agent == agent)
        spawner = by_seq.get(first.parent) if first.parent is not None else None
        assert first.tool == "user_prompt", f"§2b: {agent} begins with a {first.tool}"
        assert spawner is not None and spawner.tool == "llm_inference" and spawner.agent != agent, (
            f"§2b: {agent}'s prompt (seq {first.seq}) is not caused by another agent's inference"
        )
        spawns = [
            c
            for c in calls
            if c.parent == spawner.seq and c.agent == spawner.agent and c.tool in ("Agent", "Task")
        ]
        assert spawns, f"§2b: no Agent/Task call under seq {spawner.seq}, {agent}'s spawner"
    return spines
