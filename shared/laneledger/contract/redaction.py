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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import re2._re2 as re2_api  # type: ignore[import-untyped]

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

# Every shape runs in time linear in its text (spec/content.md, "Linear
# time"): a producer's string of any size costs the sequencer a bounded
# amount of CPU per byte. Most default shapes are linear as written under
# Python's backtracking engine (a candidate's run ends at a character its
# class excludes, so candidates' scans do not overlap); the three below are
# not, and run as equivalent forms that are (tests/test_redaction_linear.py
# checks them against the patterns above on random secret-laden text).
_TOKEN = "[A-Za-z0-9_-]"
# A JWT's first segment is the whole rest of its character run (``.`` ends
# it), so only a run's first candidate start need be tried: the atomic group
# commits to it, and the lookbehind starts one try per run instead of one per
# ``eyJ`` in it (``eyJ-eyJ-…`` was quadratic).
_JWT_LINEAR = (
    rf"(?<!{_TOKEN})(?>{_TOKEN}*?(?=\beyJ{_TOKEN}{{5}}))"
    rf"(?P<secret>eyJ{_TOKEN}{{5,}}+\.eyJ{_TOKEN}{{5,}}+\.{_TOKEN}{{10,}})"
)
# The PEM footer last in a text: a PEM block ends at a footer, so the
# pattern runs only up to the last one (a BEGIN with no END after it was a
# scan to the end of the text per BEGIN).
_PEM_LAST_FOOTER = re.compile(r"[\s\S]*-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----")
# secret_assignment runs case-sensitively on the text folded to lower case
# (Python's case-insensitive scan cost ~120 ms per MiB): the folding maps
# exactly the characters that match an ASCII letter case-insensitively
# (with ``İ`` ``ı`` -> ``i`` and ``ſ`` -> ``s``, which ``str.lower`` leaves
# or lengthens) and keeps every offset; the key words form a trie and the
# quantifiers that cannot give anything back are possessive.
_ASSIGNMENT_FOLDED = (
    r"(?:a(?:pi[_-]?key|uth(?:orization)?|ccess[_-]?key)|secrets?|"
    r"p(?:ass(?:words?|wd)|wd|rivate[_-]?key)|token|c(?:redentials?|ookie))"
    r"[\"']?+\s*+[:=]\s*+[\"']?+(?!\[redacted:)"
    r"(?P<secret>(?:(?:basic|bearer|token)\s++)?[^\s\"',;&]{6,}+)"
)


def fold_case(text: str) -> str:
    """``text`` in lower case, offset for offset, such that a character
    matches an ASCII letter case-insensitively (``re.IGNORECASE``) exactly
    when its folded form is that letter in lower case."""
    return text.replace("\u0130", "i").replace("\u0131", "i").replace("\u017f", "s").lower()


class Shape:
    """One rule's pattern, applied by ``subn``: the text with each match (or
    its ``secret`` group) replaced by the rule's marker, and the count."""

    def __init__(self, name: str, pattern: str, *, search_folded: bool = False) -> None:
        self.name = name
        self.regex = re.compile(pattern)
        self.marker = marker(name)
        self._folded = search_folded
        self._group = self.regex.groupindex.get("secret")  # only it is replaced

    def subn(self, text: str) -> tuple[str, int]:
        if self._group is None:
            return self.regex.subn(self.marker, text)
        group = self._group
        kept: list[str] = []  # what lies around the secrets, joined by markers
        keep = kept.append  # (the loop is most of the cost on a flood of matches)
        last = 0
        for match in self.regex.finditer(fold_case(text) if self._folded else text):
            start, end = match.span(group)
            keep(text[last:start])
            last = end
        if not kept:
            return text, 0
        keep(text[last:])
        return self.marker.join(kept), len(kept) - 1


class PemShape(Shape):
    """The PEM pattern, run only up to the text's last footer: there every
    BEGIN it tries has an END after it, so each try ends at the nearest one."""

    def subn(self, text: str) -> tuple[str, int]:
        last = _PEM_LAST_FOOTER.match(text)
        if last is None:
            return text, 0
        head, n = self.regex.subn(self.marker, text[: last.end()])
        return (head + text[last.end() :], n) if n else (text, 0)


class Re2Shape:
    """A configured pattern, run by RE2 (linear time in its input whatever
    the pattern: no backtracking) on the text's UTF-8 bytes."""

    def __init__(self, name: str, pattern: str) -> None:
        self.name = name
        self.marker = marker(name)
        self.regex = compile_re2(pattern)

    def subn(self, text: str) -> tuple[str, int]:
        data = text.encode("utf-8", "surrogatepass")
        kept: list[bytes] = []  # what lies around the matches, joined by markers
        keep, match = kept.append, self.regex.Match  # (the loop is the cost of a flood of matches)
        pos, end, last = 0, len(data), 0
        while pos <= end:
            start, stop = match(_RE2_UNANCHORED, data, pos, end)[0]
            if start < 0:
                break
            if stop == start:  # an empty match (``\b``): nothing to replace; on to the next character
                pos = stop + 1
                while pos < end and data[pos] & 0xC0 == 0x80:
                    pos += 1
                continue
            keep(data[last:start])
            pos = last = stop
        if not kept:
            return text, 0
        keep(data[last:])
        return self.marker.encode().join(kept).decode("utf-8", "surrogatepass"), len(kept) - 1


def compile_re2(pattern: str) -> Any:
    """``pattern`` compiled by RE2; ``ValueError`` naming what RE2 refuses
    (lookaround, backreferences, possessive quantifiers: what a linear-time
    engine cannot run)."""
    options = re2_api.RE2.Options()
    options.log_errors = False
    options.never_capture = True
    regex = re2_api.RE2(pattern.encode("utf-8", "surrogatepass"), options)
    if not regex.ok():
        error = regex.error()
        raise ValueError(error.decode(errors="replace") if isinstance(error, bytes) else str(error))
    return regex


_RE2_UNANCHORED = re2_api.RE2.Anchor.UNANCHORED


def default_shape(name: str) -> Shape:
    if name == "pem_private_key":
        return PemShape(name, DEFAULT_PATTERNS[name])
    if name == "jwt":
        return Shape(name, _JWT_LINEAR)
    if name == "secret_assignment":
        return Shape(name, _ASSIGNMENT_FOLDED, search_folded=True)
    return Shape(name, DEFAULT_PATTERNS[name])


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


# The longest gathered text tested with the hints' one alternation (see
# ``Redactor._exact_hints``): an event's strings are far shorter.
_ONE_SCAN_MAX = 4096


class Redactor:
    """Default shapes and key words plus configured extras."""

    def __init__(
        self, extra_patterns: Mapping[str, str] | Iterable[str] = (), extra_keys: Iterable[str] = ()
    ) -> None:
        if not isinstance(extra_patterns, Mapping):
            extra_patterns = {f"custom_{i}": p for i, p in enumerate(extra_patterns, 1)}
        extra_keys = tuple(extra_keys)
        # What it is made of: a copy is made of it again (``__reduce__``; a
        # compiled RE2 pattern cannot be pickled), in the sequencer's step 0
        # worker process (services/sequencer/prepworker.py: ``made_of``).
        self._made_of = (dict(extra_patterns), extra_keys)
        patterns = {**DEFAULT_PATTERNS}
        shapes: dict[str, Shape | Re2Shape] = {name: default_shape(name) for name in DEFAULT_PATTERNS}
        for name, pattern in extra_patterns.items():
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
                raise ValueError(f"redaction rule name {name!r}: use 1-64 of [A-Za-z0-9_.-]")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"redaction pattern {name!r} is not a regex: {exc}") from None
            try:
                shape = Re2Shape(name, pattern)
            except ValueError as exc:
                raise ValueError(f"redaction pattern {name!r} cannot be run in linear time: {exc}") from None
            if shape.regex.Match(_RE2_UNANCHORED, b"", 0, 0)[0][0] >= 0:
                raise ValueError(f"redaction pattern {name!r} matches the empty string")
            patterns[name] = pattern
            shapes[name] = shape
        self.patterns = patterns
        self.shapes = shapes  # how each rule runs, by name (bench/redaction.py times them)
        # (shape, hint): a configured pattern has no hint, it always runs.
        self._shapes = [
            (shape, _HINTS[shape.name] if isinstance(shape, Shape) else None) for shape in shapes.values()
        ]
        # Every hint at once: a string holding none skips all the patterns.
        # None when a configured pattern (no hint) must always run.
        self._prefilter: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        hints = [hint for _, hint in self._shapes if hint is not None]
        if len(hints) == len(self._shapes):
            self._prefilter = (
                tuple(s for h in hints if not h[0] for s in h[1]),
                tuple(s for h in hints if h[0] for s in h[1]),
            )
        # The case-sensitive hints as one alternation of literals: one scan of
        # a short gathered text instead of one per hint (a match exists
        # exactly when some hint occurs). Past _ONE_SCAN_MAX characters the
        # per-hint search is used: on a text built against it (1 MiB of "A")
        # the alternation costs 66 ms, the searches 15.
        self._exact_hints: re.Pattern[str] | None = None
        if self._prefilter is not None and self._prefilter[0]:
            self._exact_hints = re.compile("|".join(map(re.escape, self._prefilter[0])))
        extra = {"".join(key_words(k)) for k in extra_keys if key_words(k)}
        self.key_words = DEFAULT_KEY_WORDS | extra
        self._key_cache: dict[str, bool] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._made_of)

    @property
    def made_of(self) -> tuple[dict[str, str], tuple[str, ...]]:
        """``(extra_patterns, extra_keys)``: ``Redactor(*made_of)`` is a copy."""
        return self._made_of

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
        exact = self._prefilter[0]
        if len(joined) <= _ONE_SCAN_MAX and self._exact_hints is not None:
            if self._exact_hints.search(joined):
                return False
        else:
            for hint in exact:  # a plain loop, as below
                if hint in joined:
                    return False
        lower = joined.lower()
        for hint in self._prefilter[1]:  # noqa: SIM110 - a plain loop: half the cost of any() over a generator
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
                if type(key) is not str:
                    return False
                secret = self._key_cache.get(key)  # the method's own cache, without its call
                if secret is None:
                    secret = self.is_secret_key(key)
                if secret:
                    return False
            return True
        if kind is list:
            for item in value:  # noqa: SIM110 - a plain loop, as above
                if not self._gather(item, strings):
                    return False
            return True
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
        for shape, hint in self._shapes:
            if hint is not None:
                if hint[0]:
                    lower = text.lower() if lower is None else lower
                    haystack = lower
                else:
                    haystack = text
                if not any(s in haystack for s in hint[1]):
                    continue
            text, n = shape.subn(text)
            if n:
                rules[shape.name] = rules.get(shape.name, 0) + n
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
