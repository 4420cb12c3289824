// The contract, proven by the shared vectors (spec/vectors/): the same files
// the Python tests read (tests/test_vectors.py, tests/test_sdk_vectors.py).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  appendDigest, canonicalString, ChainFault, checkSignature, entryHash, externalize, GENESIS_HASH, loadPrivateKey, loadPublicKey, NotCanonicalizable,
  publicKeyHex, Redactor, redactEvent, refsIn, signEvent, verifyChain, ERRORS_BY_CODE, errorFromWire, LedgerError, StoreError, Subjects, token, inboxPrefix, tenantHeaders,
} from "../src/index.js";

// dist/test/ -> the repository's spec/vectors
import { nsKey, recordId, threadKey, writesKeyOf } from "../src/langgraph_records.js";
const VECTORS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "spec", "vectors");
const load = (...parts: string[]) => JSON.parse(readFileSync(join(VECTORS, ...parts), "utf8"));

test("agent-ledger append vector: canonical string and digest", () => {
  const vector = load("agent-ledger", "append.json");
  assert.equal(canonicalString(vector.events), vector.canonical);
  assert.equal(appendDigest(vector.events), vector.sha256);
});

test("canonical vectors: bytes, and refusals with path and reason", () => {
  for (const vector of load("laneledger", "canonical.json")) {
    const value = JSON.parse(vector.json);
    if ("canonical" in vector) {
      assert.equal(canonicalString(value), vector.canonical, vector.json);
    } else {
      assert.throws(() => canonicalString(value), (err: unknown) => {
        assert.ok(err instanceof NotCanonicalizable, vector.json);
        assert.equal(err.code, "not_canonicalizable");
        assert.deepEqual(err.details, vector.refused, vector.json);
        return true;
      });
    }
  }
});

test("canonical refuses what JSON cannot carry", () => {
  for (const [value, reason] of [[NaN, "non_finite_number"], [Infinity, "non_finite_number"], [10n, "unsupported_type"], [new Date(0), "unsupported_type"], [{ a: undefined }, "unsupported_type"]] as const) {
    assert.throws(() => canonicalString(value), (err: unknown) => err instanceof NotCanonicalizable && err.details["reason"] === reason);
  }
  const cycle: unknown[] = [];
  cycle.push(cycle);
  assert.throws(() => canonicalString(cycle), (err: unknown) => err instanceof NotCanonicalizable && err.details["reason"] === "too_deep");
});

test("chain vector: digest, entry hashes (plain and HMAC) and verification", () => {
  const vector = load("laneledger", "chain.json");
  assert.equal(appendDigest(vector.events), vector.digest);
  for (const [records, key] of [[vector.plain, undefined], [vector.hmac, vector.hmac_key]]) {
    let prev = GENESIS_HASH;
    for (const record of records) {
      assert.equal(record.prev_hash, prev);
      assert.equal(entryHash(record, key), record.entry_hash);
      prev = record.entry_hash;
    }
    assert.equal(verifyChain(records, key), prev);
  }
  // Tampered content, a deleted record, a missing key: the first bad seq, named.
  const tampered = structuredClone(vector.plain);
  tampered[1].payload.i = 99;
  assert.throws(() => verifyChain(tampered), (e: unknown) => e instanceof ChainFault && e.details["seq"] === 2 && e.details["kind"] === "content_tampered");
  assert.throws(() => verifyChain([vector.plain[0], vector.plain[2]]), (e: unknown) => e instanceof ChainFault && e.details["seq"] === 3 && e.details["kind"] === "broken_link");
  assert.throws(() => verifyChain(vector.hmac), (e: unknown) => e instanceof ChainFault && e.details["seq"] === 1);
});

test("chain vector: sealed content, and an erased event that keeps its hash", () => {
  const vector = load("laneledger", "chain.json");
  const tip = vector.sealed[2].entry_hash;
  for (const records of [vector.sealed, vector.sealed_erased]) {
    records.forEach((record: Record<string, unknown>, i: number) => assert.equal(entryHash(record), vector.sealed[i].entry_hash));
    assert.equal(verifyChain(records), tip);
  }
  const tampered = (change: (r: Record<string, unknown>) => void, from = vector.sealed_erased) => {
    const copy = structuredClone(from);
    change(copy[1]);
    return copy;
  };
  for (const [records, field] of [
    [tampered((r) => { (r.payload as Record<string, unknown>).i = 99; }, vector.sealed), "entry_hash"],
    [tampered((r) => { r.payload = { i: 2 }; }), "payload"],
    [tampered((r) => { delete r.erased; }), "erased"],
    [tampered((r) => { r.content_digest = "0".repeat(64); }), "entry_hash"],
  ] as const) {
    assert.throws(() => verifyChain(records), (e: unknown) => e instanceof ChainFault && e.details["kind"] === "content_tampered" && e.details["seq"] === 2 && e.details["field"] === field);
  }
});

test("content vectors: externalized payloads, blob bytes and refs", () => {
  for (const vector of load("laneledger", "content.json")) {
    const done = externalize(vector.payload);
    assert.equal(canonicalString(done.payload), canonicalString(vector.externalized));
    const blobs = Object.fromEntries([...done.blobs].map(([ref, data]) => [ref, data.toString("base64")]));
    assert.deepEqual(blobs, vector.blobs);
    assert.deepEqual(refsIn(done.payload), vector.refs);
    // Idempotent: its own output changes nothing.
    assert.equal(canonicalString(externalize(done.payload).payload), canonicalString(done.payload));
  }
});

test("redaction vectors: the sequencer's output, byte for byte", () => {
  const vectors = load("laneledger", "redaction.json");
  const redactor = new Redactor();
  for (const vector of [...vectors.texts, ...vectors.random_texts, ...vectors.values]) {
    const done = redactor.redact(vector.value);
    assert.equal(canonicalString(done.value), canonicalString(vector.redacted), JSON.stringify(vector.value));
    assert.deepEqual(done.rules, vector.rules, JSON.stringify(vector.value));
    // Redacting twice changes nothing and counts nothing.
    assert.deepEqual(redactor.redact(done.value).rules, {});
  }
  for (const vector of vectors.events) {
    const [event, rules] = redactEvent(vector.event, redactor);
    assert.deepEqual(event, vector.redacted);
    assert.deepEqual(rules, vector.rules);
  }
});

test("signing vector: ed25519 over the event without its signature, deterministic", () => {
  const vector = load("laneledger", "signing.json");
  const key = loadPrivateKey(vector.private_key_seed);
  assert.equal(publicKeyHex(key), vector.public_key);
  for (const event of vector.signed) {
    const { signature, ...unsigned } = event;
    assert.deepEqual(signEvent(unsigned, key), event);
    assert.equal(signEvent(unsigned, key)["signature"], signature);
    assert.ok(checkSignature(event, loadPublicKey(vector.public_key)));
    assert.ok(!checkSignature({ ...event, event_type: "note.acme.other" }, loadPublicKey(vector.public_key)));
  }
});

test("spec/errors.md: exactly its codes, each with its class and retryability", () => {
  const text = readFileSync(join(VECTORS, "..", "errors.md"), "utf8");
  const section = (text.split("\n## Codes\n")[1] ?? "").split("\n## ")[0] ?? "";
  const rows = section.split("\n").filter((line) => line.startsWith("| `"));
  const codes = rows.map((row) => {
    const cells = row.replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
    const [code, className, retryable] = [cells[0]?.replace(/`/g, ""), cells[1]?.replace(/`/g, ""), cells[4]];
    const cls = ERRORS_BY_CODE.get(code as string);
    assert.ok(cls, `${code} has no class`);
    assert.equal(cls.name, className, code);
    const err = errorFromWire({ code: code as string, message: "m", details: { a: 1 } });
    assert.ok(err instanceof cls && err.code === code && err.message === "m" && err.details["a"] === 1);
    if (cls !== LedgerError) assert.equal(err.retryable ? "yes" : "no", retryable, code);
    return code;
  });
  assert.deepEqual(new Set(codes), new Set(ERRORS_BY_CODE.keys()));
  assert.equal(codes.length, ERRORS_BY_CODE.size);
  // A code from a newer server is kept, with its retryable.
  const newer = errorFromWire({ code: "brand_new", message: "x", retryable: true });
  assert.ok(newer instanceof LedgerError && newer.code === "brand_new" && newer.retryable);
  assert.ok(errorFromWire({ code: "lane_conflict", message: "x" }) instanceof StoreError);
});

test("subjects vector: tokens, inboxes, tenant headers, subjects and buckets", () => {
  for (const v of load("laneledger", "subjects.json")) {
    const subjects = new Subjects(v.prefix);
    const got = {
      token: token(v.id),
      inbox_prefix: inboxPrefix(v.id),
      tenant_headers: tenantHeaders(v.id) ?? null,
      append: subjects.append(v.id, "lane 1"),
      command: subjects.command("get_lane", v.id),
      command_trusted: subjects.command("get_lane"),
      blob_bucket: subjects.blobBucket,
      tenant_blob_bucket: subjects.tenantBlobBucket(v.id),
      uploads_bucket: subjects.uploadsBucket(v.id),
    };
    const { prefix: _prefix, id: _id, ...expected } = v;
    assert.deepEqual(got, expected, `${v.prefix} ${JSON.stringify(v.id)}`);
  }
});

test("langgraph vector: the LangGraph savers' keys and record ids", () => {
  for (const v of load("laneledger", "langgraph.json")) {
    const record = recordId(v.thread_id, v.checkpoint_ns, v.checkpoint_id);
    const nsk = nsKey(v.thread_id, v.checkpoint_ns);
    assert.deepEqual(
      { thread_key: threadKey(v.thread_id), ns_key: nsk, record_id: record, writes_key: writesKeyOf(nsk, record) },
      { thread_key: v.thread_key, ns_key: v.ns_key, record_id: v.record_id, writes_key: v.writes_key },
      JSON.stringify(v.thread_id),
    );
  }
});
