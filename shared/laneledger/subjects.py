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
from dataclasses import dataclass
from functools import lru_cache

_VERBATIM = re.compile(r"^[A-Za-z0-9-]{1,64}$")

DEFAULT_PREFIX = "ledger"
# The header of an append request that names the producer's receipt inbox
# (the NATS reply subject is taken by JetStream's PubAck).
REPLY_HEADER = "Ledger-Reply-To"
APPEND_STREAM = "LEDGER_APPEND"  # the streams of the default prefix
EVENTS_STREAM = "LEDGER_EVENTS"


def _stream_stem(prefix: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", prefix).upper()


@lru_cache(maxsize=65536)
def token(value: str) -> str:
    if _VERBATIM.match(value):
        return value
    return "_" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


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

    @property
    def append_wildcard(self) -> str:
        return f"{self.prefix}.append.>"

    @property
    def events_wildcard(self) -> str:
        return f"{self.prefix}.events.>"

    def append(self, tenant: str, lane_id: str) -> str:
        """Inbound append requests for one lane."""
        return f"{self.prefix}.append.{token(tenant)}.{token(lane_id)}"

    def events(self, tenant: str, session_id: str, run_id: str, lane_id: str) -> str:
        """Committed events of one lane: tenant, session, run and lane tokens
        so consumers can filter with NATS subject wildcards."""
        return (
            f"{self.prefix}.events.{token(tenant)}.{token(session_id)}"
            f".{token(run_id)}.{token(lane_id)}"
        )

    def events_filter(
        self,
        tenant: str | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        lane_id: str | None = None,
    ) -> str:
        parts = [
            "*" if value is None else token(value)
            for value in (tenant, session_id, run_id, lane_id)
        ]
        return f"{self.prefix}.events." + ".".join(parts)

    # -- request/reply services -----------------------------------------------
    def command(self, op: str) -> str:
        """Structure writes and reads served by the sequencer."""
        return f"{self.prefix}.cmd.{op}"

    @property
    def command_wildcard(self) -> str:
        return f"{self.prefix}.cmd.*"

    def checkpoint(self, op: str) -> str:
        return f"{self.prefix}.checkpoint.{op}"

    @property
    def checkpoint_wildcard(self) -> str:
        return f"{self.prefix}.checkpoint.*"
