"""Who may read what over HTTP: per-tenant bearer tokens.

Every read surface of the tail and checkpoint services is scoped by the
bearer token of the request (``spec/tail.md``, "Access"):

* a **tenant token** sees its own tenant only, whatever filters it passes;
* the **operator token** sees every tenant;
* with **no token configured at all** the service is *open*: every request
  sees everything, and the service says so loudly at start. It refuses to run
  open on an address other than loopback (``announce``).

Tokens come from files, never from the command line or the environment
(where ``ps`` and crash dumps show them): ``LANELEDGER_TOKENS_FILE`` holds one
``<tenant> <token>`` per line (or ``<tenant> sha256:<hex>``, the token's
SHA-256, so the file need not hold the secret itself), and
``LANELEDGER_OPERATOR_TOKEN_FILE`` the operator token. Only SHA-256 digests
are kept in memory, and a presented token is compared with every one of them
in constant time (``hmac.compare_digest``), so neither a match nor its
position leaks through timing.

A request presents its token as ``Authorization: Bearer <token>`` or, where
a browser cannot set headers (EventSource), as the ``access_token`` query
parameter on the routes that allow it.

The aiohttp middleware (``access_middleware``) puts the request's ``Scope``
in ``request[SCOPE]`` for every guarded path (all but the few that serve no
tenant data, ``guarded``); handlers narrow every query with it
(``scope_of(request)``).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import logging
import re
import sys
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware

from laneledger.contract.errors import EntityNotFound, InvalidRequest, TenantMismatch, Unauthorized
from laneledger.runtime.config import Setting

log = logging.getLogger("laneledger.runtime.access")

ACCESS_TOKEN_PARAMETER = "access_token"
PUBLIC_PATHS = frozenset({"/", "/healthz", "/readyz", "/metrics", "/api/v1/openapi.json"})
# The console's static files; the transparency log's tree heads, consistency
# proofs and witness cosignatures, which are for outsiders (spec/tlog.md,
# "Served by the tail") and hold no tenant's data.
PUBLIC_PREFIXES = ("/console/", "/api/v1/tlog/")
MIN_TOKEN_LENGTH = 16  # a configured token shorter than this is refused as guessable
_HASHED = re.compile(r"^sha256:([0-9a-f]{64})$")
_TENANT = re.compile(r"^\S{1,256}$")


@dataclass(frozen=True)
class Scope:
    """What one request may see: one tenant, or every tenant (``tenant``
    None: the operator token, or an open service)."""

    tenant: str | None
    operator: bool = False

    def allows(self, tenant: str | None) -> bool:
        return self.tenant is None or tenant == self.tenant

    def narrow(self, requested: str | None, parameter: str = "tenant") -> str | None:
        """The tenant a query must be limited to: the token's own, or the one
        the request names if the token sees every tenant. Naming another
        tenant is 403 ``tenant_mismatch``; the answer is the same whether that
        tenant exists or not, so it reveals nothing."""
        if self.tenant is None:
            return requested
        if requested is not None and requested != self.tenant:
            raise TenantMismatch(
                "this token does not grant that tenant", what="token", parameter=parameter, tenant=requested
            )
        return self.tenant

    def not_found_unless(self, tenant: str | None, kind: str, **ident: object) -> None:
        """Something of another tenant is 404, exactly as if it did not exist."""
        if not self.allows(tenant):
            raise EntityNotFound(f"no such {kind}", kind=kind, **ident)


OPEN = Scope(tenant=None)
SCOPE = web.RequestKey("laneledger_scope", Scope)  # request[SCOPE]: the request's Scope


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class AccessPolicy:
    """Token → scope; ``open`` when no token is configured."""

    def __init__(
        self, tenant_tokens: Iterable[tuple[str, bytes]] = (), operator_digest: bytes | None = None
    ) -> None:
        self._entries: list[tuple[bytes, Scope]] = [
            (digest, Scope(tenant)) for tenant, digest in tenant_tokens
        ]
        if operator_digest is not None:
            self._entries.append((operator_digest, Scope(None, operator=True)))
        digests = [digest for digest, _ in self._entries]
        if len(set(digests)) != len(digests):
            raise ValueError("the same token is configured twice")

    @classmethod
    def from_tokens(cls, tenants: dict[str, str] | None = None, operator: str | None = None) -> AccessPolicy:
        """From plain tokens (tenant → token), as a test or an embedding host has them."""
        return cls(
            [(tenant, _token_digest(tok, tenant)) for tenant, tok in (tenants or {}).items()],
            _token_digest(operator, "operator") if operator is not None else None,
        )

    @classmethod
    def from_files(
        cls, tokens_file: str | Path | None, operator_token_file: str | Path | None
    ) -> AccessPolicy:
        """Read the configured files; ``ValueError`` names the file and line."""
        tenants: list[tuple[str, bytes]] = []
        if tokens_file:
            tenants = parse_tokens(_read(tokens_file), str(tokens_file))
        operator = None
        if operator_token_file:
            operator = _token_digest(_read(operator_token_file).strip(), str(operator_token_file))
        return cls(tenants, operator)

    @property
    def open(self) -> bool:
        return not self._entries

    @property
    def has_operator(self) -> bool:
        return any(scope.operator for _, scope in self._entries)

    @property
    def tenants(self) -> list[str]:
        return sorted({s.tenant for _, s in self._entries if s.tenant is not None})

    def scope_of(self, token: str | None) -> Scope:
        if self.open:
            return OPEN
        if token is None:
            raise Unauthorized("a bearer token is required", reason="missing")
        presented = _digest(token)
        found: Scope | None = None
        for digest, scope in self._entries:  # every entry, always: constant time
            if hmac.compare_digest(digest, presented):
                found = scope
        if found is None:
            raise Unauthorized("the bearer token is not valid", reason="invalid")
        return found


def parse_tokens(text: str, source: str) -> list[tuple[str, bytes]]:
    """``<tenant> <token>`` or ``<tenant> sha256:<hex>`` per line; blank lines
    and ``#`` comments are skipped."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not _TENANT.match(parts[0]):
            raise ValueError(f"{source}:{number}: expected '<tenant> <token>'")
        entries.append((parts[0], _token_digest(parts[1], f"{source}:{number}")))
    return entries


def _token_digest(value: str, where: str) -> bytes:
    hashed = _HASHED.match(value)
    if hashed:
        return bytes.fromhex(hashed.group(1))
    if len(value) < MIN_TOKEN_LENGTH or any(c.isspace() for c in value):
        raise ValueError(f"{where}: a token is at least {MIN_TOKEN_LENGTH} characters, no spaces")
    return _digest(value)


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None


# -- service options ------------------------------------------------------------------


def access_settings() -> list[Setting]:
    """The options of every service with an HTTP read surface."""
    return [
        Setting(
            "--tokens-file",
            "TOKENS_FILE",
            None,
            help="file of '<tenant> <token>' (or '<tenant> sha256:<hex>') lines: per-tenant "
            "read tokens; with no token file at all reads are open (loopback only)",
        ),
        Setting(
            "--operator-token-file",
            "OPERATOR_TOKEN_FILE",
            None,
            help="file holding the operator token, which reads every tenant",
        ),
    ]


def policy_of(prog: str, args: argparse.Namespace, host: str) -> AccessPolicy:
    """The policy the parsed options name, announced; a file that does not
    parse, or an open service off loopback, stops the service (exit 2)."""
    try:
        policy = AccessPolicy.from_files(args.tokens_file, args.operator_token_file)
        announce(policy, prog, host)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return policy


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def announce(policy: AccessPolicy, service: str, host: str) -> None:
    """Log how reads are scoped; refuse (``ValueError``) to serve every
    tenant's data to anyone on a non-loopback address."""
    if not policy.open:
        log.info(
            "%s: reads scoped by bearer token (%d tenants%s)",
            service,
            len(policy.tenants),
            ", operator token set" if policy.has_operator else "",
        )
        return
    if not is_loopback(host):
        raise ValueError(
            f"no access token configured: {service} would serve every tenant's data to anyone "
            f"on {host}; set LANELEDGER_TOKENS_FILE and/or LANELEDGER_OPERATOR_TOKEN_FILE, "
            "or bind to loopback"
        )
    log.warning(
        "%s: NO ACCESS TOKENS CONFIGURED - every reader on %s sees every tenant "
        "(set LANELEDGER_TOKENS_FILE / LANELEDGER_OPERATOR_TOKEN_FILE)",
        service,
        host,
    )


# -- HTTP -------------------------------------------------------------------------------


def guarded(path: str) -> bool:
    """Whether a path needs a token: every one but those that serve no
    tenant's data (the probes, ``/metrics``, the API's own description, the
    console's page and static files, the transparency log's log-wide
    routes). Deny by default, so a route added later is guarded until
    someone decides otherwise."""
    return path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIXES)


def bearer_token(request: web.Request, query_allowed: bool) -> str | None:
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthorized("Authorization must be 'Bearer <token>'", reason="malformed")
        return value.strip()
    values = request.query.getall(ACCESS_TOKEN_PARAMETER, [])
    if not values:
        return None
    if not query_allowed:
        raise InvalidRequest(
            f"{ACCESS_TOKEN_PARAMETER} is only accepted where a header cannot "
            "be set (the live tail); send Authorization: Bearer",
            parameter=ACCESS_TOKEN_PARAMETER,
        )
    if len(values) > 1:
        raise InvalidRequest(
            f"query parameter {ACCESS_TOKEN_PARAMETER!r} given more than once",
            parameter=ACCESS_TOKEN_PARAMETER,
        )
    return values[0]


def access_middleware(
    policy: AccessPolicy,
    *,
    query_token_paths: Collection[str] = (),
    missing_token_hint: Callable[[str], str | None] = lambda _path: None,
) -> Middleware:
    """aiohttp middleware: ``request[SCOPE]`` for every guarded path. A
    missing or wrong token raises 401 ``unauthorized`` into the service's
    error handling, which must run outside this middleware;
    ``missing_token_hint(path)``: what a client that sent none should do
    instead (``details.hint``), where the service knows one."""

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if guarded(request.path):
            try:
                request[SCOPE] = policy.scope_of(bearer_token(request, request.path in query_token_paths))
            except Unauthorized as exc:
                hint = missing_token_hint(request.path) if exc.details.get("reason") == "missing" else None
                if hint is not None:
                    exc.details["hint"] = hint
                raise
        return await handler(request)

    return middleware


def scope_of(request: web.Request) -> Scope:
    """The request's scope. A route the middleware does not guard has none:
    reading it there is a bug (KeyError), never an open door."""
    return request[SCOPE]
