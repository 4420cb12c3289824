"""RFC 8785 (JSON Canonicalization Scheme) canonical bytes.

``canonicalize(value)`` returns the canonical UTF-8 bytes of a JSON value
given as Python objects (dict with str keys, list/tuple, str, int, float,
bool, None); the output equals ``rfc8785.dumps(value)`` wherever that package
accepts the value. Anything without a canonical form raises
``NotCanonicalizable`` naming the location (``path``, e.g.
``$.payload.items[3]``) and a ``reason``:

* ``non_finite_number``  NaN or ±Infinity
* ``integer_out_of_range``  an int beyond ±(2^53−1): I-JSON numbers are IEEE
  doubles, so it could not be carried exactly (never rounded; send a string)
* ``lone_surrogate``  a string or key with an unpaired U+D800..U+DFFF
* ``non_string_key``  an object key that is not a str
* ``unsupported_type``  anything else (bytes, set, UUID, datetime, Decimal, …)
* ``too_deep``  nesting beyond Python's recursion limit, or a cycle

Two paths. The fast one is msgspec's C encoder with sorted keys, which for
plain values is byte-identical to RFC 8785: same escaping (short escapes for
``\\b \\f \\n \\r \\t``, ``\\u00xx`` lowercase for other controls, everything
else raw UTF-8), ``str(int)`` for ints, and for a non-integral float of
magnitude >= 1e-5 the same shortest round-trip digits in the same fixed
notation. A cheap walk over the value admits exactly those cases; everything
else (integral or tiny or huge floats, big ints, subclasses, foreign types)
takes the slow path, a plain encoder written from the RFC that also produces
the errors. The differential test in tests/test_canonical.py holds both
paths to ``rfc8785.dumps``.
"""

from __future__ import annotations

import json
import re
from operator import itemgetter
from typing import Any

import msgspec

from laneledger.contract.errors import NotCanonicalizable

__all__ = ["MAX_SAFE_INTEGER", "admits_fast", "canonicalize"]

MAX_SAFE_INTEGER = 2**53 - 1
# [2^53, 1e21): floats whose RFC 8785 form has no exponent and no fraction.
_UNSAFE_WHOLE_FLOATS = (2.0**53, 1e21)

# Sorted keys; with exact str values its string output is RFC 8785's (checked
# over every code point by the tests). Also the string escaper of the slow path.
_msgspec_encode = msgspec.json.Encoder(order="sorted").encode

# msgspec sorts keys by code point, RFC 8785 by UTF-16 code unit. The two
# orders differ only between a char in U+E000..U+FFFF (UTF-8 lead byte EE/EF)
# and a non-BMP char (lead byte F0..F4, a surrogate pair in UTF-16).
_NON_BMP_LEAD = re.compile(rb"[\xf0-\xf4]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INF = float("inf")


def canonicalize(value: Any, *, admitted: bool = False) -> bytes:
    """The RFC 8785 canonical bytes of ``value``; ``NotCanonicalizable`` if
    it has none.

    ``admitted=True`` skips the fast path's walk: the caller knows
    ``admits_fast`` holds for ``value`` (the sequencer walks an append's
    events once, for its digest, and hashes each event again with only
    plain ``str`` fields and small ints added)."""
    kind = type(value)
    if kind is dict or kind is list:
        try:
            if admitted or _msgspec_is_canonical(value):
                out = _msgspec_encode(value)
                if out.isascii() or not _utf16_order_may_differ(out):
                    return out
        except (TypeError, ValueError, RecursionError):
            pass  # a non-str key, a lone surrogate, a cycle: the slow path names it
    return _canonicalize_slowly(value)


def _msgspec_is_canonical(
    container: dict[Any, Any] | list[Any] | tuple[Any, ...], _max: int = MAX_SAFE_INTEGER
) -> bool:
    """Whether every value below ``container`` is one msgspec renders exactly
    as RFC 8785 does. Exact types only: subclasses (IntEnum, str enums, ...)
    go the slow way. Keys are not looked at: msgspec's sorted mode refuses
    non-str keys and writes a str subclass key as its contents, like rfc8785.
    This loop is most of the fast path's cost, so it is kept flat."""
    for item in container.values() if type(container) is dict else container:
        kind = type(item)
        if kind is str:
            continue
        if kind is int:
            if -_max <= item <= _max:
                continue
            return False
        if kind is dict or kind is list or kind is tuple:
            if _msgspec_is_canonical(item):
                continue
            return False
        if item is None or kind is bool:
            continue
        # msgspec writes 1.0 as "1.0", 1e-6 as "1e-6", 1e16 as "1e16" and
        # inf as "null"; finite non-integral floats >= 1e-5 in magnitude match.
        if kind is float and 1e-5 <= abs(item) < 1e16 and not item.is_integer():
            continue
        return False
    return True


def admits_fast(value: dict[Any, Any] | list[Any]) -> bool:
    """Whether the fast path writes the dict or list ``value`` exactly as
    RFC 8785 does (see ``_msgspec_is_canonical``)."""
    try:
        return _msgspec_is_canonical(value)
    except RecursionError:
        return False


def _utf16_order_may_differ(out: bytes) -> bool:
    return (b"\xee" in out or b"\xef" in out) and _NON_BMP_LEAD.search(out) is not None


# -- the slow path ------------------------------------------------------------


class _Refused(Exception):
    """Raised deep in the slow path; each container on the way out adds its
    key or index to ``where``, so the path costs nothing unless it fails."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        self.message = message
        self.where: list[str | int] = []


def _canonicalize_slowly(value: Any) -> bytes:
    out: list[bytes] = []
    try:
        _write(value, out)
    except _Refused as refused:
        path = _jsonpath(reversed(refused.where))
        raise NotCanonicalizable(refused.message, path=path, reason=refused.reason) from None
    except RecursionError:
        raise NotCanonicalizable(
            "value nests too deeply (or contains itself)", path="$", reason="too_deep"
        ) from None
    return b"".join(out)


def _write(value: Any, out: list[bytes]) -> None:
    # isinstance, not type(): rfc8785 accepts subclasses (IntEnum, str enums,
    # OrderedDict) and writes their plain value; so do we. bool before int.
    if value is None:
        out.append(b"null")
    elif isinstance(value, bool):
        out.append(b"true" if value else b"false")
    elif isinstance(value, int):
        number = int(value)
        if not -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
            raise _Refused(
                "integer_out_of_range",
                f"integer {number} is outside ±(2^53−1): RFC 8785 (I-JSON) numbers are "
                "IEEE doubles and cannot carry it exactly; send it as a string",
            )
        out.append(b"%d" % number)
    elif isinstance(value, float):
        out.append(_number(float(value)).encode("ascii"))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, (list, tuple)):
        out.append(b"[")
        for index, item in enumerate(value):
            if index:
                out.append(b",")
            try:
                _write(item, out)
            except _Refused as refused:
                refused.where.append(index)
                raise
        out.append(b"]")
    elif isinstance(value, dict):
        members = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Refused("non_string_key", f"object key {key!r} ({type(key).__name__}) is not a string")
            members.append((_utf16_sort_key(key), key, item))
        members.sort(key=itemgetter(0))  # RFC 8785 3.2.3: by UTF-16 code units
        out.append(b"{")
        for index, (_, key, item) in enumerate(members):
            if index:
                out.append(b",")
            out.append(_string(key))
            out.append(b":")
            try:
                _write(item, out)
            except _Refused as refused:
                refused.where.append(key)
                raise
        out.append(b"}")
    else:
        raise _Refused("unsupported_type", f"{type(value).__name__} is not a JSON type")


def _utf16_sort_key(key: str) -> bytes:
    try:
        return key.encode("utf-16-be")
    except UnicodeEncodeError:
        refused = _lone_surrogate(key)
        refused.where.append(key)
        raise refused from None


def _string(text: str) -> bytes:
    try:
        return _msgspec_encode(str.__str__(text))  # a subclass's contents, as rfc8785
    except UnicodeEncodeError:
        raise _lone_surrogate(text) from None


def _lone_surrogate(text: str) -> _Refused:
    code = next(ord(c) for c in text if "\ud800" <= c <= "\udfff")
    return _Refused(
        "lone_surrogate", f"string contains a lone surrogate U+{code:04X}, which has no UTF-8 form"
    )


def _number(value: float) -> str:
    """ECMAScript Number::toString (ECMA-262 6.1.6.1.20), as RFC 8785 3.2.2.3
    requires. Python's repr already picks the same digits (the shortest
    string that round-trips, closest to the value); only the layout differs."""
    if value != value or value in (_INF, -_INF):
        raise _Refused("non_finite_number", f"{value!r} has no JSON form (RFC 8785 forbids NaN and Infinity)")
    if value == 0:
        return "0"  # -0 too
    if value < 0:
        return "-" + _number(-value)
    if _UNSAFE_WHOLE_FLOATS[0] <= value < _UNSAFE_WHOLE_FLOATS[1]:
        # ECMAScript writes these as plain digits ("100000000000000000000"),
        # which every JSON reader takes back as an integer beyond ±(2^53−1):
        # the committed bytes could then never be canonicalized again to
        # verify them. Refused, like the integers they would turn into.
        raise _Refused(
            "integer_out_of_range",
            f"float {value!r} is a whole number ≥ 2^53 that RFC 8785 writes without an "
            "exponent, so it would read back as an integer outside ±(2^53−1); send it as a string",
        )
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # The value is 0.<digits> x 10^n.
    n = len(whole) + int(exponent or 0) - (len(whole + fraction) - len(digits))
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    return digits[0] + ("." + digits[1:] if k > 1 else "") + ("e+" if e >= 0 else "e-") + str(abs(e))


def _jsonpath(where: Any) -> str:
    path = "$"
    for step in where:
        if isinstance(step, int):
            path += f"[{step}]"
        elif _IDENTIFIER.fullmatch(step):
            path += "." + step
        else:
            path += "[" + json.dumps(step) + "]"  # ASCII-escaped, so lone surrogates print
    return path
