"""The token a CLI command reading a guarded service sends (``tail``,
``verify --url``, ``prove``, ``witness``, ``mcp``): from ``--token-file`` or
``LANELEDGER_TOKEN_FILE``. Kept apart from ``laneledger.runtime.access``
(the services' side, built on aiohttp's server) so the file commands start
without loading aiohttp."""

from __future__ import annotations

from pathlib import Path

CLIENT_TOKEN_FILE_ENV = "LANELEDGER_TOKEN_FILE"  # the CLI's token, for `tail` and `verify --url`


def client_headers(token_file: str | None) -> dict[str, str]:
    """``Authorization`` for a client reading a guarded service, from a file
    holding its token (``OSError`` if it cannot be read); none without a file."""
    if not token_file:
        return {}
    return {"Authorization": "Bearer " + Path(token_file).read_text().strip()}
