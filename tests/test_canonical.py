"""laneledger.contract.canonical against the reference: rfc8785.dumps.

Every value is checked on both paths: ``canonicalize`` (msgspec where it is
exact, else the slow encoder) and the slow encoder on its own.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import hashlib
import json
import math
import random
import struct
import uuid
from pathlib import Path

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from laneledger.contract import canonical
from laneledger.contract.canonical import MAX_SAFE_INTEGER, canonicalize
from laneledger.contract.errors import NotCanonicalizable, RequestError

MAX = MAX_SAFE_INTEGER
REPO = Path(__file__).resolve().parents[1]
APPEND = json.loads((REPO / "spec" / "vectors" / "agent-ledger" / "append.json").read_text())

EVENT = {
    "schema_version": "1.0",
    "id": "018f0c2a-7b3c-7d2e-9a41-5c6d7e8f9012",
    "lane_id": "018f0c2a-0000-7000-8000-000000000002",
    "event_type": "tool.call.completed",
    "occurred_at": "2026-01-02T03:04:05.123456Z",
    "payload": {
        "tool": "bash",
        "exit_code": 0,
        "temperature": 0.25,
        "ok": True,
        "note": None,
        "output": {"summary": "ran 12 tests — all passed ✓", "lines": [1, 2, 3]},
    },
    "extensions": {},
}


def both(value):
    """Our bytes from both paths; they must agree."""
    fast, slow = canonicalize(value), canonical._canonicalize_slowly(value)
    assert fast == slow
    return fast


# -- strategies -------------------------------------------------------------------

SPECIAL_FLOATS = [
    1.0,
    -1.0,
    0.0,
    -0.0,
    0.25,
    0.1,
    1 / 3,
    1e21,
    1e20,
    1e16,
    1e15,
    1e-5,
    1e-6,
    1e-7,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    9007199254740992.0,
    9007199254740993.0,
    123456789012345680.0,
    4503599627370495.5,
    1e-300,
    1e300,
    -1.5e-9,
]
finite_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(SPECIAL_FLOATS),
    # decimal mantissas at every exponent, so each layout branch gets hit
    st.builds(lambda m, e: float(f"{m}e{e}"), st.integers(1, 10**17), st.integers(-340, 308)).filter(
        math.isfinite
    ),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
)
safe_ints = st.one_of(st.integers(-MAX, MAX), st.sampled_from([MAX, -MAX, 0, -1, 2**31, 2**32]))
any_ints = st.one_of(safe_ints, st.sampled_from([MAX + 1, -MAX - 1, 2**63, -(2**63), 2**64]), st.integers())

# Characters that matter: escapes, controls, DEL, the JS line terminators, and
# the two ranges whose UTF-16 order differs from code-point order.
TRICKY = [
    *'"\\/aé\x00\x01\x1f\x7f\b\f\n\r\t\u2028\u2029',
    "\ue000",
    "\uf8ff",
    "\ufb01",
    "\ufeff",
    "\ufffd",
    "\uffff",
    "\U00010000",
    "\U0001f600",
    "\U0010ffff",
]
chars = st.one_of(st.sampled_from(TRICKY), st.characters(codec="utf-8"), st.characters(max_codepoint=0x1F))
texts = st.text(chars, max_size=10)
# Short keys over a small alphabet so siblings differ at the interesting spot.
keys = st.one_of(
    st.text(
        st.sampled_from(["a", "b", "\ue000", "\uffff", "\ufb01", "\U00010000", "\U0001f600"]), max_size=3
    ),
    texts,
)
lone_surrogates = st.characters(categories=["Cs"])


def json_values(leaves, keys=keys):
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=5),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(keys, inner, max_size=6),
        ),
        max_leaves=25,
    )


valid_values = json_values(st.one_of(st.none(), st.booleans(), safe_ints, finite_floats, texts))

# Anything at all: non-finite floats, big ints, lone surrogates, non-str keys,
# non-JSON types. Both sides must refuse exactly the same values.
wild_leaves = st.one_of(
    st.none(),
    st.booleans(),
    any_ints,
    finite_floats,
    texts,
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.builds(lambda a, s, b: a + s + b, texts, lone_surrogates, texts),
    st.sampled_from([b"x", {1, 2}, uuid.UUID(int=7), decimal.Decimal("1.5"), datetime.date(2026, 1, 2)]),
)
wild_keys = st.one_of(keys, st.builds(lambda s: "k" + s, lone_surrogates), st.integers(-3, 3), st.none())
wild_values = json_values(wild_leaves, keys=wild_keys)


# -- differential -------------------------------------------------------------------


def unsafe_whole_float(value) -> bool:
    """True when ``value`` holds a float in [2^53, 1e21): rfc8785 writes it as
    plain digits that read back as an out-of-range integer; we refuse it."""
    if isinstance(value, float):
        return 2.0**53 <= abs(value) < 1e21
    if isinstance(value, dict):
        return any(unsafe_whole_float(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(unsafe_whole_float(v) for v in value)
    return False


@settings(max_examples=600, deadline=None)
@given(valid_values)
def test_matches_rfc8785(value):
    if unsafe_whole_float(value):
        with pytest.raises(NotCanonicalizable):
            canonicalize(value)
        return
    assert both(value) == rfc8785.dumps(value)


@settings(max_examples=300, deadline=None)
@given(wild_values.filter(lambda v: isinstance(v, (dict, list))))
def test_admitted_values_skip_only_the_walk(value):
    """``admits_fast`` says yes only where the fast path is exact, so the
    sequencer may pass ``admitted=True`` for what it walked before: same
    bytes, or the same refusal (keys and lone surrogates are the encoder's
    to refuse, not the walk's)."""
    if not canonical.admits_fast(value):
        return
    try:
        expected = canonicalize(value)
    except NotCanonicalizable as exc:
        refused = exc
    else:
        assert canonicalize(value, admitted=True) == expected == rfc8785.dumps(value)
        return
    with pytest.raises(NotCanonicalizable) as again:
        canonicalize(value, admitted=True)
    assert again.value.details == refused.details


@pytest.mark.parametrize("x", [2.0**53, 1e16, 1e20, -1e20, math.nextafter(1e21, 0)])
def test_whole_floats_that_would_read_back_as_big_integers_are_refused(x):
    text = rfc8785.dumps(x)
    assert b"e" not in text and isinstance(json.loads(text), int)  # why we refuse them
    with pytest.raises(NotCanonicalizable) as caught:
        canonicalize({"payload": [x]})
    assert caught.value.details == {"path": "$.payload[0]", "reason": "integer_out_of_range"}


def test_floats_just_outside_the_refused_range_are_kept():
    assert canonicalize(math.nextafter(2.0**53, 0)) == rfc8785.dumps(math.nextafter(2.0**53, 0))
    assert canonicalize(1e21) == b"1e+21"


@settings(max_examples=400, deadline=None)
@given(wild_values)
def test_refuses_exactly_what_rfc8785_refuses(value):
    try:
        expected = rfc8785.dumps(value)
    except ValueError:  # CanonicalizationError, and UnicodeEncodeError for a lone surrogate key
        with pytest.raises(NotCanonicalizable):
            canonicalize(value)
        with pytest.raises(NotCanonicalizable):
            canonical._canonicalize_slowly(value)
    else:
        if unsafe_whole_float(value):
            with pytest.raises(NotCanonicalizable):
                canonicalize(value)
            return
        assert both(value) == expected


@settings(max_examples=300, deadline=None)
@given(finite_floats)
def test_float_layout(x):
    # Alone in a list, so the fast path decides on this one float.
    if unsafe_whole_float(x):
        with pytest.raises(NotCanonicalizable):
            canonicalize([x])
        return
    assert both([x]) == rfc8785.dumps([x])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(st.integers(0, 3), st.sampled_from(["payload", "items", "x", "a b", "x.y", "é", ""])),
        max_size=5,
    ),
    st.one_of(st.integers(max_value=-MAX - 1), st.integers(min_value=MAX + 1)),
)
def test_big_integer_is_refused_with_its_path(steps, n):
    value, path = n, ""
    for step in reversed(steps):
        if isinstance(step, int):
            value = [0] * step + [value]
            path = f"[{step}]" + path
        else:
            value = {step: value, "zz": 1}
            path = (f".{step}" if step.isidentifier() and step.isascii() else f"[{json.dumps(step)}]") + path
    with pytest.raises(rfc8785.CanonicalizationError):
        rfc8785.dumps(value)  # the reference refuses these too
    with pytest.raises(NotCanonicalizable) as caught:
        canonicalize(value)
    assert caught.value.details == {"path": "$" + path, "reason": "integer_out_of_range"}
    assert "2^53" in caught.value.message


def test_every_code_point_escapes_like_rfc8785():
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(points), 4096):
        text = "".join(map(chr, points[start : start + 4096]))
        assert both([text]) == rfc8785.dumps([text])
        assert both({text: 1}) == rfc8785.dumps({text: 1})


def test_random_doubles_on_the_fast_path():
    rng = random.Random(8785)
    doubles = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(20000)]
    doubles += [rng.uniform(-1e6, 1e6) for _ in range(20000)]
    doubles += [round(rng.uniform(-1e3, 1e3), rng.randint(0, 6)) for _ in range(20000)]
    for edge in (1e-5, -1e-5, 2.0**52, -(2.0**52)):  # where msgspec's layout changes
        x = edge
        for _ in range(200):
            doubles += [x, math.nextafter(edge, 0), math.nextafter(edge, math.inf)]
            x = math.nextafter(x, 0)
    for x in doubles:
        if math.isfinite(x) and not unsafe_whole_float(x):
            assert canonicalize([x]) == rfc8785.dumps([x]), x


# -- examples ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (-0.0, "0"),
        (0.0, "0"),
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (5e-324, "5e-324"),
        (0.000001, "0.000001"),
        (1e-6 * 1.5, "0.0000015"),
        (0.25, "0.25"),
        (-1.5e300, "-1.5e+300"),
        (123.0, "123"),
        (1e15, "1000000000000000"),
        (MAX, "9007199254740991"),
        (-MAX, "-9007199254740991"),
        (True, "true"),
        (False, "false"),
        (None, "null"),
        ([True, 1], "[true,1]"),
        ("\u2028\u2029\x7f", '"\u2028\u2029\x7f"'),
        ('"\\\b\f\n\r\t\x00\x1f', r'"\"\\\b\f\n\r\t\u0000\u001f"'),
        ({"b": [], "a": {}, "c": ()}, '{"a":{},"b":[],"c":[]}'),
    ],
)
def test_examples(value, text):
    assert both(value) == text.encode() == rfc8785.dumps(value)


def test_keys_sort_by_utf16_not_code_point():
    # U+1F600 is the pair D83D DE00 in UTF-16, so it sorts before U+FB01.
    value = {"\ufb01": 1, "\U0001f600": 2, "a": 3, "\ue000": 4}
    assert sorted(value) == ["a", "\ue000", "\ufb01", "\U0001f600"]  # code point order
    expected = '{"a":3,"\U0001f600":2,"\ue000":4,"\ufb01":1}'.encode()
    assert both(value) == expected == rfc8785.dumps(value)
    assert both([value, "emoji in a value only: \U0001f600\ufb01"]) == rfc8785.dumps(
        [value, "emoji in a value only: \U0001f600\ufb01"]
    )


def test_subclasses_are_written_as_their_plain_value():
    class Colour(enum.StrEnum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    value = collections.OrderedDict([("b", Level.HIGH), ("a", Colour.RED), (Colour.RED, [Level.HIGH, True])])
    assert both(value) == b'{"a":"red","b":3,"red":[3,true]}' == rfc8785.dumps(value)


def test_the_append_vector():
    out = canonicalize(APPEND["events"])
    assert out == APPEND["canonical"].encode()
    assert hashlib.sha256(out).hexdigest() == APPEND["sha256"]


@pytest.mark.parametrize("value", [EVENT, [EVENT, EVENT], APPEND["events"]], ids=["event", "batch", "vector"])
def test_typical_events_take_the_fast_path(monkeypatch, value):
    expected = rfc8785.dumps(value)

    def slow(_value):
        raise AssertionError("took the slow path")

    monkeypatch.setattr(canonical, "_canonicalize_slowly", slow)
    assert canonicalize(value) == expected


# -- errors ------------------------------------------------------------------------------


class Opaque:
    pass


cycle: list = []
cycle.append(cycle)


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"payload": {"items": [0, 1, 2, {"x": math.nan}]}}, "$.payload.items[3].x", "non_finite_number"),
        ([math.inf], "$[0]", "non_finite_number"),
        ({"a": -math.inf}, "$.a", "non_finite_number"),
        (math.nan, "$", "non_finite_number"),
        ({"a": MAX + 1}, "$.a", "integer_out_of_range"),
        ([[-(MAX + 1)]], "$[0][0]", "integer_out_of_range"),
        (2**64, "$", "integer_out_of_range"),
        ({"s": "ok\ud800"}, "$.s", "lone_surrogate"),
        ({"k": {"\udfff": 1}}, '$.k["\\udfff"]', "lone_surrogate"),
        ({"p": {1: "x"}}, "$.p", "non_string_key"),
        ({"p": {None: "x"}}, "$.p", "non_string_key"),
        ({"p": [b"x"]}, "$.p[0]", "unsupported_type"),
        ({"a b": {"x-y": {1, 2}}}, '$["a b"]["x-y"]', "unsupported_type"),
        ({"id": uuid.UUID(int=1)}, "$.id", "unsupported_type"),
        ({"at": datetime.datetime(2026, 1, 2)}, "$.at", "unsupported_type"),
        ({"amount": decimal.Decimal("1.10")}, "$.amount", "unsupported_type"),
        ({"o": Opaque()}, "$.o", "unsupported_type"),
        ({"m": collections.ChainMap({"a": 1})}, "$.m", "unsupported_type"),
        (cycle, "$", "too_deep"),
    ],
)
def test_refusals_name_the_path(value, path, reason):
    if reason != "too_deep":
        # The reference refuses it too (a lone surrogate in a key: while sorting).
        with pytest.raises((rfc8785.CanonicalizationError, UnicodeEncodeError)):
            rfc8785.dumps(value)
    with pytest.raises(NotCanonicalizable) as caught:
        canonicalize(value)
    error = caught.value
    assert isinstance(error, RequestError) and error.code == "not_canonicalizable"
    assert error.details == {"path": path, "reason": reason}
    assert error.to_wire()["details"]["path"] == path


def test_big_integer_message_says_why():
    with pytest.raises(NotCanonicalizable) as caught:
        canonicalize({"payload": {"tokens": 2**53}})
    assert "9007199254740992" in caught.value.message
    assert "2^53" in caught.value.message and "string" in caught.value.message
