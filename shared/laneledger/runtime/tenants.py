"""The tenants file: who shares the ledger, and what each one may use.

One TOML file (``deploy/tenants.toml`` is the example) is the one place a
multi-tenant deployment declares its tenants and their limits.
``laneledger nats-config --tenants-file`` renders a NATS account per tenant
from it (with its ``max_connections`` and ``max_subscriptions``), and the
services read it (``--tenants-file`` /
``LANELEDGER_TENANTS_FILE``): the sequencer gives each tenant its own append
stream, bounded by ``append_backlog``, takes from it at ``append_rate``, and
bounds its blob buckets by ``blob_bytes`` and the bytes of its events kept in
the ledger by ``inline_bytes``, and erases content older than
``content_retention_days``; the checkpoint service bounds its artifact
bucket by ``artifact_bytes`` and its inline checkpoint state by
``checkpoint_state_bytes``. Normative text: spec/wire.md,
"Tenants and limits".

    [defaults]            # what every tenant gets unless its table says otherwise
    append_rate = 2000
    [tenants.acme]
    blob_bytes = "10GiB"
    [tenants.globex]

A key the file does not know, a size or rate that does not parse, or a bad
tenant name is a ``TenantsFileError`` naming the file and the key: a typo
must not silently leave a tenant unlimited.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from laneledger.contract.subjects import token

TENANT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|TiB)?\s*$")
_UNITS = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


class TenantsFileError(ValueError):
    """The tenants file is not what this module reads (see the module text)."""


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """What one tenant may use. The defaults suit a small shared deployment."""

    # Bytes of content-reference blobs (its blob buckets, each bounded by it).
    blob_bytes: int = 1 << 30
    # Bytes of checkpoint artifacts (its artifact bucket).
    artifact_bytes: int = 1 << 30
    # Bytes of its events the ledger keeps inline (each event's stored JSON:
    # inline payload values up to 1 KiB, content references for larger ones).
    inline_bytes: int = 4 << 30
    # Bytes of inline checkpoint state (RFC 8785) its kept revisions hold.
    checkpoint_state_bytes: int = 1 << 30
    # Work tokens a second the sequencer takes from the tenant's stream (a
    # request costs max(1, its events, its bytes / 1024): sequencer/intake.py);
    # faster requests wait there, up to the backlog.
    append_rate: float = 2000.0
    # Tokens taken at once after an idle spell (the token bucket's depth):
    # 125 ms of the default rate, a quarter of a batch's 1000 events, so one
    # tenant's burst cannot fill the batches every other tenant's requests
    # wait behind (spec/wire.md, "Tenants and limits").
    append_burst: int = 250
    # Requests, and their bytes, that may wait in the tenant's append stream:
    # JetStream refuses a publish beyond either (the SDK's ``QuotaExceeded``).
    append_backlog: int = 20_000
    append_backlog_bytes: int = 256 << 20
    # NATS connections the tenant's account may hold at once, and subscriptions
    # each of them may (rendered by nats-config; nats-server refuses one more).
    # A LedgerClient holds one connection and three subscriptions.
    max_connections: int = 100
    max_subscriptions: int = 10_000
    # Days an event's content is kept: the active sequencer erases the
    # content of older events once a day (spec/erasure.md, "Retention");
    # 0 keeps it for good.
    content_retention_days: int = 0
    # Retention only counts what it would erase (on /metrics and in the log).
    retention_dry_run: bool = False


_SIZES = ("blob_bytes", "artifact_bytes", "inline_bytes", "checkpoint_state_bytes", "append_backlog_bytes")
_COUNTS = ("append_burst", "append_backlog", "max_connections", "max_subscriptions")
_KEYS = {f.name for f in dataclasses.fields(TenantLimits)}


@dataclass(frozen=True)
class Tenants:
    """The declared tenants and their limits, by tenant name."""

    limits: dict[str, TenantLimits]
    defaults: TenantLimits = TenantLimits()

    def limits_of(self, tenant: str) -> TenantLimits:
        """A tenant's limits; an undeclared one's are the defaults (it has
        no append stream, but may still have buckets of its own)."""
        return self.limits.get(tenant, self.defaults)

    def limits_of_token(self, tenant_token: str) -> TenantLimits:
        """``limits_of`` for a tenant known by its subject token (the sequencer's view)."""
        found = self.by_token().get(tenant_token)
        return found[1] if found is not None else self.defaults

    @property
    def names(self) -> list[str]:
        return sorted(self.limits)

    def by_token(self) -> dict[str, tuple[str, TenantLimits]]:
        """``{subject token: (tenant, limits)}``: what the sequencer knows of
        an append's tenant is its subject token."""
        return {token(name): (name, limits) for name, limits in self.limits.items()}


def parse_tenants(text: str, source: str = "tenants file") -> Tenants:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TenantsFileError(f"{source}: not TOML: {exc}") from None
    unknown = set(data) - {"defaults", "tenants"}
    if unknown:
        raise TenantsFileError(f"{source}: unknown table or key {sorted(unknown)[0]!r} (defaults, tenants)")
    defaults = _limits(data.get("defaults", {}), TenantLimits(), f"{source}: [defaults]")
    tenants = data.get("tenants", {})
    if not isinstance(tenants, dict):
        raise TenantsFileError(f"{source}: 'tenants' must be a table of tables ([tenants.<name>])")
    limits = {}
    for name, table in tenants.items():
        if not TENANT_NAME.match(name):
            raise TenantsFileError(f"{source}: tenant {name!r}: letters, digits, '_' and '-', at most 64")
        limits[name] = _limits(table, defaults, f"{source}: [tenants.{name}]")
    if len({token(n) for n in limits}) != len(limits):
        raise TenantsFileError(f"{source}: two tenants share a subject token")
    return Tenants(limits, defaults)


def load_tenants(path: str) -> Tenants:
    """The tenants file at ``path`` (a service setting's parser)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TenantsFileError(f"{path}: {exc.strerror or exc}") from None
    return parse_tenants(text, path)


def _limits(table: Any, base: TenantLimits, where: str) -> TenantLimits:
    if not isinstance(table, dict):
        raise TenantsFileError(f"{where}: must be a table")
    unknown = set(table) - _KEYS
    if unknown:
        raise TenantsFileError(
            f"{where}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_KEYS))})"
        )
    changes: dict[str, Any] = {}
    for key, value in table.items():
        if key == "content_retention_days":
            if type(value) is not int or value < 0:
                raise TenantsFileError(f"{where} {key}: a whole number of days, 0 to keep content for good")
            changes[key] = value
        elif key == "retention_dry_run":
            if type(value) is not bool:
                raise TenantsFileError(f"{where} {key}: true or false")
            changes[key] = value
        elif key in _SIZES:
            changes[key] = _size(value, f"{where} {key}")
        elif key in _COUNTS:
            changes[key] = _positive(value, f"{where} {key}", int)
        else:
            changes[key] = float(_positive(value, f"{where} {key}", (int, float)))
    return dataclasses.replace(base, **changes)


def _size(value: Any, where: str) -> int:
    """Bytes: an integer, or a string such as "512MiB" (B, KiB, MiB, GiB, TiB)."""
    if isinstance(value, str) and (found := _SIZE.match(value)):
        value = int(found.group(1)) * _UNITS[found.group(2)]
    return int(_positive(value, where, int, 'bytes, or a size such as "512MiB"'))


def _positive(value: Any, where: str, kind: Any, what: str = "a number") -> Any:
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
        raise TenantsFileError(f"{where}: must be {what} greater than 0, not {value!r}")
    return value
