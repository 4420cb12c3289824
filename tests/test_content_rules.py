"""The pure content rules (spec/content.md): which payload values become
content references, what an event references, and what redaction replaces."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from secret_corpus import KEYED_SECRETS, SHAPED_SECRETS, needle

from laneledger.contract.canonical import canonicalize
from laneledger.contract.contentref import THRESHOLD_BYTES, externalize, is_ref, refs_in
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.redaction import DEFAULT_PATTERNS, Redactor, checked_keys, checked_patterns
from laneledger.sdk.content import prepare_content

# -- content references ---------------------------------------------------------------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_large_string_becomes_a_reference_and_a_descriptor():
    text = "é" * 600  # 1200 UTF-8 bytes, 600 characters: bytes decide
    done = externalize({"tool": "Write", "args": {"file_path": "src/a.py", "content": text}})
    raw = text.encode()
    ref = {"_ref": "sha256:" + sha(raw), "size_bytes": 1200}
    assert done.payload == {
        "tool": "Write",
        "args": {"file_path": "src/a.py", "content": ref},
        "payload_refs": [
            {
                "sha256": sha(raw),
                "size_bytes": 1200,
                "label": "args.content",
                "media_type": "text/plain; charset=utf-8",
            }
        ],
    }
    assert done.blobs == {"sha256:" + sha(raw): raw}
    assert refs_in(done.payload) == [("sha256:" + sha(raw), 1200)]


def test_the_threshold_is_exclusive_and_counts_canonical_bytes():
    at = "x" * THRESHOLD_BYTES
    assert externalize({"a": at, "b": "y"}).blobs == {}
    over = externalize({"a": at + "x"})
    assert list(over.blobs.values()) == [(at + "x").encode()]
    # A structured value's bytes are its RFC 8785 form (sorted keys, no spaces).
    value = {"z": "v" * 600, "a": list(range(150))}
    done = externalize({"big": value})
    assert done.blobs == {"sha256:" + sha(canonicalize(value)): canonicalize(value)}
    assert done.payload["payload_refs"][0]["media_type"] == "application/json"


def test_leaves_first_and_paths_stay_verbatim():
    many_small = {f"k{i}": "v" * 40 for i in range(40)}  # 2 KiB, no member over 1 KiB
    done = externalize(
        {
            "args": many_small,
            "kept": {"path": "p" * 2000, "n": 1},
            "file_path": "/" + "d" * 1500,
            "deep": {"edits": [{"filepath": "x.py", "text": "t" * 900}] * 2},
        }
    )
    # The object itself is what is over: it becomes one reference.
    assert is_ref(done.payload["args"])
    # A path is never referenced, nor a container that holds one.
    assert done.payload["kept"] == {"path": "p" * 2000, "n": 1}
    assert done.payload["file_path"] == "/" + "d" * 1500
    assert done.payload["deep"]["edits"][0]["filepath"] == "x.py"
    assert [d["label"] for d in done.payload["payload_refs"]] == ["args"]


def test_the_rule_is_deterministic_and_idempotent():
    payload = {"b": "q" * 3000, "a": {"x": ["w" * 2000]}, "same": "q" * 3000}
    one, two = externalize(payload), externalize(json.loads(json.dumps(payload)))
    assert one.payload == two.payload and one.blobs == two.blobs
    assert len(one.blobs) == 2  # "b" and "same" share one blob, two descriptors
    assert [d["label"] for d in one.payload["payload_refs"]] == ["b", "a.x[0]", "same"]
    again = externalize(one.payload)
    assert again.payload == one.payload and again.blobs == {}
    assert payload["b"] == "q" * 3000  # the input is left as it was


def test_existing_descriptors_are_kept_and_must_be_an_array():
    mine = {"sha256": "ab" * 32, "size_bytes": 5, "label": "Edit.x"}
    done = externalize({"payload_refs": [mine], "big": "z" * 2000})
    assert done.payload["payload_refs"][0] == mine and len(done.payload["payload_refs"]) == 2
    assert refs_in(done.payload)[-1] == ("sha256:" + "ab" * 32, 5)
    with pytest.raises(InvalidRequest) as caught:
        externalize({"payload_refs": "nope", "big": "z" * 2000})
    assert caught.value.details["path"] == "$.payload.payload_refs"


def test_refs_in_ignores_lookalikes():
    payload = {
        "a": {"_ref": "sha256:" + "0" * 64, "size_bytes": 3},
        "b": {"_ref": "md5:abc", "size_bytes": 3},
        "c": {"_ref": "sha256:" + "1" * 64, "size_bytes": 3, "extra": 1},
        "payload_refs": [{"sha256": "nothex", "size_bytes": 1}, "text"],
    }
    assert refs_in(payload) == [("sha256:" + "0" * 64, 3)]


def test_refs_in_skips_the_walk_only_where_no_reference_can_be():
    """Its fast path (no '"_ref":' in the JSON, no descriptor list) must not
    hide a reference: deep ones, ones in lists, ones beside odd leaves or a
    value the encoder refuses are all found; text that mentions "_ref" is not one."""
    ref = {"_ref": "sha256:" + "2" * 64, "size_bytes": 7}
    assert refs_in({"a": [{"b": {"c": [1, ref]}}]}) == [(ref["_ref"], 7)]
    assert refs_in([ref]) == [(ref["_ref"], 7)]
    assert refs_in({"when": float("inf"), "blob": b"\x00", "x": ref}) == [(ref["_ref"], 7)]
    assert refs_in({"odd": object(), "x": ref}) == [(ref["_ref"], 7)]  # unencodable: walked
    assert refs_in({"text": 'a "_ref": "sha256:…" b', "n": 1}) == []
    assert refs_in({"payload_refs": [{"sha256": "3" * 64, "size_bytes": 9}]}) == [("sha256:" + "3" * 64, 9)]
    assert refs_in({"model": "claude", "tokens": 12}) == []


# -- redaction -------------------------------------------------------------------------------


@pytest.mark.parametrize(("rule", "secret"), SHAPED_SECRETS)
def test_every_default_shape_is_redacted_where_it_stands(rule, secret):
    out = Redactor().redact({"log": f"calling with {secret} now", "n": 3})
    assert needle(rule, secret) not in json.dumps(out.value)
    assert "[REDACTED:" in out.value["log"] and out.value["log"].startswith("calling with ")
    assert out.value["log"].endswith(" now") and out.count >= 1 and rule in out.rules


def test_the_corpus_covers_every_default_rule():
    assert {rule for rule, _ in SHAPED_SECRETS} == set(DEFAULT_PATTERNS)


@pytest.mark.parametrize(("key", "secret"), KEYED_SECRETS)
def test_secret_keys_are_redacted_whatever_the_value_looks_like(key, secret):
    out = Redactor().redact({"outer": {key: secret}})
    assert out.value == {"outer": {key: "[REDACTED:secret_key]"}}
    assert out.rules == {"secret_key": 1}


@pytest.mark.parametrize(
    "key",
    [
        "input_tokens",
        "max_tokens",
        "output_tokens",
        "cache_read_tokens",
        "token_count",
        "tokens",
        "auth_type",
        "password_required",
        "secret_name",
        "tokenizer",
        "author",
        "tool_name",
    ],
)
def test_token_counts_and_settings_are_not_secrets(key):
    payload = {key: "plain-value", "n": {key: 1200}}
    assert Redactor().redact(payload).value == payload


def test_numbers_under_secret_keys_are_kept_and_markers_are_final():
    redactor = Redactor()
    out = redactor.redact({"token": 7, "password": "", "api_key": "abc"})
    assert out.value == {"token": 7, "password": "", "api_key": "[REDACTED:secret_key]"}
    again = redactor.redact(out.value)
    assert again.value == out.value and again.count == 0


def test_configured_patterns_and_keys():
    redactor = Redactor.from_config('{"acme_key": "ACME-[0-9]{6}"}', "pin, otp_code")
    out = redactor.redact({"note": "use ACME-123456", "pin": "1234", "otpCode": "999"})
    assert out.value == {
        "note": "use [REDACTED:acme_key]",
        "pin": "[REDACTED:secret_key]",
        "otpCode": "[REDACTED:secret_key]",
    }
    listed = Redactor.from_config('["zz[0-9]+"]', None)
    assert listed.redact("a zz12 b").value == "a [REDACTED:custom_1] b"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[not a regex", "not JSON"),
        ('{"e": ""}', "pattern 'e' matches the empty string"),
        ('{"bad name": "x"}', "rule name 'bad name'"),
        ("3", "or an array of regexes is expected"),
        ("[1]", "a JSON array of regex strings is expected"),
        ('{"k": 1}', 'a JSON object {"name": "regex"} is expected'),
    ],
)
def test_bad_pattern_settings_are_refused_with_a_reason(text, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        checked_patterns(text)


def test_bad_key_settings_are_refused():
    with pytest.raises(ValueError, match="comma-separated key words"):
        checked_keys(" , ,")
    assert checked_keys("pin") == "pin"


def test_producers_redact_before_they_externalize():
    """A secret inside a value big enough to become a blob is gone from the blob."""
    secret = SHAPED_SECRETS[0][1]
    event = {
        "payload": {"output": ("line\n" * 300) + secret, "token": "tok-" + "9" * 20},
        "extensions": {"x.acme": {"authorization": "Basic abc"}},
    }
    done, blobs, rules = prepare_content(event)
    assert rules == {"pem_private_key": 1, "secret_key": 2}
    assert len(blobs) == 1 and all(secret.encode() not in b for b in blobs.values())
    assert b"[REDACTED:pem_private_key]" in next(iter(blobs.values()))
    assert done["extensions"] == {"x.acme": {"authorization": "[REDACTED:secret_key]"}}


def test_the_sequencer_settings_refuse_a_bad_pattern_naming_the_variable(monkeypatch, capsys):
    from laneledger.services.sequencer.__main__ import parse_args

    monkeypatch.setenv("LANELEDGER_REDACT_PATTERNS", '{"acme": "(unclosed"}')
    with pytest.raises(SystemExit) as stopped:
        parse_args([])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("laneledger-sequencer: LANELEDGER_REDACT_PATTERNS=") and "'acme'" in err
    monkeypatch.setenv("LANELEDGER_REDACT_PATTERNS", '{"acme": "(a|aa)+(?=b)"}')  # lookahead: not linear
    with pytest.raises(SystemExit) as stopped:
        parse_args([])
    assert stopped.value.code == 2
    assert NOT_LINEAR in capsys.readouterr().err
    monkeypatch.setenv("LANELEDGER_REDACT_PATTERNS", '["ACME-[0-9]+"]')
    monkeypatch.setenv("LANELEDGER_REDACT_KEYS", "pin")
    args = parse_args([])
    assert Redactor.from_config(args.redact_patterns, args.redact_keys).redact(
        {"pin": "1", "n": "ACME-7"}
    ).value == {"pin": "[REDACTED:secret_key]", "n": "[REDACTED:custom_1]"}


def test_the_sdk_reads_its_extras_from_the_environment():
    redactor = Redactor.from_env(
        {"LANELEDGER_REDACT_KEYS": "pin", "LANELEDGER_REDACT_PATTERNS": '{"badge": "BADGE-[0-9]+"}'}
    )
    assert redactor.redact({"pin": "12", "t": "BADGE-9"}).value == {
        "pin": "[REDACTED:secret_key]",
        "t": "[REDACTED:badge]",
    }


NOT_LINEAR = "'acme' cannot be run in linear time"


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("LANELEDGER_REDACT_PATTERNS", "nope", "not JSON"),
        ("LANELEDGER_REDACT_PATTERNS", '{"acme": "(unclosed"}', "'acme' is not a regex"),
        ("LANELEDGER_REDACT_PATTERNS", '["a*"]', "matches the empty string"),
        # RE2 runs configured patterns (linear time): what it cannot run is refused.
        ("LANELEDGER_REDACT_PATTERNS", '{"acme": "(?<=key=)[0-9]{8}"}', NOT_LINEAR),
        ("LANELEDGER_REDACT_PATTERNS", '{"acme": "(x+)\\\\1"}', NOT_LINEAR),
        ("LANELEDGER_REDACT_PATTERNS", '{"bad name!": "X-[0-9]+"}', "rule name 'bad name!'"),
        ("LANELEDGER_REDACT_KEYS", ", ,-", "comma-separated key words"),
    ],
)
def test_a_bad_sdk_redaction_variable_is_a_typed_error_naming_it(variable, value, problem):
    other = (
        {"LANELEDGER_REDACT_KEYS": "pin"}
        if variable.endswith("PATTERNS")
        else {"LANELEDGER_REDACT_PATTERNS": '["ACME-[0-9]+"]'}
    )  # a good neighbour is not blamed
    with pytest.raises(InvalidRequest) as caught:
        Redactor.from_env({variable: value, **other})
    err = caught.value
    assert err.details["variable"] == variable and err.details["value"] == value
    assert problem in err.details["problem"] and err.message.startswith(f"{variable}={value!r}: ")


async def test_an_sdk_client_refuses_a_bad_redaction_variable(nc, monkeypatch):
    from laneledger.sdk.client import LedgerClient
    from laneledger.sdk.content import default_redactor

    monkeypatch.setenv("LANELEDGER_REDACT_PATTERNS", '{"acme": "(unclosed"}')
    default_redactor.cache_clear()  # read once per process: read this environment
    try:
        with pytest.raises(InvalidRequest) as caught:
            LedgerClient(nc)
        assert caught.value.details["variable"] == "LANELEDGER_REDACT_PATTERNS"
        monkeypatch.setenv("LANELEDGER_REDACT_PATTERNS", '["ACME-[0-9]+"]')
        client = LedgerClient(nc)
        assert client.redactor.redact({"n": "ACME-7"}).value == {"n": "[REDACTED:custom_1]"}
    finally:
        default_redactor.cache_clear()  # not this test's environment for the next ones


# The fast path (``Redactor.surely_clean``) must never wave through what the
# full walk would change: each secret, alone and nested deep in lists and
# objects among clean values, is refused by it and redacted by ``redact``.
def _nestings(value: object) -> list[object]:
    return [value, [1, "plain words here", value], {"a": {"b": [None, 2.5, {"c": value}]}}]


@pytest.mark.parametrize(("rule", "secret"), SHAPED_SECRETS)
def test_the_fast_path_never_skips_a_shaped_secret(rule, secret):
    redactor = Redactor()
    for payload in _nestings({"log": f"calling with {secret} now", "n": 3}):
        assert not redactor.surely_clean(payload)
        assert needle(rule, secret) not in json.dumps(redactor.redact(payload).value)


@pytest.mark.parametrize(("key", "secret"), KEYED_SECRETS)
def test_the_fast_path_never_skips_a_secret_key(key, secret):
    redactor = Redactor()
    for payload in _nestings({key: secret}) + _nestings({key: [secret]}):
        assert not redactor.surely_clean(payload)
        assert secret not in json.dumps(redactor.redact(payload).value)


def test_every_hint_alone_sends_a_text_to_the_walk():
    """The fast path tests every hint (the case-sensitive ones as one
    alternation in a short text, one by one in a long one): each, anywhere
    in any gathered string, is doubt."""
    redactor = Redactor()
    assert redactor._prefilter is not None
    exact, folded = redactor._prefilter
    for hint in (*exact, *folded, *(h.upper() for h in folded)):
        for text in (f"before{hint}after", "x" * 5000 + hint):
            for payload in _nestings({"a": "clean words", "b": text}):
                assert not redactor.surely_clean(payload), hint
    assert redactor.surely_clean({"a": "clean words", "b": "before after"})
    assert redactor.surely_clean({"a": "clean words", "b": "x" * 5000})


def test_the_fast_path_passes_clean_payloads_unchanged_and_defers_to_configured_patterns():
    clean = {
        "model": "claude-sonnet",
        "input_tokens": 1200,
        "stop_reason": "tool_use",
        "tool": {"name": "Read", "args": {"file_path": "/src/app/module_1.py"}},
        "password": "",
        "token": 7,
        "tags": ["alpha", "beta", None, True],
    }
    redactor = Redactor()
    assert redactor.surely_clean(clean)
    out = redactor.redact(clean)
    assert out.value is clean and out.count == 0
    # A configured pattern has no literal hint: the walk always runs.
    custom = Redactor.from_config('{"acme_key": "ACME-[0-9]{6}"}', None)
    assert not custom.surely_clean({"note": "use ACME-123456"})
    assert custom.redact({"note": "use ACME-123456"}).value == {"note": "use [REDACTED:acme_key]"}
