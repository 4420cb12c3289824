"""Strict parameters, which every tail route keeps (its JSON answers and
typed error bodies: ``laneledger.runtime.httpjson``).

A route's path and query parameters are decoded into its Struct
(``queries.py``, ``decode_parameters``): an unknown, repeated or malformed
one is a 400 ``invalid_request`` whose ``details.parameter`` names it.
"""

from __future__ import annotations

import functools
import re
from typing import TypeVar

import msgspec
from aiohttp import web

from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import error_path
from laneledger.runtime.access import ACCESS_TOKEN_PARAMETER


def parse_int(raw: str, name: str, *, low: int = 0, high: int | None = None) -> int:
    """A decimal integer in [low, high]; the error names ``name``."""
    if not raw.isascii() or not raw.isdigit() or len(raw) > 16:
        raise InvalidRequest(f"{name} must be a decimal integer", parameter=name, found=raw[:64])
    value = int(raw)
    if value < low or (high is not None and value > high):
        bounds = f"from {low}" + (f" to {high}" if high is not None else "")
        raise InvalidRequest(f"{name} must be {bounds}", parameter=name, found=value)
    return value


P = TypeVar("P", bound=msgspec.Struct)


def decode_parameters(request: web.Request, params: type[P]) -> P:
    """The request's path and query parameters as the Struct ``params``
    (``queries.py``): an unknown, repeated or malformed one is a 400
    ``invalid_request`` whose ``details.parameter`` names it. An integer is
    decimal digits only (msgspec alone would read ``5.0`` or ``1e3``)."""
    fields = params.__struct_fields__
    values: dict[str, str] = dict(request.match_info)
    for name in request.query:
        if name == ACCESS_TOKEN_PARAMETER:
            continue  # the bearer token, read (and checked) by the access middleware
        if name not in fields or name in request.match_info:
            allowed = [field for field in fields if field not in request.match_info]
            raise InvalidRequest(f"unknown query parameter {name!r}", parameter=name, allowed=allowed)
        found = request.query.getall(name)
        if len(found) > 1:
            raise InvalidRequest(f"query parameter {name!r} given more than once", parameter=name)
        values[name] = found[0]
    for name in _integers(params):
        raw = values.get(name)
        if raw is not None:
            parse_int(raw, name)  # its syntax; its bounds are the Struct's
    try:
        decoded = msgspec.convert(values, params, strict=False)
    except msgspec.ValidationError as exc:
        message = str(exc).split(" - at `")[0]
        missing = re.fullmatch(r"Object missing required field `(\w+)`", message)
        name = missing[1] if missing else error_path(exc).removeprefix("$.")
        raise InvalidRequest(f"{name}: {message}", parameter=name) from exc
    # msgspec's lax mode reads the text ``null`` as None for a field that may
    # be None and is no string (an enum, a number): ``?status=null`` would
    # mean no filter, where it is a value that is none of the enum's.
    for name in values:
        if getattr(decoded, name) is None:
            raise InvalidRequest(f"{name}: {values[name]!r} is not a valid value", parameter=name)
    return decoded


def within(value: int, name: str, *, high: int) -> int:
    """``value`` of the parameter ``name``, at most ``high``: a bound only
    known at the request (a tree size, say)."""
    if value > high:
        raise InvalidRequest(f"{name} must be from 0 to {high}", parameter=name, found=value)
    return value


@functools.cache
def _integers(params: type[msgspec.Struct]) -> tuple[str, ...]:
    """The fields of ``params`` that are integers (or may be)."""

    def is_integer(t: msgspec.inspect.Type) -> bool:
        if isinstance(t, msgspec.inspect.Metadata):
            return is_integer(t.type)
        if isinstance(t, msgspec.inspect.UnionType):
            return any(is_integer(branch) for branch in t.types)
        return isinstance(t, msgspec.inspect.IntType)

    info = msgspec.inspect.type_info(params)
    assert isinstance(info, msgspec.inspect.StructType)
    return tuple(field.name for field in info.fields if is_integer(field.type))
