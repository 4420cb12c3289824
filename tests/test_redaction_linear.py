"""Redaction in linear time (spec/content.md, "Linear time"): 1 MiB built to
hit each pattern's worst case redacts in <= 50 ms, and the linear forms of the
default patterns redact exactly as the patterns themselves do."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laneledger.contract.model import EnsureActor, ProposedCheckpoint
from laneledger.contract.redaction import (
    _HINTS,
    DEFAULT_PATTERNS,
    DEFAULT_REDACTOR,
    Redactor,
    marker,
    redact_checkpoint_state,
    redact_command,
)

MIB = 1 << 20
USER_PATTERNS = {"acme_key": r"\bACME-[0-9A-F]{8,}-[0-9]{4}\b"}
USER_MATCH_FLOOD = "ACME-01234567-0001 "

# Per rule, repeated units that hit its worst case under a backtracking
# engine (repeated prefixes, near-misses, long runs of the class) or its
# cost per match (the densest flood of matches: ``Pwd=abcdef `` is 95k).
ADVERSARIAL: dict[str, tuple[str, ...]] = {
    "pem_private_key": ("-----BEGIN PRIVATE KEY-----\n", "-----BEGIN A B C D PRIVATE KEY-----", "-----END "),
    "anthropic_api_key": ("sk-ant-", "sk-ant-abcdefghij.", "-"),
    "openai_api_key": ("sk-", "sk-proj-abc ", "-"),
    "stripe_key": ("sk_live_", "rk_test_abc ", "_live_"),
    "github_token": ("ghp_", "github_pat_abc ", "ghp_abcdefghij-"),
    "aws_access_key_id": ("AKIA", "AKIAABCDEFGHIJKLMNOPQ", "ASIA0123"),
    "google_api_key": ("AIza", "AIza0123456789-", "AIza-"),
    "slack_token": ("xoxb-", "xoxp-abc ", "xox"),
    "jwt": ("eyJ-", "eyJabcde.", "eyJabcde.eyJabcde.", "eyJabcde.eyJ-", "eyJabcde.eyJabcde.abcdefghij "),
    "bearer_token": ("Bearer ", "bearer \t", "Bearer abc "),
    "url_credentials": ("://", "://a:", "://a:b", "://user:pass", "://a:b@"),
    "secret_assignment": (
        "password=",
        "pwd= \t",
        "token: token ",
        "api_key='",
        "PWD=;",
        "secret" * 3,
        "Pwd=abcdef ",
    ),
    "acme_key": ("ACME-", "ACME-0123456789ABCDEF-", "ACME-0-123 "),
}


def fill(unit: str, size: int = MIB) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def cpu_ms(fn, runs: int = 3) -> float:
    """Best of ``runs`` in process CPU time: what the redaction itself costs,
    not the waits of a loaded 2-core CI machine shared with other jobs."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best * 1000


@pytest.mark.parametrize(
    ("rule", "unit"), [(rule, unit) for rule, units in ADVERSARIAL.items() for unit in units]
)
def test_a_mebibyte_built_against_a_pattern_redacts_within_50_ms(rule: str, unit: str) -> None:
    redactor = Redactor(USER_PATTERNS)
    shape = redactor.shapes[rule]
    text = fill(unit)
    assert cpu_ms(lambda: shape.subn(text)) <= 50, f"{rule} on {unit!r} * 1 MiB"


def test_a_configured_pattern_costs_a_bounded_time_per_match() -> None:
    """A configured rule runs on RE2 through its Python binding: one call per
    match (~0.9 us) on top of the linear scan. Its densest flood, 55k matches
    in 1 MiB, takes ~50 ms of CPU on a loaded 2-core machine, so the bound
    here is 100 ms: what is asserted is that the cost per match is bounded,
    not a figure (bench/redaction.py --adversarial prints it)."""
    shape = Redactor(USER_PATTERNS).shapes["acme_key"]
    text = fill(USER_MATCH_FLOOD)
    out, n = shape.subn(text)
    assert n == MIB // len(USER_MATCH_FLOOD) and "ACME-" not in out
    assert cpu_ms(lambda: shape.subn(text)) <= 100


def test_the_issue_input_redacts_whole_through_the_redactor_in_linear_time() -> None:
    """The issue's input: repeated BEGIN markers; before, 112 KB took 2.9 s."""
    text = fill("-----BEGIN PRIVATE KEY-----\n")
    assert Redactor().redact_text(text) == text
    assert cpu_ms(lambda: Redactor().redact_text(text)) <= 50
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"
    assert Redactor().redact_text(text + pem) == marker("pem_private_key")  # from the first BEGIN


def old_redact_text(text: str) -> tuple[str, dict[str, int]]:
    """Redaction as the patterns state it (what it was before the linear
    forms): each default pattern in turn where its hint is present."""
    rules: dict[str, int] = {}
    for name, pattern in DEFAULT_PATTERNS.items():
        exact, hints = _HINTS[name]
        haystack = text.lower() if exact else text
        if not any(h in haystack for h in hints):
            continue
        regex = re.compile(pattern)

        def sub(match: re.Match[str], name: str = name, regex: re.Pattern[str] = regex) -> str:
            if "secret" not in regex.groupindex:
                return marker(name)
            start, end = match.span("secret")
            whole = match.group(0)
            return whole[: start - match.start()] + marker(name) + whole[end - match.start() :]

        text, n = regex.subn(sub, text)
        if n:
            rules[name] = n
    return text, rules


FRAGMENTS = [
    "-----BEGIN ", "-----END ", "RSA ", "A1 ", "PRIVATE KEY-----", "\n", " ", "\t", "\u00a0",
    "eyJ", "abcde", "Zz9_", ".", "-", "_", "sk-", "ant-", "proj-", "sk_live_", "rk_test_",
    "ghp_", "github_pat_", "AKIA", "0123456789ABCDEF", "AIza", "xoxb-", "Bearer", "bearer",
    "://", "user", ":", "@", "/", "password", "PassWord", "pwd", "token", "Api-Key", "auth",
    "authorization", "cookie", "private_key", "access-key", "secrets", "=", "'", '"', ",", ";",
    "basic ", "[REDACTED:x]", "[redacted:", "İ", "ı", "ſ", "\u212a", "é", "0123456789",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=60))
def test_the_linear_forms_redact_exactly_as_the_patterns(parts: list[str]) -> None:
    text = "".join(parts)
    rules: dict[str, int] = {}
    assert (Redactor().redact_text(text, rules), rules) == old_redact_text(text)


# The issue's other two carriers of the same input: an actor's display name
# (a command the sequencer redacts) and a checkpoint's inline state (the
# checkpoint service redacts). Every default rule may run on such a string,
# so the bound is the rules' sum, still a small fraction of a lease's TTL.
ALL_RULES_MS = 50 * len(DEFAULT_PATTERNS)


def test_an_adversarial_display_name_redacts_in_linear_time() -> None:
    name = fill("-----BEGIN PRIVATE KEY-----\n") + fill("eyJ-", MIB // 4)
    cmd = EnsureActor(tenant="acme", key="agent-1", kind="agent", display_name=name)
    done, rules = redact_command(cmd, DEFAULT_REDACTOR)
    assert done.display_name == name and rules == {}
    assert cpu_ms(lambda: redact_command(cmd, DEFAULT_REDACTOR)) <= ALL_RULES_MS


def test_adversarial_inline_checkpoint_state_redacts_in_linear_time() -> None:
    state = {"notes": fill("eyJabcde.eyJ-"), "log": fill("password= \t", MIB // 4)}
    proposal = ProposedCheckpoint(id="cp-1", key="k", format="application/json", state=state)
    done, rules = redact_checkpoint_state(proposal, DEFAULT_REDACTOR)
    assert set(rules) == {"jwt", "secret_assignment"} and done.state != state
    assert cpu_ms(lambda: redact_checkpoint_state(proposal, DEFAULT_REDACTOR)) <= ALL_RULES_MS


# Configured patterns that mean the same to RE2 and to Python's engine on
# ASCII text (RE2's \b \w \s \d are ASCII; spec/content.md).
SAME_IN_BOTH = [r"\bACME-[0-9A-F]{8,}-[0-9]{4}\b", r"(?i)badge[ :=]+\w{6,}", r"x[a-c]*y|ab+c", r"\d{3}-\d{4}"]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(SAME_IN_BOTH),
    st.lists(
        st.sampled_from(
            ["ACME-", "0123456789ABCDEF", "-", "1234", " ", "Badge", "=", "xy", "abbbc", "x", "c"]
        )
        | st.text(alphabet=st.characters(max_codepoint=127), max_size=4),
        max_size=40,
    ),
)
def test_a_configured_pattern_replaces_what_pythons_engine_would(pattern: str, parts: list[str]) -> None:
    text = "".join(parts)
    assert Redactor({"rule": pattern}).shapes["rule"].subn(text) == re.subn(pattern, marker("rule"), text)
