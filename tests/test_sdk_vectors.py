"""The laneledger vectors (spec/vectors/laneledger/) are what the Python
implementation computes today: both SDKs read them (sdk-ts/test/vectors.test.ts),
so a rule whose output changes must change the files, in the same commit."""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path

import pytest

from laneledger.contract.canonical import canonicalize
from laneledger.contract.chain import append_digest, verify_chain
from laneledger.contract.contentref import externalize, refs_in
from laneledger.contract.errors import NotCanonicalizable
from laneledger.contract.redaction import Redactor, redact_event
from laneledger.contract.signing import check_signature, load_private_key

HERE = Path(__file__).resolve().parents[1] / "spec" / "vectors" / "laneledger"


def _generator():
    spec = importlib.util.spec_from_file_location("vector_generator", HERE / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(name: str):
    return json.loads((HERE / name).read_text())


def test_the_files_are_what_the_generator_writes():
    for name, text in _generator().files().items():
        assert (HERE / name).read_text() == text, f"{name} is stale: run spec/vectors/laneledger/generate.py"


def test_canonical_vectors():
    for vector in load("canonical.json"):
        value = json.loads(vector["json"])
        if "canonical" in vector:
            assert canonicalize(value) == vector["canonical"].encode()
        else:
            with pytest.raises(NotCanonicalizable) as caught:
                canonicalize(value)
            assert caught.value.details == vector["refused"]


def test_chain_vector():
    vector = load("chain.json")
    assert append_digest(vector["events"]) == vector["digest"]
    assert verify_chain(vector["plain"]) == vector["plain"][-1]["entry_hash"]
    key = vector["hmac_key"].encode()
    assert verify_chain(vector["hmac"], key=key) == vector["hmac"][-1]["entry_hash"]
    # Sealed, then with its second event erased: the same chain, the same tip.
    tip = vector["sealed"][-1]["entry_hash"]
    assert verify_chain(vector["sealed"]) == verify_chain(vector["sealed_erased"]) == tip
    assert [r["entry_hash"] for r in vector["sealed"]] == [r["entry_hash"] for r in vector["sealed_erased"]]


def test_content_vectors():
    for vector in load("content.json"):
        done = externalize(vector["payload"])
        assert canonicalize(done.payload) == canonicalize(vector["externalized"])
        assert {ref: base64.b64encode(data).decode() for ref, data in done.blobs.items()} == vector["blobs"]
        assert [list(r) for r in refs_in(done.payload)] == vector["refs"]


def test_redaction_vectors():
    vectors = load("redaction.json")
    redactor = Redactor()
    for vector in vectors["texts"] + vectors["random_texts"] + vectors["values"]:
        done = redactor.redact(vector["value"])
        assert (done.value, done.rules) == (vector["redacted"], vector["rules"])
    for vector in vectors["events"]:
        assert list(redact_event(vector["event"], redactor)) == [vector["redacted"], vector["rules"]]


def test_signing_vector():
    vector = load("signing.json")
    public = load_private_key(vector["private_key_seed"]).public_key()
    assert all(check_signature(event, public) for event in vector["signed"])
