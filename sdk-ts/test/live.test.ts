// Against the real system: a real nats-server and the real sequencer,
// started by tests/test_sdk_ts.py, which passes the server's URL in
// LANELEDGER_TS_NATS_URL (skipped without it), then runs `laneledger verify`
// on what these tests wrote and retries one of their appends with the
// Python SDK (LANELEDGER_TS_OUT: where that append is written for it).

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { after, before, test } from "node:test";

import {
  appendDigest, EntityNotFound, Guard, IdempotencyViolation, InvalidRequest, LaneConflict, LaneRecorder, LedgerClient,
  LedgerUnavailable, newId, TenantMismatch, type ErasePageOptions, type ErasurePage, GUARD_GUARANTEES, RequestTooLarge, CheckpointClient, EntityConflict, generatePrivateKey, makeEvent, SignatureRequired, signEvent,
} from "../src/index.js";

const URL = process.env["LANELEDGER_TS_NATS_URL"];
const skip = URL === undefined ? "LANELEDGER_TS_NATS_URL is not set (tests/test_sdk_ts.py sets it)" : false;
const SESSION = `ts-${newId()}`;

let client: LedgerClient;
let actorId: string;

before(async () => {
  if (skip) return;
  client = await LedgerClient.connect(URL as string, { timeoutMs: 10_000 });
  actorId = (await client.ensureActor("acme", "agent:ts-sdk@1", "agent")).id;
});

after(async () => {
  if (!skip) await client.close();
});

test("an append commits, its digest is the local one, and a resend is a replay", { skip }, async () => {
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "main", { actorId });
  const events = [recorder.event("note.acme.step", { actorId, payload: { n: 1, ratio: 0.25, text: "héllo 😀" } }), recorder.event("note.acme.step", { actorId, payload: { n: 2 } })];
  const appendId = newId();
  const receipt = await recorder.append(events, { appendId });
  assert.equal(receipt.outcome, "committed");
  assert.equal(receipt.digest, appendDigest(events));
  assert.deepEqual([receipt.first_seq, receipt.last_seq], [1, 2]);
  assert.equal(recorder.head, 2);
  const again = await client.append(recorder.lane, 0, events, { appendId });
  assert.equal(again.replayed, true);
  assert.deepEqual(again.entry_hashes, receipt.entry_hashes);
  // The same id with other content is a violation, not a replay.
  await assert.rejects(client.append(recorder.lane, 0, [recorder.event("note.acme.step", { actorId })], { appendId }), (err: unknown) => err instanceof IdempotencyViolation && err.code === "idempotency_violation" && err.details["append_id"] === appendId);
});

test("optimistic concurrency: a stale head is lane_conflict naming both heads", { skip }, async () => {
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "conflict", { actorId });
  await recorder.append([recorder.event("note.acme.step", { actorId })]);
  await assert.rejects(client.append(recorder.lane, 0, [recorder.event("note.acme.step", { actorId })]), (err: unknown) => {
    assert.ok(err instanceof LaneConflict);
    assert.equal(err.retryable, false);
    assert.deepEqual([err.details["expected_last_seq"], err.details["actual_last_seq"]], [0, 1]);
    return true;
  });
});

test("accepted appends: flush awaits their receipts in order", { skip }, async () => {
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "accept", { actorId });
  for (let i = 0; i < 5; i++) await recorder.append([recorder.event("note.acme.step", { actorId, payload: { i } })], { wait: "accept" });
  const receipts = await recorder.flush();
  assert.deepEqual(receipts.map((r) => r.last_seq), [1, 2, 3, 4, 5]);
  assert.equal((await recorder.reload()), 5);
});

test("secrets are redacted before the digest, as the sequencer redacts them", { skip }, async () => {
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "secrets", { actorId });
  const event = recorder.event("note.acme.step", { actorId, payload: { api_key: "hunter2", note: "Authorization: Bearer abcdefghijklmnop0123" } });
  assert.deepEqual(event["payload"], { api_key: "[REDACTED:secret_key]", note: "Authorization: [REDACTED:bearer_token]" });
  // Handed over unredacted, submit redacts it the same way: the digest still matches.
  const raw = { ...event, id: newId(), payload: { password: "x", text: "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123" } };
  const receipt = await recorder.append([raw]);
  const page = await client.loadLane(recorder.lane.id);
  assert.deepEqual(page.events[0]?.["payload"], { password: "[REDACTED:secret_key]", text: "[REDACTED:anthropic_api_key]" });
  assert.equal(receipt.digest, appendDigest([{ ...raw, payload: page.events[0]?.["payload"] }]));
  await assert.rejects(client.createLane("acme", SESSION, "r1", "token=abcdefghijkl"), (err: unknown) => err instanceof InvalidRequest && err.details["path"] === "$.name");
});

test("a value over 1 KiB travels as a content reference, its blob stored first", { skip }, async () => {
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "blobs", { actorId });
  const big = "x".repeat(5000);
  const event = recorder.event("note.acme.step", { actorId, payload: { file_path: "a.py", content: big } });
  const receipt = await recorder.append([event]);
  const stored = (await client.loadLane(recorder.lane.id)).events[0]?.["payload"] as Record<string, unknown>;
  assert.equal(stored["file_path"], "a.py");
  assert.deepEqual(stored["content"], (event["payload"] as Record<string, unknown>)["content"]);
  assert.equal((stored["content"] as Record<string, unknown>)["size_bytes"], 5000);
  assert.equal(receipt.digest, appendDigest([event]));
  // A copy of the event without its blob's bytes still commits: the blob is stored.
  await recorder.append([{ ...structuredClone(event), id: newId() }]);
});

test("a recorder names its data subject on every event, a big one with its blob and a signed one", { skip }, async () => {
  const key = generatePrivateKey();
  const signer = (await client.ensureActor("acme", "agent:ts-sdk/signer@1", "agent", { publicKey: key })).id;
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "subject", { actorId, dataSubject: "customer-42", signers: new Map([[signer, key]]) });
  const big = recorder.event("note.acme.step", { actorId, payload: { content: "y".repeat(5000) } });
  const plain = makeEvent(recorder.lane.id, "note.acme.step", { actorId: signer, payload: { n: 1 } }, client.redactor);
  const other = recorder.event("note.acme.step", { actorId, dataSubject: "customer-7" });
  await recorder.append([big, plain, other]);
  const stored = (await client.loadLane(recorder.lane.id)).events;
  assert.deepEqual(stored.map((e) => e["data_subject"]), ["customer-42", "customer-42", "customer-7"]);
  assert.ok(typeof stored[1]?.["signature"] === "string");
});

test("typed errors: an unknown lane, a wrong tenant, a malformed URL, no server", { skip }, async () => {
  await assert.rejects(client.getLane(newId()), (err: unknown) => err instanceof EntityNotFound && err.details["kind"] === "lane");
  await assert.rejects(LedgerClient.connect("http://localhost:4222"), InvalidRequest);
  await assert.rejects(LedgerClient.connect("nats://127.0.0.1:1", { connectTimeoutMs: 500 }), LedgerUnavailable);
  const scoped = await LedgerClient.connect(URL as string, { tenant: "acme" });
  try {
    await assert.rejects(scoped.ensureActor("other", "agent:x@1", "agent"), TenantMismatch);
  } finally {
    await scoped.close();
  }
});

test("an append over 1 MiB is request_too_large, refused before anything is sent", { skip }, async () => {
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "too-large", { actorId });
  // 1,200 values of 1,000 bytes: none over 1 KiB, so none becomes a reference.
  const payload = Object.fromEntries(Array.from({ length: 1200 }, (_, i) => [`k${i}`, "v".repeat(1000)]));
  await assert.rejects(recorder.append([recorder.event("note.acme.step", { actorId, payload })]), (err: unknown) => {
    assert.ok(err instanceof RequestTooLarge);
    assert.equal(err.details["limit_bytes"], 1024 * 1024);
    assert.ok((err.details["size_bytes"] as number) > 1024 * 1024);
    return true;
  });
  assert.equal(await recorder.reload(), 0);
});

test("a tenant's client: its own inbox, subjects and uploads bucket", { skip }, async () => {
  const scoped = await LedgerClient.connect(URL as string, { tenant: "acme" });
  try {
    const recorder = await LaneRecorder.open(scoped, "acme", SESSION, "r1", "tenant", { actorId });
    const receipt = await recorder.append([recorder.event("note.acme.step", { actorId, payload: { big: "y".repeat(3000) } })]);
    assert.equal(receipt.last_seq, 1);
  } finally {
    await scoped.close();
  }
});

test("the attempt guard: the request is committed before the call runs", { skip }, async () => {
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "guard", { actorId });
  const guard = new Guard(recorder, actorId);
  const seen: string[] = [];
  await guard.turn((turn) =>
    turn.toolCall("send_email", { effect: "write", idempotency: "none" }, (call) =>
      call.attempt(async (attempt) => {
        const events = (await client.loadLane(recorder.lane.id)).events;
        seen.push(String(events.at(-1)?.["event_type"]));
        attempt.complete({ sent: true });
      }),
    ),
  );
  assert.deepEqual(seen, ["attempt.requested"]);
  const types = (await client.loadLane(recorder.lane.id)).events.map((e) => e["event_type"]);
  assert.deepEqual(types, ["turn.started", "action.started", "attempt.requested", "attempt.completed", "action.completed", "turn.completed"]);

  // When the ledger cannot commit the request, the call never runs.
  let ran = false;
  const failing = new Guard(recorder, actorId, { nextTurnNo: 2 });
  await assert.rejects(
    failing.turn((turn) =>
      turn.toolCall("charge_card", { effect: "write", idempotency: "none" }, async (call) => {
        recorder.head -= 1; // another writer moved the lane: the request is refused
        return call.attempt(async () => {
          ran = true;
        });
      }),
    ),
    LaneConflict,
  );
  assert.equal(ran, false);
});

test("signed producers: a keyed actor's events are signed, an unsigned one is refused", { skip }, async () => {
  const key = generatePrivateKey();
  const signer = (await client.ensureActor("acme", "agent:ts-signed@1", "agent", { publicKey: key })).id;
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "signed", { actorId: signer, signers: new Map([[signer, key]]) });
  const event = recorder.event("note.acme.step", { actorId: signer, payload: { token: "t", big: "s".repeat(2000) } });
  assert.match(String(event["signature"]), /^[0-9a-f]{128}$/);
  assert.equal((await recorder.append([event])).last_seq, 1);
  const unsigned = makeEvent(recorder.lane.id, "note.acme.step", { actorId: signer }, client.redactor);
  await assert.rejects(client.append(recorder.lane, 1, [unsigned]), (err: unknown) => err instanceof SignatureRequired && err.details["actor_id"] === signer);
  // Signed over a secret: its signature would not cover what is sent, refused before sending.
  const secret = signEvent({ ...unsigned, id: newId(), payload: { password: "hunter2" } }, key);
  await assert.rejects(client.append(recorder.lane, 1, [secret]), (err: unknown) => err instanceof InvalidRequest && err.details["path"] === "$.events[0]");
});

test("the guard's spine: prompt → inference → the tool call it asked for; costs; run.started names its guarantees", { skip }, async () => {
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "spine", { actorId });
  const guard = new Guard(recorder, actorId);
  await guard.startRun();
  const prompt = await guard.prompt("fix the failing test");
  await guard.turn(async (turn) => {
    await turn.modelCall("claude-sonnet-4", { provider: "anthropic" }, (call) =>
      call.attempt(async (attempt) => attempt.inference({ text: "run the tests", inputTokens: 1200, outputTokens: 300, cost: "0.0123" })),
    );
    await turn.toolCall("run_tests", { effect: "read", idempotency: "inherent" }, (call) => call.attempt(async (attempt) => attempt.complete({ passed: true })));
  });
  const events = (await client.loadLane(recorder.lane.id)).events;
  const byType = (type: string, actionType?: string) =>
    events.filter((e) => e["event_type"] === type && (actionType === undefined || (e["payload"] as Record<string, unknown>)["action_type"] === actionType));
  const [started] = byType("run.started");
  assert.deepEqual((started?.["payload"] as Record<string, unknown>)["adapter"], GUARD_GUARANTEES);
  const [inferenceRequest] = byType("attempt.requested", "model_call");
  const [inference] = byType("attempt.completed", "model_call");
  const [toolRequest] = byType("attempt.requested", "tool_call");
  assert.equal(inferenceRequest?.["causation_id"], prompt["id"]);
  assert.equal(inference?.["causation_id"], inferenceRequest?.["id"]);
  assert.equal(toolRequest?.["causation_id"], inference?.["id"]);
  const [cost] = byType("cost.recorded");
  assert.equal((cost?.["payload"] as Record<string, unknown>)["amount"], "0.0123");
  assert.equal(cost?.["causation_id"], inference?.["id"]);
});

test("reading back: a session whole, a lane page by page", { skip }, async () => {
  const session = `ts-read-${newId()}`;
  const main = await LaneRecorder.open(client, "acme", session, "r1", "main", { actorId });
  const other = await LaneRecorder.open(client, "acme", session, "r2", "main", { actorId });
  for (let i = 0; i < 7; i++) await main.append([main.event("note.acme.step", { actorId, payload: { i } })]);
  await other.append([other.event("note.acme.step", { actorId })]);
  await client.createTurn(main.lane.id, 1, { tenant: "acme" });
  const view = await client.loadSession(session);
  assert.deepEqual(view.run_ids, ["r1", "r2"]);
  assert.equal(view.lanes.length, 2);
  assert.equal(view.turns.length, 1);
  assert.equal(view.events.length, 8);
  assert.equal((await client.loadSession(session, { runId: "r1" })).events.length, 7);
  const pages = [];
  for await (const page of client.lanePages(main.lane.id, 2, { limit: 2 })) pages.push(page.events.map((e) => e["seq"]));
  assert.deepEqual(pages, [[3, 4], [5, 6], [7]]);
});

test("checkpoints: revisions with optimistic concurrency, state redacted, read back", { skip }, async () => {
  await LaneRecorder.open(client, "acme", SESSION, "r1", "checkpointed", { actorId }); // the session names the tenant
  const checkpoints = new CheckpointClient(client);
  const key = `thread-${newId()}`;
  const opts = { format: "application/json", sessionId: SESSION, runId: "r1" };
  const first = await checkpoints.save(key, { messages: ["hi"], api_key: "k" }, { ...opts, expectedRevision: 0 });
  assert.equal(first.revision, 1);
  assert.deepEqual(first.state, { messages: ["hi"], api_key: "[REDACTED:secret_key]" });
  await assert.rejects(checkpoints.save(key, { messages: [] }, { ...opts, expectedRevision: 0 }), (err: unknown) => err instanceof EntityConflict && err.details["reason"] === "revision_conflict");
  const second = await checkpoints.save(key, { messages: ["hi", "there"] }, { ...opts, expectedRevision: 1 });
  assert.equal(second.revision, 2);
  assert.equal((await checkpoints.latest(key))?.id, second.id);
  assert.deepEqual((await checkpoints.get(first.id)).state, first.state);
  assert.deepEqual((await checkpoints.revisions(key)).revisions.map((r) => r.revision), [1, 2]);
  assert.equal(await checkpoints.latest(`nothing-${newId()}`), undefined);
  // Whose personal data the state holds: erased with that data subject (spec/checkpoint.md).
  const named = await checkpoints.save(`named-${newId()}`, {}, { ...opts, expectedRevision: 0, dataSubject: "customer-42" });
  assert.equal(named.data_subject, "customer-42");
  await assert.rejects(checkpoints.save("password=hunter2hunter2", {}, { ...opts, expectedRevision: 0 }), (err: unknown) => err instanceof InvalidRequest && err.details["path"] === "$.checkpoint.key");
});

test("checkpoints: state over the inline limit goes to the artifact bucket first, read back checked", { skip }, async () => {
  await LaneRecorder.open(client, "acme", SESSION, "r1", "checkpointed", { actorId });
  const checkpoints = new CheckpointClient(client);
  const limit = (await checkpoints.info()).max_inline_bytes;
  const state = { notes: "n".repeat(limit), token: "password=hunter2hunter2" };
  const saved = await checkpoints.save(`big-${newId()}`, state, { format: "application/json", sessionId: SESSION, runId: "r1", expectedRevision: 0 });
  assert.equal(saved.state ?? undefined, undefined);
  assert.equal(saved.artifact?.media_type, "application/json");
  assert.equal(saved.digest, saved.artifact?.sha256); // the RFC 8785 bytes, as inline state would be digested
  const loaded = (await checkpoints.loadState(await checkpoints.get(saved.id))) as Record<string, unknown>;
  assert.equal(loaded["notes"], state.notes);
  assert.match(String(loaded["token"]), /REDACTED/); // redacted before it was measured and uploaded
  // The same bytes again: stored once, the same reference.
  const again = await checkpoints.save(`big-${newId()}`, state, { format: "application/json", sessionId: SESSION, runId: "r1", expectedRevision: 0 });
  assert.deepEqual(again.artifact, saved.artifact);
  await assert.rejects(
    checkpoints.readArtifact({ sha256: "0".repeat(64), size_bytes: 1, media_type: "application/json" }),
    (err: unknown) => err instanceof EntityNotFound && err.details["reason"] === "artifact_missing",
  );
});

test("checkpoints: erase selects the revisions naming a data subject, and those created before a time", { skip }, async () => {
  const checkpoints = new CheckpointClient(client);
  const subject = `customer-${newId()}`;
  const opts = { format: "application/json", tenant: "acme", expectedRevision: 0 };
  const named = await checkpoints.save(`erase-${newId()}`, { memo: "theirs" }, { ...opts, dataSubject: subject });
  const other = await checkpoints.save(`erase-${newId()}`, { memo: "another's" }, opts);
  const plan = await checkpoints.erase({ dataSubject: subject, dryRun: true, tenant: "acme" });
  assert.deepEqual(plan.erased.map((c) => [c.id, c.data_subject]), [[named.id, subject]]);
  // "Before" is strict: the revision created at that instant is not selected, an earlier one is.
  const older = (await checkpoints.erase({ createdBefore: other.created_at, dryRun: true, tenant: "acme" })).erased.map((c) => c.id);
  assert.ok(older.includes(named.id) && !older.includes(other.id));
  await assert.rejects(checkpoints.erase({ createdBefore: "2026-02-30T00:00:00Z", tenant: "acme" }), (err: unknown) => err instanceof InvalidRequest && err.details["path"] === "$.created_before");
  const done = await checkpoints.erase({ dataSubject: subject, tenant: "acme" });
  assert.deepEqual(done.erased.map((c) => c.id), [named.id]);
  await assert.rejects(checkpoints.get(named.id, { tenant: "acme" }), (err: unknown) => err instanceof EntityNotFound && err.details["reason"] === "erased");
  assert.deepEqual((await checkpoints.get(other.id, { tenant: "acme" })).state, { memo: "another's" });
});

test("erase: a session page by page, the counts summed; the same erasure again erases nothing twice; another tenant's is not found", { skip }, async () => {
  const session = `ts-erase-${newId()}`;
  const recorder = await LaneRecorder.open(client, "acme", session, "r1", "main", { actorId });
  await recorder.append(Array.from({ length: 5 }, (_, i) => recorder.event("note.acme.step", { actorId, payload: { i, memo: "marker-erase-5e1f" } })));
  const kept = await LaneRecorder.open(client, "acme", `ts-kept-${newId()}`, "r1", "main", { actorId });
  await kept.append([kept.event("note.acme.step", { actorId, payload: { memo: "kept" } })]);
  // Every page the loop asks for, seen through a client whose erasePage records them.
  const pages: ErasurePage[] = [];
  const watched = Object.assign(Object.create(client) as LedgerClient, {
    erasePage: async (opts: ErasePageOptions) => {
      const page = await client.erasePage(opts);
      pages.push(page);
      return page;
    },
  });
  const reason = "Art. 17 request";
  const done = await watched.erase({ sessionId: session, actorId, reason, limit: 2, tenant: "acme" });
  assert.deepEqual(pages.map((p) => [p.erasure_id, p.erased, p.has_more]), [[done.erasure_id, 2, true], [done.erasure_id, 2, true], [done.erasure_id, 1, false]]);
  assert.deepEqual([done.erased, done.already_erased, done.unsealed, done.has_more, done.dry_run], [5, 0, 0, false, false]);
  assert.ok(done.erasure !== null && pages.every((p) => p.erasure?.position === done.erasure?.position), "one erasure event, committed by the first page");
  const events = (await client.loadSession(session)).events;
  assert.equal(events.length, 5);
  for (const event of events) {
    assert.deepEqual([event["payload"], event["erased"]], [{}, done.erasure], JSON.stringify(event));
    assert.equal(typeof event["content_digest"], "string");
  }
  assert.deepEqual((await client.loadSession(kept.lane.session_id)).events[0]?.["payload"], { memo: "kept" });

  // The same erasure again (after a timeout, say): the same event, nothing erased twice.
  const again = await client.erase({ sessionId: session, actorId, reason, erasureId: done.erasure_id, limit: 2, tenant: "acme" });
  assert.deepEqual([again.erasure, again.erased, again.already_erased, again.has_more], [done.erasure, 0, 5, false]);
  // Another tenant's producer: acme's session is not found, as every id of another tenant.
  const globex = await LedgerClient.connect(URL as string, { tenant: "globex" });
  try {
    const globexActor = (await globex.ensureActor("globex", "agent:ts-sdk@1", "agent")).id;
    await assert.rejects(
      globex.erase({ sessionId: session, actorId: globexActor, reason }),
      (err: unknown) => err instanceof EntityNotFound && err.details["kind"] === "session",
    );
  } finally {
    await globex.close();
  }
});

test("erase: every event naming a data subject, in every session, another subject's kept", { skip }, async () => {
  const subject = `customer-${newId()}`;
  const sessions = [`ts-subject-${newId()}`, `ts-subject-${newId()}`];
  for (const session of sessions) {
    const recorder = await LaneRecorder.open(client, "acme", session, "r1", "main", { actorId, dataSubject: subject });
    await recorder.append([recorder.event("note.acme.step", { actorId, payload: { memo: "theirs" } }), recorder.event("note.acme.step", { actorId, dataSubject: "customer-7", payload: { memo: "another's" } })]);
  }
  const plan = await client.erase({ dataSubject: subject, actorId, reason: "Art. 17 request", dryRun: true, tenant: "acme" });
  assert.deepEqual([plan.erasure, plan.erased, plan.dry_run], [null, 2, true]);
  const done = await client.erase({ dataSubject: subject, actorId, reason: "Art. 17 request", tenant: "acme" });
  assert.deepEqual([done.erased, done.has_more], [2, false]);
  for (const session of sessions) {
    const events = (await client.loadSession(session)).events;
    assert.deepEqual(events.map((e) => [e["data_subject"], e["payload"], e["erased"] ?? null]), [[subject, {}, done.erasure], ["customer-7", { memo: "another's" }, null]]);
  }
});

test("an append the Python SDK will retry", { skip }, async () => {
  const out = process.env["LANELEDGER_TS_OUT"];
  if (out === undefined) return;
  const recorder = await LaneRecorder.open(client, "acme", SESSION, "r1", "cross-sdk", { actorId });
  const events = [recorder.event("note.acme.step", { actorId, payload: { from: "typescript", blob: "z".repeat(2000), api_key: "k" } })];
  const appendId = newId();
  const receipt = await recorder.append(events, { appendId });
  writeFileSync(out, JSON.stringify({ lane: recorder.lane, append_id: appendId, events, receipt }));
});
