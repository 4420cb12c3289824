"""Redaction: secret-shaped values never reach a hash, a blob or a disk.

The pure rule (normative text: ``spec/content.md``, "Redaction"). A value is
secret by its **key** (``api_key``, ``password``, ``Authorization``, …; a
token *count* such as ``input_tokens`` is not) or by its **shape** (provider
API keys, GitHub and cloud keys, bearer tokens, JWTs, PEM private keys). A
secret is replaced by ``[REDACTED:<rule>]``; a marker never matches a rule
again, so redacting twice changes nothing and counts nothing (the SDK
redacts, then the sequencer redacts what arrives).

Extra shapes and key words come from configuration (``LANELEDGER_REDACT_PATTERNS``,
``LANELEDGER_REDACT_KEYS``).
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from laneledger.contract.errors import InvalidRequest
from laneledger.contract.model import ProposedCheckpoint

MARKER_PREFIX = "[REDACTED:"
_MARKER = re.compile(r"^\[REDACTED:[A-Za-z0-9_.-]{1,64}\]$")
KEY_RULE = "secret_key"

# Value shapes, most specific first: a match is replaced where it stands, so
# a log line keeps its words and loses only the secret.
DEFAULT_PATTERNS: dict[str, str] = {
    "pem_private_key": (
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----"
    ),
    "anthropic_api_key": r"\bsk-ant-[A-Za-z0-9_-]{20,}",
    "openai_api_key": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    "stripe_key": r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
    "aws_access_key_id": r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b",
    "google_api_key": r"\bAIza[0-9A-Za-z_-]{35}",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    "jwt": r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}",
    "bearer_token": r"\b(?i:bearer)\s+[A-Za-z0-9._~+/-]{16,}=*",
    "url_credentials": r"(?<=://)[^/\s:@]+:[^/\s@]+@",
    # A secret-named key assigned in text (``password=…``, ``"api_key": "…"``,
    # a .env line, JSON inside a string): only the value is replaced.
    "secret_assignment": (
        r"(?i:(?:api[_-]?key|secrets?|passwords?|passwd|pwd|token|"
        r"credentials?|authorization|auth|cookie|private[_-]?key|access[_-]?key)"
        r"[\"']?\s*[:=]\s*[\"']?(?!\[REDACTED:)"
        r"(?P<secret>(?:(?:basic|bearer|token)\s+)?[^\s\"',;&]{6,}))"
    ),
}

# Literal hints of the default shapes: a pattern runs only on a string that
# holds one of them (Python's regex engine scans slowly for these shapes; a
# substring test is C speed). ``True``: compared case-insensitively.
_HINTS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "pem_private_key": (False, ("PRIVATE KEY",)),
    "anthropic_api_key": (False, ("sk-ant-",)),
    "openai_api_key": (False, ("sk-",)),
    "stripe_key": (False, ("_live_", "_test_")),
    "github_token": (False, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    "aws_access_key_id": (False, ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA")),
    "google_api_key": (False, ("AIza",)),
    "slack_token": (False, ("xox",)),
    "jwt": (False, ("eyJ",)),
    "bearer_token": (True, ("bearer",)),
    "url_credentials": (False, ("://",)),
    "secret_assignment": (True, ("key", "secret", "pass", "pwd", "token", "credential", "auth", "cookie")),
}

# Key words that make a key secret. A key is split into words at ``_``, ``-``,
# ``.``, spaces and camelCase humps; ``apiKey``/``api_key``/``x-api-key`` all
# have the words ``api`` ``key``. Plural ``tokens`` is deliberately absent:
# ``input_tokens``/``max_tokens`` are counts.
DEFAULT_KEY_WORDS: frozenset[str] = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "secret",
        "secrets",
        "token",
        "apikey",
        "authorization",
        "auth",
        "credential",
        "credentials",
        "cookie",
        "privatekey",
        "accesskey",
        "secretkey",
        "sessionkey",
        "clientsecret",
    }
)
# Adjacent word pairs that join into one key word (``api_key`` -> ``apikey``).
_JOINED = frozenset({"apikey", "privatekey", "accesskey", "secretkey", "sessionkey", "clientsecret"})
# A key holding one of these words names a number or a setting about tokens,
# not a secret: ``token_count``, ``max_token``, ``token_limit``, ``auth_type``.
_NOT_SECRET_WORDS = frozenset(
    {
        "count",
        "counts",
        "limit",
        "limits",
        "max",
        "min",
        "num",
        "number",
        "total",
        "usage",
        "used",
        "budget",
        "length",
        "len",
        "type",
        "kind",
        "expires",
        "expiry",
        "ttl",
        "url",
        "uri",
        "endpoint",
        "name",
        "required",
        "enabled",
        "method",
        "scheme",
        "status",
    }
)
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def key_words(key: str) -> list[str]:
    return [w.lower() for w in _SPLIT.split(_HUMP.sub(" ", key)) if w]


def is_marker(value: Any) -> bool:
    return isinstance(value, str) and _MARKER.match(value) is not None


def marker(rule: str) -> str:
    return f"{MARKER_PREFIX}{rule}]"


@dataclass(frozen=True)
class Redacted:
    value: Any
    count: int  # secrets replaced
    rules: dict[str, int] = field(default_factory=dict)  # how many per rule


class Redactor:
    """Default shapes and key words plus configured extras."""

    def __init__(
        self, extra_patterns: Mapping[str, str] | Iterable[str] = (), extra_keys: Iterable[str] = ()
    ) -> None:
        if not isinstance(extra_patterns, Mapping):
            extra_patterns = {f"custom_{i}": p for i, p in enumerate(extra_patterns, 1)}
        patterns = {**DEFAULT_PATTERNS}
        for name, pattern in extra_patterns.items():
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
                raise ValueError(f"redaction rule name {name!r}: use 1-64 of [A-Za-z0-9_.-]")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"redaction pattern {name!r} is not a regex: {exc}") from None
            if re.search(pattern, ""):
                raise ValueError(f"redaction pattern {name!r} matches the empty string")
            patterns[name] = pattern
        self.patterns = patterns
        # (name, compiled, hint): a configured pattern has no hint, it always runs.
        self._shapes = [
            (
                name,
                re.compile(p),
                _HINTS.get(name) if name in DEFAULT_PATTERNS and p == DEFAULT_PATTERNS[name] else None,
            )
            for name, p in patterns.items()
        ]
        # Every hint at once: a string holding none skips all the patterns.
        # None when a configured pattern (no hint) must always run.
        self._prefilter: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        hints = [hint for _, _, hint in self._shapes if hint is not None]
        if len(hints) == len(self._shapes):
            self._prefilter = (
                tuple(s for h in hints if not h[0] for s in h[1]),
                tuple(s for h in hints if h[0] for s in h[1]),
            )
        extra = {"".join(key_words(k)) for k in extra_keys if key_words(k)}
        self.key_words = DEFAULT_KEY_WORDS | extra
        self._key_cache: dict[str, bool] = {}

    @classmethod
    def from_config(cls, patterns: str | None, keys: str | None) -> Redactor:
        """From the settings' text: ``patterns`` a JSON object ``{"name": "regex"}``
        or array of regexes; ``keys`` comma-separated key words. Raises
        ``ValueError`` naming what is wrong."""
        extra: Mapping[str, str] | list[str] = {}
        if patterns:
            try:
                extra = json.loads(patterns)
            except ValueError as exc:
                raise ValueError(f"not JSON: {exc}") from None
            if isinstance(extra, list):
                if not all(isinstance(p, str) for p in extra):
                    raise ValueError("a JSON array of regex strings is expected")
            elif isinstance(extra, dict):
                if not all(isinstance(p, str) for p in extra.values()):
                    raise ValueError('a JSON object {"name": "regex"} is expected')
            else:
                raise ValueError('a JSON object {"name": "regex"} or an array of regexes is expected')
        words = [k.strip() for k in (keys or "").split(",") if k.strip()]
        return cls(extra, words)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Redactor:
        """What the SDK uses by default: the same ``LANELEDGER_REDACT_*``
        variables the services read, checked as their settings check them. A
        bad value raises ``InvalidRequest`` naming the variable (details
        ``variable``, ``value``, ``problem``)."""
        texts: dict[str, str | None] = {}
        for variable, check in (
            ("LANELEDGER_REDACT_PATTERNS", checked_patterns),
            ("LANELEDGER_REDACT_KEYS", checked_keys),
        ):
            text = texts[variable] = environ.get(variable)
            if text is None:
                continue
            try:
                check(text)
            except ValueError as exc:
                raise InvalidRequest(
                    f"{variable}={text!r}: {exc}", variable=variable, value=text, problem=str(exc)
                ) from None
        return cls.from_config(texts["LANELEDGER_REDACT_PATTERNS"], texts["LANELEDGER_REDACT_KEYS"])

    # -------------------------------------------------------------- the rule

    def is_secret_key(self, key: str) -> bool:
        found = self._key_cache.get(key)
        if found is None:
            words = key_words(key)
            joined = set(words) | {a + b for a, b in itertools.pairwise(words) if a + b in _JOINED}
            joined.add("".join(words))
            found = bool(joined & self.key_words) and not (set(words) & _NOT_SECRET_WORDS)
            if len(self._key_cache) < 4096:
                self._key_cache[key] = found
        return found

    def redact(self, value: Any) -> Redacted:
        if self.surely_clean(value):
            return Redacted(value, 0, {})
        rules: dict[str, int] = {}
        out = self._walk(value, rules)
        return Redacted(out, sum(rules.values()), rules)

    def surely_clean(self, value: Any) -> bool:
        """The fast path: True when ``value`` surely holds no secret, i.e. no
        secret-named key and not one hint of a shape in any of its strings.
        The strings are gathered and tested joined, once, instead of one
        hint test per string (most of redaction's cost on a typical payload);
        any doubt (a hint, a secret key, a configured pattern, an unusual
        type) returns False and the full walk decides."""
        if self._prefilter is None:
            return False
        strings: list[str] = []
        if not self._gather(value, strings):
            return False
        joined = "\0".join(strings)  # a hint found across it only costs the walk
        exact, folded = self._prefilter
        for hint in exact:  # a plain loop: half the cost of any() over a generator
            if hint in joined:
                return False
        lower = joined.lower()
        for hint in folded:  # noqa: SIM110 - a plain loop, as above
            if hint in lower:
                return False
        return True

    def _gather(self, value: Any, strings: list[str]) -> bool:
        """Collect the strings of ``value`` that a shape could match (6+
        characters); False at a secret-named key or a type ``_walk`` would
        treat otherwise than the exact JSON types."""
        kind = type(value)
        if kind is str:
            if len(value) >= 6:
                strings.append(value)
            return True
        if kind is dict:
            for key, item in value.items():
                kind = type(item)
                if kind is str:
                    if len(item) >= 6:
                        strings.append(item)
                    elif not item:
                        continue  # an empty value is kept under any key
                elif kind is dict or kind is list:
                    if not self._gather(item, strings):
                        return False
                elif item is None or kind is int or kind is float or kind is bool:
                    continue
                else:
                    return False
                if type(key) is not str or self.is_secret_key(key):
                    return False
            return True
        if kind is list:
            return all(self._gather(item, strings) for item in value)
        return value is None or kind is int or kind is float or kind is bool

    def redact_text(self, text: str, rules: dict[str, int] | None = None) -> str:
        rules = {} if rules is None else rules
        if len(text) < 6:  # no rule matches fewer than 6 characters
            return text
        lower: str | None = None
        if self._prefilter is not None:
            lower = text.lower()
            if not (
                any(s in text for s in self._prefilter[0]) or any(s in lower for s in self._prefilter[1])
            ):
                return text
        if is_marker(text):
            return text
        for name, shape, hint in self._shapes:
            if hint is not None:
                if hint[0]:
                    lower = text.lower() if lower is None else lower
                    haystack = lower
                else:
                    haystack = text
                if not any(s in haystack for s in hint[1]):
                    continue
            replacement = marker(name)
            replace: str | Callable[[re.Match[str]], str] = replacement
            if "secret" in shape.groupindex:  # replace only the named part
                replace = _keep_around(shape.groupindex["secret"], replacement)
            text, n = shape.subn(replace, text)
            if n:
                rules[name] = rules.get(name, 0) + n
        return text

    def _walk(self, value: Any, rules: dict[str, int]) -> Any:
        if isinstance(value, str):
            return self.redact_text(value, rules)
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if (
                    isinstance(item, (str, dict, list))
                    and not is_marker(item)
                    and isinstance(key, str)
                    and self.is_secret_key(key)
                    and item != ""
                ):
                    out[key] = marker(KEY_RULE)
                    rules[KEY_RULE] = rules.get(KEY_RULE, 0) + 1
                else:
                    out[key] = self._walk(item, rules)
            return out
        if isinstance(value, list):
            return [self._walk(item, rules) for item in value]
        return value  # numbers, booleans, null: never a secret by shape


def _keep_around(group: int, replacement: str) -> Callable[[re.Match[str]], str]:
    def sub(match: re.Match[str]) -> str:
        start, end = match.span(group)
        whole = match.group(0)
        return whole[: start - match.start()] + replacement + whole[end - match.start() :]

    return sub


DEFAULT_REDACTOR = Redactor()


# What of an event is redacted: the producer's free-form JSON. The other
# fields are ids, types and timestamps the schema constrains.
REDACTED_FIELDS = ("payload", "extensions")


def redact_event(event: dict[str, Any], redactor: Redactor) -> tuple[dict[str, Any], dict[str, int]]:
    """``(event with payload and extensions redacted, count per rule)``; the
    event itself when nothing was secret."""
    rules: dict[str, int] = {}
    out = event
    for name in REDACTED_FIELDS:
        value = event.get(name)
        if value is None or redactor.surely_clean(value):
            continue
        done = redactor.redact(value)
        if done.count:
            if out is event:
                out = dict(event)
            out[name] = done.value
            for rule, n in done.rules.items():
                rules[rule] = rules.get(rule, 0) + n
    return out, rules


# The strings of an event that name things (ids, its type): they cannot be
# redacted (a replaced id would name something else), so a secret-shaped one
# is refused instead.
EVENT_IDENTIFIERS = ("id", "subject_id", "event_type", "actor_id", "causation_id")


def identifier_refusal(value: Any, redactor: Redactor) -> str | None:
    """The rule a secret-shaped identifier matches, or None (not a string,
    or clean)."""
    if not isinstance(value, str) or redactor.surely_clean(value):
        return None
    done = redactor.redact(value)
    return next(iter(done.rules), None) if done.count else None


def refuse_secret_identifiers(
    fields: Mapping[str, Any], names: Iterable[str], redactor: Redactor, *, at: str
) -> None:
    """``InvalidRequest`` naming the first of ``names`` whose value in
    ``fields`` is secret-shaped (``at``: the JSONPath of ``fields``)."""
    names = tuple(names)
    if redactor.surely_clean([fields.get(name) for name in names]):
        return  # the fast path: one look at all of them
    for name in names:
        rule = identifier_refusal(fields.get(name), redactor)
        if rule is not None:
            raise InvalidRequest(
                f"{name} is secret-shaped ({rule}): an identifier cannot be redacted, so it is refused",
                path=f"{at}.{name}",
                rule=rule,
            )


# Commands (spec/content.md, "Redaction"): per op, the free-form fields a
# producer supplies, redacted like a payload before anything is stored, and
# the identifiers, refused when secret-shaped. Every other command field is
# an id the ledger checks, a number, or one of a closed set of values.
COMMAND_FREE_FORM: Mapping[str, tuple[str, ...]] = {"ensure_actor": ("display_name", "attributes")}
COMMAND_IDENTIFIERS: Mapping[str, tuple[str, ...]] = {
    "ensure_actor": ("key", "kind"),
    "create_lane": ("session_id", "run_id", "name", "kind"),
    "create_action": ("action_type", "name", "idempotency_key"),
}

S = TypeVar("S", bound=msgspec.Struct)


def redact_command(cmd: S, redactor: Redactor) -> tuple[S, dict[str, int]]:
    """``(cmd with its free-form fields redacted, count per rule)``, after
    refusing a secret-shaped identifier (``InvalidRequest`` naming it)."""
    op = str(cmd.__struct_config__.tag)
    refuse_secret_identifiers(
        {name: getattr(cmd, name) for name in COMMAND_IDENTIFIERS.get(op, ())},
        COMMAND_IDENTIFIERS.get(op, ()),
        redactor,
        at="$",
    )
    rules: dict[str, int] = {}
    changed: dict[str, Any] = {}
    for name in COMMAND_FREE_FORM.get(op, ()):
        value = getattr(cmd, name)
        if value is None or redactor.surely_clean(value):
            continue
        done = redactor.redact(value)
        if done.count:
            changed[name] = done.value
            for rule, n in done.rules.items():
                rules[rule] = rules.get(rule, 0) + n
    return (msgspec.structs.replace(cmd, **changed) if changed else cmd), rules


# A checkpoint (spec/checkpoint.md): its inline state is the producer's
# free-form JSON; its key and format name things.
CHECKPOINT_IDENTIFIERS = ("id", "key", "format", "session_id", "run_id")


def redact_checkpoint_state(
    proposal: ProposedCheckpoint, redactor: Redactor
) -> tuple[ProposedCheckpoint, dict[str, int]]:
    """A ``ProposedCheckpoint`` with its inline state redacted (its content
    digest is taken after), after refusing a secret-shaped identifier."""
    refuse_secret_identifiers(
        {name: getattr(proposal, name) for name in CHECKPOINT_IDENTIFIERS},
        CHECKPOINT_IDENTIFIERS,
        redactor,
        at="$.checkpoint",
    )
    state = proposal.state
    if state is None or redactor.surely_clean(state):
        return proposal, {}
    done = redactor.redact(state)
    if not done.count:
        return proposal, {}
    return msgspec.structs.replace(proposal, state=done.value), dict(done.rules)


def checked_patterns(text: str) -> str:
    """Parse function of the ``--redact-patterns`` setting: the text, once it
    is known to build a Redactor (``ValueError`` naming the fault otherwise)."""
    Redactor.from_config(text, None)
    return text


def checked_keys(text: str) -> str:
    """Parse function of the ``--redact-keys`` setting."""
    if not any(key_words(k) for k in text.split(",")):
        raise ValueError("comma-separated key words, e.g. 'pin,otp_code'")
    return text
