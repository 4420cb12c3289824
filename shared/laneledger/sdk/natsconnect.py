"""Where NATS is, and how every laneledger process connects to it.

The NATS setting — ``--nats`` / ``LANELEDGER_NATS_URL`` of every service and
CLI command, ``LedgerClient.connect(url)`` of the SDK — is one URL or several,
comma-separated: the nodes of a cluster (``nats://a:4222,nats://b:4222``).
nats-py tries them in random order until one answers, so a process starting
while one node is down still connects; once connected it also learns the
cluster's other nodes and fails over to them.

:func:`nats_servers` parses the setting (the one place that does);
:func:`connect_nats` connects with the options every service shares.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from nats.aio.client import Client as NATS

__all__ = ["DEFAULT_NATS", "checked_nats", "connect_nats", "nats_servers"]

DEFAULT_NATS = "nats://127.0.0.1:4222"
SCHEMES = ("nats", "tls")
RECONNECT_WAIT_S = 0.5  # between two tries of the same server

log = logging.getLogger("laneledger.nats")


def nats_servers(setting: str | Sequence[str]) -> list[str]:
    """The server URLs of a NATS setting: a comma-separated string or a list.
    Raises ``ValueError`` naming the first entry that is not a ``nats://`` or
    ``tls://`` URL with a host (and a valid port, if any)."""
    entries = setting.split(",") if isinstance(setting, str) else list(setting)
    servers = []
    for entry in entries:
        url = entry.strip() if isinstance(entry, str) else entry
        if not isinstance(url, str) or not url:
            raise ValueError(f"an empty entry in the NATS URL list {setting!r}")
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES:
            raise ValueError(f"{url!r} is not a nats:// or tls:// URL")
        try:
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            raise ValueError(f"{url!r} has an invalid port") from None
        if not parts.hostname:
            raise ValueError(f"{url!r} names no host")
        servers.append(url)
    if not servers:
        raise ValueError("no NATS URL given")
    return servers


def checked_nats(text: str) -> str:
    """The setting as a service keeps it: validated, entries comma-joined
    without surrounding spaces (what ``laneledger up`` passes on)."""
    return ",".join(nats_servers(text))


async def _log_error(exc: Exception) -> None:
    # One line instead of nats-py's default logged traceback: a node of the
    # list being down is expected, not a bug.
    log.warning("NATS: %s", exc or type(exc).__name__)


async def connect_nats(setting: str | Sequence[str], *, name: str, **options: Any) -> NATS:
    """Connect to the servers of ``setting`` as ``name``, reconnecting for as
    long as it takes (at start too: a service waits for NATS rather than
    exit). ``options`` go to ``nats.connect`` and override these."""
    import nats  # here: a CLI command checks its --nats setting without loading nats-py

    defaults: dict[str, Any] = {
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": RECONNECT_WAIT_S,
        "error_cb": _log_error,
    }
    return await nats.connect(servers=nats_servers(setting), name=name, **{**defaults, **options})
