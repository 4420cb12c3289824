"""Append step 0, last part: every content blob an append references is committed.

Runs on the event loop before a batch goes to the writer thread (the lookups
are NATS I/O), once per batch: the distinct references of all its appends are
looked up concurrently, and references seen present are remembered (committed
blobs are immutable, only the sequencer writes their buckets, and it forgets
one it deletes after an erasure: ``erase``), so a hot blob costs one lookup. A tenant's blobs are looked up in
its committed bucket, then in the shared one (``BlobBuckets``); one found in
neither but in the tenant's uploads bucket is copied into the committed one,
its bytes checked against the reference (``BlobBuckets.commit_upload``, at
most ``COPIES_AT_ONCE`` at a time), before the append may commit. The
sequencer creates a tenant's two buckets when the tenant's producer first
sends it a command (``<prefix>.cmd.<tenant>.<op>``, see ``tenant_seen``):
producers may not create streams.

Copies are slow (up to ``MAX_BLOB_BYTES`` read and written), so they are
started before the batch, off its path: the intake asks ``warming`` of each
request it takes, and a request referencing blobs not known present waits,
with the later requests of its own stream, while the lookups and copies run
aside; other tenants' requests go on into batches. The batch's ``apply``
then finds the blobs present, or the reason they are not, remembered.

An append referencing a blob neither committed nor uploaded is refused
``blob_missing`` and never reaches the writer; so is one whose upload is not
the blob (``details.reason`` ``upload_mismatch``), and one over
``MAX_BLOB_BYTES`` is ``request_too_large``. When the store does not answer
the append is refused ``unavailable`` (retryable: the producer resends the
same append). An upload holding a secret-shaped value (the redaction rules
over the whole blob, ``contract/secretscan.py``) is erased from the uploads
bucket, never copied, and the append refused ``invalid_request``
(``details.reason`` ``blob_secret``, the ``rules``). Normative text:
``spec/content.md`` and ``spec/object-model.md``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Coroutine, Iterable
from typing import Any

import msgspec

from laneledger.contract.contentref import MAX_REFS_PER_APPEND, refs_in
from laneledger.contract.errors import (
    BlobMissing,
    IntegrityError,
    InvalidRequest,
    LedgerError,
    LedgerUnavailable,
    QuotaExceeded,
    RequestTooLarge,
    TransportError,
)
from laneledger.contract.model import Receipt
from laneledger.contract.redaction import DEFAULT_REDACTOR, Redactor
from laneledger.sdk.blobstore import BlobBuckets
from laneledger.store.append import PreparedAppend
from laneledger.store.batch import rejection

from .metrics import SequencerMetrics
from .prepworker import Ref, append_refs

log = logging.getLogger("laneledger.sequencer")
KNOWN_PRESENT_MAX = 100_000  # remembered (tenant token, ref, size) triples
# Uploads copied at once: each is read into memory (up to MAX_BLOB_BYTES).
COPIES_AT_ONCE = 4
# How long a blob found missing (or refused) ahead of its batch is taken as
# such by the batch: about as long as a request waits to go into one.
WARMED_FOR_S = 30.0

# What looking one blob up costs its tenant in rate tokens (intake.Work: an
# event costs one): a request naming a thousand unknown blobs costs a thousand.
TOKENS_PER_LOOKUP = 1

Need = tuple[str, str, int]  # (tenant token, ref, size_bytes)


class BlobCheck:
    def __init__(
        self, store: BlobBuckets, metrics: SequencerMetrics, redactor: Redactor = DEFAULT_REDACTOR
    ) -> None:
        self.store = store
        self._redactor = redactor  # an upload holding a secret is refused (commit_upload)
        self._metrics = metrics
        self._present: OrderedDict[Need, None] = OrderedDict()
        # Needs found not present ahead of their batch (``warming``): when, and why.
        self._absent: OrderedDict[Need, tuple[float, LedgerError | None]] = OrderedDict()
        self._buckets: set[str] = set()  # tenant tokens whose buckets are known to exist
        self._copies = asyncio.Semaphore(COPIES_AT_ONCE)

    async def tenant_seen(self, tenant_token: str) -> None:
        """Make sure the tenant has its blob buckets, before the command that
        named it is answered: its producer uploads into one and reads the
        other, and cannot create them. A failure is logged, not the
        command's: the next retries."""
        if tenant_token in self._buckets:
            return
        try:
            await self.store.ensure(tenant_token)
            await self.store.ensure_uploads(tenant_token)
        except LedgerError as exc:
            log.warning("could not create the blob buckets of tenant token %r: %s", tenant_token, exc)
            return
        self._buckets.add(tenant_token)

    def warming(self, tenant_token: str, request: bytes) -> Coroutine[Any, Any, int] | None:
        """What must run before this append request goes into a batch: the
        lookups and copies of the blobs it references that are not known
        present; None when there are none (or the request is not readable:
        the batch refuses it). Run by the intake, aside (the module text);
        returns its cost in the tenant's rate tokens: one per blob looked up."""
        try:
            body = msgspec.json.decode(request)
        except (msgspec.DecodeError, RecursionError):  # nested past any limit too: the batch refuses it
            return None
        events = body.get("events") if isinstance(body, dict) else None
        if not isinstance(events, list):
            return None
        try:
            named = [
                (ref, size, i)
                for i, event in enumerate(events)
                if isinstance(event, dict) and isinstance(payload := event.get("payload"), dict)
                for ref, size in refs_in(payload)
            ]
        except RecursionError:  # nested past any limit: the batch refuses it
            return None
        return self.warming_refs(tenant_token, named)

    def warming_refs(self, tenant_token: str, refs: list[Ref]) -> Coroutine[Any, Any, int] | None:
        """``warming`` of a request whose references are known already (its
        step 0 was done aside: offloop.py)."""
        if len(refs) > MAX_REFS_PER_APPEND:  # nothing looked up: the batch refuses it
            return None
        unknown = {(tenant_token, ref, size) for ref, size, _ in refs} - self._present.keys()
        return self._warm(unknown) if unknown else None

    async def _warm(self, unknown: set[Need]) -> int:
        failures = await self._look_up(unknown)
        now = time.monotonic()
        for need, failure in failures.items():
            self._absent[need] = (now, failure)
            self._absent.move_to_end(need)
        while len(self._absent) > KNOWN_PRESENT_MAX:
            self._absent.popitem(last=False)
        return len(unknown) * TOKENS_PER_LOOKUP

    async def apply(
        self,
        outcomes: list[Receipt | None],
        prepared: list[PreparedAppend],
        named: list[list[Ref] | None] | None = None,
    ) -> tuple[list[Receipt | None], list[PreparedAppend]]:
        """``(outcomes, prepared)`` with each append whose blobs are not all
        present turned from "the writer decides" (None) into its rejection.
        ``named``: per append, the references its step 0 found aside
        (offloop.py), None where they are to be found here (on the loop)."""
        aside = named or [None] * len(prepared)
        needs = [_needs(append, refs) for append, refs in zip(prepared, aside, strict=True)]
        unknown = {n for per in needs for n, _ in per if n not in self._present}
        if not unknown:
            for per in needs:
                for n, _ in per:
                    self._present.move_to_end(n)
            return outcomes, prepared
        # What was looked up ahead of the batch is not looked up again.
        failures: dict[Need, LedgerError | None] = {}
        recent = time.monotonic() - WARMED_FOR_S
        for need in list(unknown):
            found = self._absent.pop(need, None)
            if found is not None and found[0] >= recent:
                failures[need] = found[1]
                unknown.discard(need)
        if unknown:
            failures.update(await self._look_up(unknown))
        kept: list[PreparedAppend] = []
        decided = iter(zip(prepared, needs, strict=True))
        out: list[Receipt | None] = []
        for outcome in outcomes:
            if outcome is not None:
                out.append(outcome)
                continue
            append, per = next(decided)
            err = next((_refusal(append, n, i, failures[n]) for n, i in per if n in failures), None)
            if err is None:
                kept.append(append)
                out.append(None)
            else:
                out.append(rejection(err, append))
        return out, kept

    async def _look_up(self, unknown: set[Need]) -> dict[Need, LedgerError | None]:
        """Look ``unknown`` up, copying uploads of what is not committed;
        what is still not present: None when missing, else why (the
        store's error when it did not answer, the upload's when it is not
        the blob)."""
        failures: dict[Need, LedgerError | None] = {}
        uncommitted: list[Need] = []
        for tenant_token, refs in _by_tenant(unknown).items():
            try:
                missing = set(await self.store.missing(tenant_token, refs))
            except LedgerError as exc:
                log.warning("blob lookups for %d references failed: %s", len(refs), exc)
                self._metrics.blob_checks.labels("error").inc(len(refs))
                for ref, size in refs:
                    failures[(tenant_token, ref, size)] = exc
                continue
            self._metrics.blob_checks.labels("present").inc(len(refs) - len(missing))
            for ref, size in refs:
                need = (tenant_token, ref, size)
                if (ref, size) in missing:
                    uncommitted.append(need)
                else:
                    self._remember(need)
        uploaded = await self._uploaded(uncommitted, failures)
        await asyncio.gather(*(self._copy(need, failures) for need in uploaded))
        return failures

    async def _uploaded(self, needs: list[Need], failures: dict[Need, LedgerError | None]) -> list[Need]:
        """Those of ``needs`` their tenant may have uploaded (one concurrent
        round of lookups); the others noted missing in ``failures``."""
        found: list[Need] = []
        for tenant_token, refs in _by_tenant(needs).items():
            failure: LedgerError | None = None
            try:
                uploaded = set(await self.store.uploaded(tenant_token, refs))
            except LedgerError as exc:
                uploaded, failure = set(), exc
            for ref, size in refs:
                need = (tenant_token, ref, size)
                if (ref, size) in uploaded:
                    found.append(need)
                else:
                    failures[need] = failure
                    self._metrics.blob_checks.labels("missing" if failure is None else "error").inc()
        return found

    async def _copy(self, need: Need, failures: dict[Need, LedgerError | None]) -> None:
        """Commit the tenant's upload of the blob, remembered as present;
        else note in ``failures`` why not (None: there is no upload)."""
        tenant_token, ref, size = need
        async with self._copies:
            try:
                copied = await self.store.commit_upload(tenant_token, ref, size, redactor=self._redactor)
            except (IntegrityError, QuotaExceeded, InvalidRequest) as exc:
                # The upload is not the blob, holds a secret, or the tenant's
                # committed bucket is full: the producer's to fix, not the store's failure.
                self._metrics.blob_checks.labels("refused").inc()
                failures[need] = exc
                return
            except LedgerError as exc:
                log.warning("copying the upload of %s failed: %s", ref, exc)
                self._metrics.blob_checks.labels("error").inc()
                failures[need] = exc
                return
        self._metrics.blob_checks.labels("copied" if copied else "missing").inc()
        if copied:
            self._remember(need)
        else:
            failures[need] = None

    async def erase(self, tenant_token: str, hexes: list[str]) -> list[str]:
        """Erase these blobs of the tenant, which an erasure left referenced
        by no event that is not erased (spec/erasure.md, "Blobs"), from its
        buckets; forgotten as present first, so an append naming one again
        finds it missing. The refs that were there."""
        refs = [f"sha256:{sha}" for sha in hexes]
        gone = set(refs)
        for need in [n for n in self._present if n[0] == tenant_token and n[1] in gone]:
            del self._present[need]
        return await self.store.erase(tenant_token, refs)

    def _remember(self, need: Need) -> None:
        self._present[need] = None
        if len(self._present) > KNOWN_PRESENT_MAX:
            self._present.popitem(last=False)


def _by_tenant(needs: Iterable[Need]) -> dict[str, list[tuple[str, int]]]:
    by_tenant: dict[str, list[tuple[str, int]]] = {}
    for tenant_token, ref, size in needs:
        by_tenant.setdefault(tenant_token, []).append((ref, size))
    return by_tenant


def _needs(append: PreparedAppend, named: list[Ref] | None) -> list[tuple[Need, int]]:
    """The blobs one append references, with the index of the event naming
    each: ``named``, or else found in its events (``append_refs``)."""
    tenant_token = append.tenant_token
    if tenant_token is None:
        return []
    refs = append_refs(append) if named is None else named
    return [((tenant_token, ref, size), i) for ref, size, i in refs]


def _refusal(append: PreparedAppend, need: Need, index: int, failure: LedgerError | None) -> LedgerError:
    _, ref, size = need
    path = f"$.events[{index}].payload"
    names = {"event_id": append.sent[index].get("id"), "ref": ref, "size_bytes": size, "path": path}
    if failure is None:
        return BlobMissing(
            "the event references a blob its tenant has not stored: store the blob first, then resend",
            **names,
        )
    if isinstance(failure, IntegrityError) and failure.details.get("kind") == "blob_too_large":
        return RequestTooLarge(
            "the event references a blob larger than the ledger takes: keep the value smaller",
            **names,
            limit_bytes=failure.details.get("limit_bytes"),
        )
    if isinstance(failure, IntegrityError) and failure.details.get("kind") == "upload_mismatch":
        return BlobMissing(
            f"the tenant's upload of the blob is not the blob ({failure.message}): "
            "store the blob again, then resend",
            **names,
            reason="upload_mismatch",
        )
    if isinstance(failure, InvalidRequest):  # a secret: the upload is erased
        return InvalidRequest(
            f"{failure.message}, so the event is not committed",
            **names,
            reason=failure.details.get("reason"),
            rules=failure.details.get("rules"),
        )
    if isinstance(failure, QuotaExceeded):
        return QuotaExceeded(
            f"{failure.message}: the blob cannot be kept, so the event is not committed",
            **names,
            limit=failure.details.get("limit"),
            bucket=failure.details.get("bucket"),
        )
    if isinstance(failure, TransportError):
        return failure
    return LedgerUnavailable(f"the blob store did not answer: {failure}", ref=ref)
