"""NATS subjects and stream names (normative text: ``spec/wire.md``).

Host-supplied ids (tenant, session, run) can hold any characters, but a NATS
subject token must not contain ``.``, ``*``, ``>`` or whitespace. ``token()``
maps an id to a safe token: ids made only of ``[A-Za-z0-9-]`` (at most 64)
stay verbatim; anything else becomes ``_`` + the first 32 hex digits of the
SHA-256 of its UTF-8 bytes. Verbatim tokens never contain ``_``, so the two
forms cannot collide. The mapping is one-way: message bodies carry the real
ids; tokens exist for routing and subject filters.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, unquote

from laneledger.contract.errors import InvalidRequest

_VERBATIM = re.compile(r"^[A-Za-z0-9-]{1,64}$")

DEFAULT_PREFIX = "ledger"
# The header of an append request that names the producer's receipt inbox
# (the NATS reply subject is taken by JetStream's PubAck).
REPLY_HEADER = "Ledger-Reply-To"
# The tenant of a tenant-scoped request (``<prefix>.cmd.<tenant>.<op>``) when
# its subject token is a hash (``token``): percent-encoded UTF-8.
TENANT_HEADER = "Ledger-Tenant"
APPEND_STREAM = "LEDGER_APPEND"  # the streams of the default prefix
EVENTS_STREAM = "LEDGER_EVENTS"


def _stream_stem(prefix: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", prefix).upper()


@lru_cache(maxsize=65536)
def token(value: str) -> str:
    if _VERBATIM.match(value):
        return value
    return "_" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _request_subject(base: str, op: str, tenant: str | None) -> str:
    """``<base>.<op>``, or ``<base>.<token(tenant)>.<op>`` scoped to a tenant."""
    return f"{base}.{op}" if tenant is None else f"{base}.{token(tenant)}.{op}"


# The inbox prefix of the trusted users (nats-py's default): the services and
# the shared producer, which act for every tenant.
TRUSTED_INBOX_PREFIX = "_INBOX"
MAX_REPLY_SUBJECT = 512  # far above an inbox's length (``_INBOX_<token>.<nuid>.<n>``)
_SUBJECT_TOKEN = re.compile(r"[^\s.*>]+")


# Where nats-server has a request that came through an account import
# answered: it replaces the requester's reply subject with one of its own
# under this prefix and maps the answer back (a tenant's producer, in its own
# account: ``laneledger.runtime.natsconfig``).
IMPORT_REPLY_PREFIX = "_R_"


def reply_refusal(
    reply: str, tenant_token: str | None, *, request_reply: bool = False, trusted_inbox: bool = True
) -> str | None:
    """Why a requester may not have its answer sent to ``reply``, or None.

    A requester names where its receipts and replies go (``Ledger-Reply-To``,
    a request's reply subject), and the service publishes there: anything
    but the requester's own reply space would let it aim the service at
    subjects it may not publish itself (the committed stream, ``$JS.API``,
    another tenant's inbox). Allowed: a plain subject (no wildcard, no
    whitespace, no empty token) under the trusted users' ``_INBOX.`` or,
    for a request on a tenant's subjects (``tenant_token``), under that
    tenant's ``_INBOX_<token>.``; and for a request's own reply subject
    (``request_reply``, not ``Ledger-Reply-To``) under ``_R_.``, which only
    the server sets, for a request from another account. ``trusted_inbox``
    False (a deployment with a tenants file, where each tenant has a NATS
    account of its own): a request on a tenant's subjects is answered in
    that tenant's inbox only, never ``_INBOX.``, the trusted users' space,
    which a tenant's ``Ledger-Reply-To`` could otherwise aim at."""
    prefixes = [TRUSTED_INBOX_PREFIX + "."] if trusted_inbox or tenant_token is None else []
    if tenant_token is not None:
        prefixes.append(f"_INBOX_{tenant_token}.")
    if request_reply:
        prefixes.append(IMPORT_REPLY_PREFIX + ".")
    if len(reply) > MAX_REPLY_SUBJECT:
        return f"longer than {MAX_REPLY_SUBJECT} characters"
    if not all(_SUBJECT_TOKEN.fullmatch(part) for part in reply.split(".")):
        return "not a plain subject (an empty token, a wildcard or whitespace)"
    if not reply.startswith(tuple(prefixes)):
        return "outside the requester's inbox (" + " or ".join(f"{p}>" for p in prefixes) + ")"
    return None


def inbox_prefix(tenant: str) -> str:
    """The reply inbox prefix of a tenant's producers (``_INBOX_<token>``):
    deploy/nats.conf lets a tenant's producer user subscribe to it alone, so
    no tenant reads another's receipts (``laneledger.runtime.natsconfig``)."""
    return f"_INBOX_{token(tenant)}"


# Where a tenant's producer, in its own NATS account, reaches the ledger
# account's JetStream API: nats-config imports the calls it may make on its
# own buckets under this prefix (``$JS.API.<call>`` in its own account would
# be its own account's JetStream, which it has none of). Through an import
# the server chooses where an answer goes, not the requester.
TENANT_JS_API_PREFIX = "JS.LEDGER.API"


def tenant_bucket(bucket: str, tenant: str) -> str:
    """A tenant's own object store bucket (``LEDGER_CHECKPOINT_ARTIFACTS_acme``):
    an object store's subjects (``$O.<bucket>.…``) do not carry the tenant,
    so only separate buckets let NATS permissions keep tenants apart."""
    return token_bucket(bucket, token(tenant))


def token_bucket(bucket: str, tenant_token: str) -> str:
    """``tenant_bucket`` for a tenant known by its subject token (what the
    sequencer knows of an append's tenant)."""
    return f"{bucket}_{tenant_token}"


def tenant_headers(tenant: str | None) -> dict[str, str] | None:
    """The headers a request scoped to ``tenant`` carries: none when the
    subject's token is the tenant itself, else its name (``TENANT_HEADER``)."""
    if tenant is None or token(tenant) == tenant:
        return None
    return {TENANT_HEADER: quote(tenant, safe="")}


@dataclass(frozen=True, slots=True)
class RequestSubject:
    """A request to the sequencer or checkpoint service, as its subject names
    it: ``<base>.<op>`` for any tenant (trusted users), or
    ``<base>.<tenant>.<op>`` for that tenant only (``tenant`` is the real
    id: the token itself, or the ``TENANT_HEADER`` that hashes to it)."""

    op: str
    tenant: str | None

    @staticmethod
    def scope_token(subject: str, base: str) -> str | None:
        """The tenant token of ``<base>.<tenant>.<op>`` (None for any other
        shape): which tenant's subjects the request came on, whether or not
        the rest of it parses. NATS permissions tie it to the publisher, so
        it says whose inbox the reply may go to (``reply_refusal``)."""
        parts = subject[len(base) + 1 :].split(".") if subject.startswith(base + ".") else []
        return parts[0] if len(parts) == 2 else None

    @classmethod
    def parse(cls, subject: str, base: str, headers: Mapping[str, str] | None) -> RequestSubject:
        parts = subject[len(base) + 1 :].split(".") if subject.startswith(base + ".") else []
        if len(parts) == 1:
            return cls(op=parts[0], tenant=None)
        if len(parts) != 2:
            raise InvalidRequest(f"a request subject is {base}.<op> or {base}.<tenant>.<op>", subject=subject)
        scoped, op = parts
        named = (headers or {}).get(TENANT_HEADER)
        try:
            tenant = scoped if named is None else unquote(named, errors="strict")
        except UnicodeDecodeError:
            raise InvalidRequest(
                f"the {TENANT_HEADER} header is not percent-encoded UTF-8",
                subject=subject,
                header=TENANT_HEADER,
            ) from None
        if token(tenant) != scoped:
            raise InvalidRequest(
                f"the subject's tenant token {scoped!r} is not the token of the tenant "
                f"{'the ' + TENANT_HEADER + ' header names' if named is not None else 'it names'}"
                f" (a hashed token needs the {TENANT_HEADER} header)",
                subject=subject,
                header=TENANT_HEADER,
            )
        return cls(op=op, tenant=tenant)


@dataclass(frozen=True, slots=True)
class AppendSubject:
    """An append request's subject (``Subjects.append``) read back: the
    tenant and lane tokens. Tokens only: ``token()`` is one-way, the request
    body carries the real ids."""

    tenant_token: str
    lane_token: str


@dataclass(frozen=True, slots=True)
class Subjects:
    """Every subject laneledger uses, under one configurable prefix so several
    ledgers can share a NATS account."""

    prefix: str = DEFAULT_PREFIX

    # -- streams ---------------------------------------------------------------
    # Stream names follow the prefix too ("ledger" -> LEDGER_APPEND and
    # LEDGER_EVENTS), so two ledgers on one account never share a stream.
    @property
    def append_stream(self) -> str:
        return f"{_stream_stem(self.prefix)}_APPEND"

    @property
    def events_stream(self) -> str:
        return f"{_stream_stem(self.prefix)}_EVENTS"

    # The writer's transaction log (spec/replication.md): one subject, which
    # only the sequencer may publish on.
    @property
    def txlog_stream(self) -> str:
        return f"{_stream_stem(self.prefix)}_TXLOG"

    @property
    def txlog(self) -> str:
        return f"{self.prefix}.txlog"

    # What erasure leaves of the copies it removed from LEDGER_EVENTS and
    # LEDGER_TXLOG (spec/erasure.md, "The streams"): an erased event's erased
    # form, by position, and a log record rewritten without the erased
    # content, by the log sequence of its last part. Only the sequencer
    # publishes here.
    @property
    def erased_stream(self) -> str:
        return f"{_stream_stem(self.prefix)}_ERASED"

    @property
    def erased_wildcard(self) -> str:
        return f"{self.prefix}.erased.>"

    def erased_event(self, position: int) -> str:
        return f"{self.prefix}.erased.event.{position}"

    def erased_record(self, txlog_seq: int, part: int | str) -> str:
        """A rewrite's part ``part`` (``"*"``: every part, a filter)."""
        return f"{self.prefix}.erased.txlog.{txlog_seq}.{part}"

    # The transparency log's signed tree heads (spec/tlog.md): one subject,
    # which only the sequencer may publish on; message data is the signed
    # note, Nats-Msg-Id ``tree-<size>``.
    @property
    def tlog_stream(self) -> str:
        return f"{_stream_stem(self.prefix)}_TLOG"

    @property
    def tlog_checkpoint(self) -> str:
        return f"{self.prefix}.tlog.checkpoint"

    # A request for a checkpoint now (trusted users only), answered by the
    # active sequencer with the signed note.
    @property
    def tlog_sign(self) -> str:
        return f"{self.prefix}.tlog.sign"

    # The KV bucket of the lease that picks the active sequencer.
    @property
    def lease_bucket(self) -> str:
        return f"{_stream_stem(self.prefix)}_LEASE"

    @property
    def append_wildcard(self) -> str:
        return f"{self.prefix}.append.>"

    # With a tenants file each declared tenant has its own append stream
    # (its backlog bounded on its own, read fairly: spec/wire.md, "Tenants
    # and limits") instead of the one above; streams may not overlap.
    def tenant_append_stream(self, tenant_token: str) -> str:
        return token_bucket(self.append_stream, tenant_token)

    def tenant_append_wildcard(self, tenant_token: str) -> str:
        return f"{self.prefix}.append.{tenant_token}.>"

    def retired_append(self, stream: str) -> str:
        """Where an append stream no longer wanted (a tenant dropped from the
        tenants file, or the shared one when a file comes) is moved while the
        sequencer commits what it still holds: a subject nobody publishes on,
        so nothing new lands there."""
        return f"{self.prefix}.retired-append.{stream}"

    @property
    def events_wildcard(self) -> str:
        return f"{self.prefix}.events.>"

    def append(self, tenant: str, lane_id: str) -> str:
        """Inbound append requests for one lane."""
        return f"{self.prefix}.append.{token(tenant)}.{token(lane_id)}"

    def parse_append(self, subject: str) -> AppendSubject:
        """The tokens of an ``append`` subject; anything else is an
        ``InvalidRequest`` naming the subject."""
        base = f"{self.prefix}.append."
        tokens = subject[len(base) :].split(".") if subject.startswith(base) else []
        if len(tokens) != 2:
            raise InvalidRequest("not an append subject", subject=subject)
        return AppendSubject(tenant_token=tokens[0], lane_token=tokens[1])

    def events(self, tenant: str, session_id: str, run_id: str, lane_id: str) -> str:
        """Committed events of one lane: tenant, session, run and lane tokens
        so consumers can filter with NATS subject wildcards."""
        return f"{self.prefix}.events.{token(tenant)}.{token(session_id)}.{token(run_id)}.{token(lane_id)}"

    def events_filter(
        self,
        tenant: str | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        lane_id: str | None = None,
    ) -> str:
        parts = ["*" if value is None else token(value) for value in (tenant, session_id, run_id, lane_id)]
        return f"{self.prefix}.events." + ".".join(parts)

    # -- request/reply services -----------------------------------------------
    # ``<base>.<op>`` is answered for any tenant (the shared producer user,
    # the services); ``<base>.<tenant>.<op>`` only for that tenant, and a
    # tenant's producer user may publish nothing else (spec/wire.md).
    @property
    def command_base(self) -> str:
        return f"{self.prefix}.cmd"

    def command(self, op: str, tenant: str | None = None) -> str:
        """Structure writes and reads served by the sequencer."""
        return _request_subject(self.command_base, op, tenant)

    @property
    def command_wildcard(self) -> str:
        return f"{self.prefix}.cmd.>"

    @property
    def checkpoint_base(self) -> str:
        return f"{self.prefix}.checkpoint"

    def checkpoint(self, op: str, tenant: str | None = None) -> str:
        return _request_subject(self.checkpoint_base, op, tenant)

    @property
    def checkpoint_wildcard(self) -> str:
        return f"{self.prefix}.checkpoint.>"
