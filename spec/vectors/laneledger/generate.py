"""Write the laneledger vectors of this folder from the Python implementation.

    .venv/bin/python spec/vectors/laneledger/generate.py          # rewrite them
    .venv/bin/python spec/vectors/laneledger/generate.py --check  # fail if stale

Every SDK reads them (tests/test_sdk_vectors.py, sdk-ts/test/vectors.test.ts):
a rule whose output changes changes these files, and the other SDK's tests
then say where it no longer agrees. Inputs are JSON texts, so each language
parses the same value itself (numbers and lone surrogates included).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

from laneledger.adapters.langgraph_records import ns_key, record_id, thread_key, writes_key
from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import GENESIS_HASH, append_digest, erased_form, link
from laneledger.contract.contentref import externalize, refs_in
from laneledger.contract.errors import LedgerError
from laneledger.contract.redaction import Redactor, redact_event
from laneledger.contract.signing import load_private_key, public_key_hex, sign_event
from laneledger.contract.subjects import Subjects, inbox_prefix, tenant_headers, token
from laneledger.sdk.blobstore import bucket_name, tenant_bucket_name, tenant_uploads_bucket_name

HERE = Path(__file__).resolve().parent

CANONICAL_INPUTS = [
    "null",
    "true",
    "false",
    "0",
    "-0.0",
    "1.0",
    "0.25",
    "-1.5",
    "0.000001",
    "1e-7",
    "1e15",
    "1e21",
    "1e22",
    "5e-324",
    "1.7976931348623157e308",
    "123456789.123456789",
    "9007199254740991",
    "-9007199254740991",
    "0.1",
    "100",
    "1e-5",
    "3.0e2",
    '"a\\"b\\\\c/\\u0008\\u000c\\n\\r\\t\\u0000\\u001f\\u007f\\u2028\\u2029"',
    '"\\ud83d\\ude00 caf\\u00e9 \\u00ff"',
    '{"b": 1, "a": 2, "aa": 3, "": 0, "A": 4}',
    '{"\\ufb01": 1, "\\ud83d\\ude00": 2, "\\u00e9": 3, "z": 4}',
    '[1, [2, [3, {}]], [], {"x": [null, true]}]',
    '{"payload": {"items": [{"x": 0.5}, {"y": "z"}]}, "n": -12}',
    # refusals
    "9007199254740992",
    "-9007199254740993",
    "1e20",
    "123456789012345678901",
    '"\\ud800"',
    '{"a": {"b c": ["\\udfff"]}}',
    '{"k\\udc00": 1}',
    '{"ok": [1, 2, {"deep": 1e16}]}',
]


def canonical_vectors() -> list[dict[str, Any]]:
    out = []
    for text in CANONICAL_INPUTS:
        value = json.loads(text)
        try:
            out.append({"json": text, "canonical": canonicalize(value).decode("utf-8")})
        except LedgerError as exc:
            out.append({"json": text, "refused": exc.details})
    return out


LANE = "018f0c2a-0000-7000-8000-00000000000a"


def chain_vector() -> dict[str, Any]:
    events = [
        {
            "schema_version": "1.0",
            "id": f"018f0c2a-0000-7000-8000-0000000001{i:02d}",
            "lane_id": LANE,
            "subject_id": LANE,
            "event_type": "note.acme.step" if i != 2 else "lane.created",
            "actor_id": "018f0c2a-0000-7000-8000-000000000001",
            "occurred_at": f"2026-01-02T03:04:0{i}.5Z",
            "payload": {"i": i, "text": "héllo \U0001f600", "ratio": i / 3},
            "extensions": {},
        }
        for i in range(1, 4)
    ]
    events[2]["signature"] = "ab" * 64  # left out of the entry hash preimage
    digest = append_digest(events)
    chains: dict[str, list[dict[str, Any]]] = {}
    for name, key in (("plain", None), ("hmac", b"laneledger-vector-key")):
        prev, records = GENESIS_HASH, []
        for seq, event in enumerate(events, start=1):
            committed = {
                **event,
                "tenant": "acme",
                "session_id": "s1",
                "run_id": "r1",
                "seq": seq,
                "position": 40 + seq,
                "append_id": "018f0c2a-0000-7000-8000-0000000000ff",
                "committed_at": "2026-01-02T03:04:09.123456Z",
            }
            record = link(committed, prev, key=key)
            records.append(record)
            prev = record["entry_hash"]
        chains[name] = records
    # Sealed (spec/canonical.md §3): each event's content under a salt of its
    # own (here made from its seq, so the vector is reproducible); then the
    # second one erased (spec/erasure.md), with the same entry hashes.
    prev, sealed = GENESIS_HASH, []
    for record in chains["plain"]:
        salt = hashlib.sha256(b"laneledger-vector-salt-%d" % record["seq"]).hexdigest()
        base = {k: v for k, v in record.items() if k not in ("prev_hash", "entry_hash")}
        sealed.append(link({**base, "content_salt": salt}, prev))
        prev = sealed[-1]["entry_hash"]
    mark = {"position": 99, "event_id": "018f0c2a-0000-7000-8000-000000000199"}
    erased = [sealed[0], erased_form(sealed[1], mark), sealed[2]]
    return {
        "events": events,
        "digest": digest,
        "hmac_key": "laneledger-vector-key",
        "plain": chains["plain"],
        "hmac": chains["hmac"],
        "sealed": sealed,
        "sealed_erased": erased,
    }


SIGNING_SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"  # RFC 8032 test 1


def signing_vector() -> dict[str, Any]:
    """ed25519 over the canonical bytes of the proposed event without
    ``signature`` (and, for a committed one, without the ledger's fields)."""
    key = load_private_key(SIGNING_SEED)
    events = chain_vector()["events"][:2]
    return {
        "private_key_seed": SIGNING_SEED,
        "public_key": public_key_hex(key),
        "signed": [sign_event({k: v for k, v in e.items() if k != "signature"}, key) for e in events],
    }


SUBJECT_IDS = [
    "acme",
    "Acme-Corp-42",
    "acme.corp",
    "sess 42",
    "a" * 64,
    "a" * 65,
    "",
    "t_1",
    "caf\u00e9",
    "x>y*",
]


def subjects_vector() -> list[dict[str, Any]]:
    """How ids become subject tokens, inboxes, command subjects and buckets."""
    out = []
    for prefix in ("ledger", "acme.prod"):
        subjects = Subjects(prefix)
        for value in SUBJECT_IDS:
            out.append(
                {
                    "prefix": prefix,
                    "id": value,
                    "token": token(value),
                    "inbox_prefix": inbox_prefix(value),
                    "tenant_headers": tenant_headers(value),
                    "append": subjects.append(value, "lane 1"),
                    "command": subjects.command("get_lane", value),
                    "command_trusted": subjects.command("get_lane"),
                    "blob_bucket": bucket_name(subjects),
                    "tenant_blob_bucket": tenant_bucket_name(token(value), subjects),
                    "uploads_bucket": tenant_uploads_bucket_name(token(value), subjects),
                }
            )
    return out


LANGGRAPH_IDS = [
    ("t-1", "", "1ef4f797-8335-6428-8001-8a1503f9b875"),
    ("a/b c!*(\u00e9)~", "parent:3f2c|child", "1ef"),
    ("%2F", "/", "x"),
]


def langgraph_vector() -> list[dict[str, Any]]:
    """The LangGraph savers' keys and record ids (spec/langgraph.md)."""
    return [
        {
            "thread_id": thread,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint,
            "thread_key": thread_key(thread),
            "ns_key": ns_key(thread, ns),
            "record_id": record_id(thread, ns, checkpoint),
            "writes_key": writes_key(thread, ns, checkpoint),
        }
        for thread, ns, checkpoint in LANGGRAPH_IDS
    ]


def _content_payloads() -> list[dict[str, Any]]:
    big = "x" * 1500
    return [
        {"small": "y" * 100},
        {"text": big},
        {"exact": "z" * 1024, "over": "z" * 1025},
        {"args": {"file_path": "a.py", "content": big}, "n": 1},
        {"file_path": "p" * 3000, "nested": {"path": "q" * 2000}},
        {"list": [big, "small", big], "obj": {"a": "é" * 600}},
        {"many": [{"k": i, "v": "w" * 30} for i in range(60)]},
        {
            "payload_refs": [
                {"sha256": "00" * 32, "size_bytes": 1, "label": "x", "media_type": "text/plain"}
            ],
            "t": big,
        },
        {"already": {"_ref": "sha256:" + "ab" * 32, "size_bytes": 2000}, "f": 0.5},
        {"deep": {"a": {"b": {"c": big, "d": [big + "!"]}}}},
    ]


def content_vectors() -> list[dict[str, Any]]:
    out = []
    for payload in _content_payloads():
        done = externalize(payload)
        out.append(
            {
                "payload": payload,
                "externalized": done.payload,
                "blobs": {ref: base64.b64encode(data).decode() for ref, data in done.blobs.items()},
                "refs": [[ref, size] for ref, size in refs_in(done.payload)],
            }
        )
    return out


REDACTION_TEXTS = [
    "plain words, nothing secret",
    "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123 in text",
    "openai sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX and sk-short",
    "stripe sk_live_abcdefghijklmnop1234 rk_test_ABCDEFGHIJKLMNOPQ",
    "gh ghp_abcdefghijklmnopqrstuvwxyz0123456789 github_pat_abcdefghijklmnopqrstuvwxyz",
    "aws AKIAABCDEFGHIJKLMNOP and AKIAABCDEFGHIJKLMNOPQ (too long)",
    "google AIzaSyA-abcdefghijklmnopqrstuvwxyz012345",
    "slack xoxb-1234567890-abcdef",
    "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijklmnop done",
    "two jwts eyJaaaaa-eyJbbbbbb.eyJcccccc.dddddddddddd x-eyJeeeee.eyJffffff.gggggggggggg",
    "Authorization: Bearer abcdefghijklmnop0123456789==",
    "BEARER    abcdefghijklmnopqrst and bearer short",
    "postgres://user:hunter2secret@db.example.com:5432/app",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY----- after",
    "-----BEGIN PRIVATE KEY----- no end here",
    "password=hunter2hunter2 api_key: 'abcdef123456' token=\"zzzzzzzz\"",
    'PASSWORD = "correct horse battery"; Secret:abcdefgh',
    "auth=bearer abcdefghij and authorization=token qwertyuiop",
    "\u017fecret=abcdefghij (long s) \u0131 PASSWORD=abcdefghij",
    "api_key=[REDACTED:secret_assignment] stays",
    "[REDACTED:jwt]",
    "[REDACTED:jwt]\n",
    "caf\u00e9sk-ant-api03-abcdefghijklmnopqrstuvwxyz (unicode word before)",
    "\u00e9AKIAABCDEFGHIJKLMNOP\u00e9 and _AKIAABCDEFGHIJKLMNOP",
    "bearer\x1cabcdefghijklmnopqrstuvwxyz (python whitespace)",
    "bearer\ufeffabcdefghijklmnopqrstuvwxyz (not python whitespace)",
    "password=\u3000abcdefgh and token\x85=abcdefghij",
    "\U0001f600 token=\U0001f600\U0001f600\U0001f600\U0001f600\U0001f600\U0001f600 emoji",
    "\u212aey=abcdefghij (kelvin sign)",
    "api\u212aey=abcdefghij and \u0130ndex token\u0130=abcdefghij",
    "cookie=abc",
    "see https://example.com/path?token=abcdefgh&x=1",
]

REDACTION_VALUES: list[Any] = [
    {"api_key": "abc", "apiKey": "abcdef", "x-api-key": ["a"], "input_tokens": 5, "max_tokens": "100"},
    {"password": "", "token_count": "12", "auth_type": "basic", "Authorization": {"a": 1}},
    {"session_key": "s", "clientSecret": "c", "private.key": "p", "accessKey": 7, "secret": None},
    {"nested": [{"token": "t"}, {"note": "password=abcdefghij"}], "ok": True},
    {"cookie": "[REDACTED:secret_key]", "credentials": "[REDACTED:x]\n", "pwd": "[redacted:x]"},
    {"passphrase": "pp", "tokenUrl": "https://x", "secretName": "s", "secrets": {"a": "b"}},
    {"authToken": "t", "auth_header_name": "n", "AUTH": "x", "myPasswordHint": "h"},
    [
        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123",
        1,
        2.5,
        None,
        {"k": "AIzaSyA-abcdefghijklmnopqrstuvwxyz012345"},
    ],
]


# Pieces random texts are made of: the rules' words, separators and the
# characters where Python's regex semantics differ from other engines'
# (Unicode word characters and whitespace, case folding).
_PIECES = [
    "sk-ant-",
    "sk-",
    "proj-",
    "sk_live_",
    "rk_test_",
    "ghp_",
    "github_pat_",
    "AKIA",
    "AIza",
    "xoxb-",
    "eyJ",
    "Bearer",
    "bearer",
    "BEARER",
    "://",
    "user:pw@",
    "-----BEGIN PRIVATE KEY-----",
    "-----END PRIVATE KEY-----",
    "password",
    "PassWord",
    "api_key",
    "api-key",
    "apikey",
    "secret",
    "token",
    "auth",
    "authorization",
    "cookie",
    "credential",
    "private_key",
    "access-key",
    "pwd",
    "passwd",
    "basic ",
    "token ",
    "=",
    ":",
    " = ",
    '"',
    "'",
    ";",
    ",",
    "&",
    ".",
    "-",
    "_",
    " ",
    "  ",
    "\t",
    "\n",
    "\x1c",
    "\x85",
    "\u00a0",
    "\u3000",
    "\ufeff",
    "\u017f",
    "\u0131",
    "\u0130",
    "\u212a",
    "\u00e9",
    "\u00df",
    "\u0663",
    "\U0001f600",
    "[REDACTED:x]",
    "[redacted:",
    "abcdefghij",
    "ABCDEFGHIJKLMNOP",
    "0123456789",
    "a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6",
    "Z",
    "x",
    "eyJhbGciOi",
    ".eyJzdWIi",
    ".",
    "abcdefghijklmnopqrstuvwxyz0123456789",
    "ABCDEFGHIJKLMNOP0123",
    "ant-api03-",
    "_-",
]


def random_texts(n: int = 600, seed: int = 40) -> list[str]:
    rng = random.Random(seed)
    pieces = [json.loads(f'"{p}"') if "\\" in p else p for p in _PIECES]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 14))) for _ in range(n)]


def _redacted(value: Any, redactor: Redactor) -> dict[str, Any]:
    done = redactor.redact(value)
    return {"value": value, "redacted": done.value, "rules": done.rules}


def redaction_vectors() -> dict[str, Any]:
    redactor = Redactor()
    event = {
        "id": "018f0c2a-0000-7000-8000-000000000001",
        "payload": {"token": "x", "n": 1},
        "extensions": {"note": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123"},
        "occurred_at": "password=abcdefghij",
    }
    redacted_event, rules = redact_event(event, redactor)
    return {
        "texts": [_redacted(text, redactor) for text in REDACTION_TEXTS],
        "random_texts": [_redacted(text, redactor) for text in random_texts()],
        "values": [_redacted(value, redactor) for value in REDACTION_VALUES],
        "events": [{"event": event, "redacted": redacted_event, "rules": rules}],
    }


def files() -> dict[str, str]:
    made = {
        "canonical.json": canonical_vectors(),
        "chain.json": chain_vector(),
        "content.json": content_vectors(),
        "redaction.json": redaction_vectors(),
        "signing.json": signing_vector(),
        "subjects.json": subjects_vector(),
        "langgraph.json": langgraph_vector(),
    }
    return {name: json.dumps(data, indent=1, ensure_ascii=True) + "\n" for name, data in made.items()}


def main() -> int:
    stale = []
    for name, text in files().items():
        path = HERE / name
        if "--check" in sys.argv:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; run {Path(__file__).name}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
