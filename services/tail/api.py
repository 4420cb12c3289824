"""Strict query parameters, which every tail route keeps (its JSON answers and
typed error bodies: ``laneledger.runtime.httpjson``).

Query parameters are checked against the route's list: an unknown, repeated
or malformed one is a 400 ``invalid_request`` whose ``details.parameter``
names it.
"""

from __future__ import annotations

from typing import overload

from aiohttp import web

from laneledger.contract.errors import InvalidRequest
from laneledger.runtime.access import ACCESS_TOKEN_PARAMETER


class Query:
    """The query parameters of one request, read against the route's allowed
    names: each getter raises ``InvalidRequest`` naming the parameter."""

    def __init__(self, request: web.Request, allowed: tuple[str, ...]) -> None:
        self._values: dict[str, str] = {}
        for name in request.query:
            if name == ACCESS_TOKEN_PARAMETER:
                continue  # the bearer token, read (and checked) by the access middleware
            if name not in allowed:
                raise InvalidRequest(
                    f"unknown query parameter {name!r}", parameter=name, allowed=list(allowed)
                )
            values = request.query.getall(name)
            if len(values) > 1:
                raise InvalidRequest(f"query parameter {name!r} given more than once", parameter=name)
            self._values[name] = values[0]

    def text(self, name: str) -> str | None:
        value = self._values.get(name)
        if value is not None and not 1 <= len(value) <= 256:
            raise InvalidRequest(f"{name} must be 1 to 256 characters", parameter=name)
        return value

    @overload
    def integer(self, name: str, default: int, *, low: int = 0, high: int | None = None) -> int: ...
    @overload
    def integer(
        self, name: str, default: None = None, *, low: int = 0, high: int | None = None
    ) -> int | None: ...
    def integer(
        self, name: str, default: int | None = None, *, low: int = 0, high: int | None = None
    ) -> int | None:
        raw = self._values.get(name)
        if raw is None:
            return default
        return parse_int(raw, name, low=low, high=high)

    def choice(self, name: str, choices: tuple[str, ...]) -> str:
        """One of ``choices``; the first when the parameter is absent."""
        found = self.optional_choice(name, choices)
        return choices[0] if found is None else found

    def optional_choice(self, name: str, choices: tuple[str, ...]) -> str | None:
        """One of ``choices``, or None when the parameter is absent."""
        raw = self._values.get(name)
        if raw is not None and raw not in choices:
            raise InvalidRequest(f"{name} must be one of {', '.join(choices)}", parameter=name, found=raw)
        return raw


def parse_int(raw: str, name: str, *, low: int = 0, high: int | None = None) -> int:
    """A decimal integer in [low, high]; the error names ``name``."""
    if not raw.isascii() or not raw.isdigit() or len(raw) > 16:
        raise InvalidRequest(f"{name} must be a decimal integer", parameter=name, found=raw[:64])
    value = int(raw)
    if value < low or (high is not None and value > high):
        bounds = f"from {low}" + (f" to {high}" if high is not None else "")
        raise InvalidRequest(f"{name} must be {bounds}", parameter=name, found=value)
    return value
