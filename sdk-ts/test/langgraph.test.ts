// LaneledgerSaver (src/langgraph.ts) on the real services, beyond what
// LangGraph.js's conformance suite asks (tests/test_sdk_ts.py runs both):
// the ledger event each record is anchored to, a record over the inline
// limit stored as an artifact, values redacted before serde, deleteThread
// recorded then erased, bad configs refused with typed errors, a thread's
// data subject named on its records and events, and erased with it.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { emptyCheckpoint, uuid6 } from "@langchain/langgraph-checkpoint";
import { CheckpointClient, EntityNotFound, InvalidRequest, newId, type Checkpoint, type CheckpointInfo } from "../src/index.js";
import { LaneledgerSaver } from "../src/langgraph.js";
import { CHECKPOINT_EVENT, CHECKPOINT_FORMAT, ERASED_EVENT, nsKey, recordId, threadKey, WRITES_EVENT, WRITES_FORMAT } from "../src/langgraph_records.js";

const URL = process.env["LANELEDGER_TS_NATS_URL"];
const skip = URL === undefined ? "LANELEDGER_TS_NATS_URL is not set (tests/test_sdk_ts.py sets it)" : false;
const TENANT = "acme";

let saver: LaneledgerSaver;
let checkpoints: CheckpointClient;

before(async () => {
  if (skip) return;
  saver = await LaneledgerSaver.connect(URL as string, { tenant: TENANT });
  checkpoints = new CheckpointClient(saver.client);
});

after(async () => {
  if (!skip) await saver.close();
});

const meta = { source: "loop" as const, step: 1, parents: {}, run_id: "run-7" };

test("a checkpoint is anchored to the committed event naming its id, key and digest, never its values", { skip }, async () => {
  const thread = `lg-${newId()}`;
  const checkpoint = { ...emptyCheckpoint(), id: uuid6(0), channel_values: { messages: ["a value the ledger never holds"] }, channel_versions: { messages: 1 } };
  const config = await saver.put({ configurable: { thread_id: thread, checkpoint_ns: "" } }, checkpoint, meta, { messages: 1 });
  await saver.putWrites(config, [["messages", "a pending write"]], "task-1", "~a");

  const stored = await checkpoints.get(recordId(thread, "", checkpoint.id), { tenant: TENANT });
  assert.equal(stored.key, nsKey(thread, ""));
  assert.deepEqual([stored.format, stored.session_id, stored.run_id], [CHECKPOINT_FORMAT, thread, "run-7"]);
  const session = await saver.client.loadSession(thread, { tenant: TENANT });
  const recorded = session.events.find((e) => e["event_type"] === CHECKPOINT_EVENT);
  assert.ok(recorded && stored.anchor, "the checkpoint event and the record's anchor");
  assert.equal(recorded["id"], stored.anchor.event_id);
  const payload = recorded["payload"] as Record<string, unknown>;
  assert.deepEqual([payload["checkpoint_id"], payload["key"], payload["digest"]], [stored.id, stored.key, stored.digest]);
  assert.deepEqual(session.events.map((e) => e["event_type"]), [CHECKPOINT_EVENT, WRITES_EVENT]);
  assert.ok(!JSON.stringify(session.events).includes("never holds") && !JSON.stringify(session.events).includes("pending write"));
  assert.deepEqual(session.run_ids, ["run-7"]); // the writes went to the lane of the checkpoint's run

  const tuple = await saver.getTuple(config);
  assert.deepEqual(tuple?.checkpoint.channel_values, checkpoint.channel_values);
  assert.deepEqual(tuple?.pendingWrites, [["task-1", "messages", "a pending write"]]);
});

test("a record over the service's inline limit is an artifact, uploaded first; values are redacted before serde", { skip }, async () => {
  const thread = `lg-${newId()}`;
  const limit = (await checkpoints.info()).max_inline_bytes;
  const big = "b".repeat(limit);
  const checkpoint = { ...emptyCheckpoint(), id: uuid6(1), channel_values: { notes: big, settings: { api_key: "k-123", model: "m" } } };
  const config = await saver.put({ configurable: { thread_id: thread } }, checkpoint, meta, {});
  const stored = await checkpoints.get(recordId(thread, "", checkpoint.id), { tenant: TENANT });
  assert.ok(stored.artifact && stored.state === undefined, "saved by reference");
  assert.equal(stored.digest, stored.artifact.sha256);
  const tuple = await saver.getTuple(config);
  assert.equal(tuple?.checkpoint.channel_values["notes"], big);
  assert.deepEqual(tuple?.checkpoint.channel_values["settings"], { api_key: "[REDACTED:secret_key]", model: "m" });

  // deleteThread: the erasure is recorded (ids and digests), then the record and its blob are gone.
  await saver.deleteThread(thread);
  assert.equal(await saver.getTuple(config), undefined);
  await assert.rejects(checkpoints.get(stored.id, { tenant: TENANT }), (err: unknown) => err instanceof EntityNotFound && err.details["reason"] === "erased");
  await assert.rejects(checkpoints.loadState(stored as Checkpoint), (err: unknown) => err instanceof EntityNotFound && err.details["reason"] === "artifact_missing");
  const session = await saver.client.loadSession(thread, { tenant: TENANT });
  const erased = session.events.find((e) => e["event_type"] === ERASED_EVENT);
  const listed = (erased?.["payload"] as { checkpoints: { checkpoint_id: string; digest: string }[] }).checkpoints;
  assert.deepEqual(listed.map((c) => [c.checkpoint_id, c.digest]), [[stored.id, stored.digest]]);
});

test("bad configs are refused with typed errors before anything is written", { skip }, async () => {
  const checkpoint = { ...emptyCheckpoint(), id: uuid6(2) };
  await assert.rejects(saver.put({ configurable: {} }, checkpoint, meta, {}), (err: unknown) => err instanceof InvalidRequest && err.details["path"] === "$.configurable.thread_id");
  await assert.rejects(
    saver.putWrites({ configurable: { thread_id: "t" } }, [["c", 1]], "task"),
    (err: unknown) => err instanceof InvalidRequest && err.details["path"] === "$.configurable.checkpoint_id",
  );
  await assert.rejects(saver.put({ configurable: { thread_id: "t", data_subject: "" } }, checkpoint, meta, {}), (err: unknown) => err instanceof InvalidRequest && err.details["path"] === "$.configurable.data_subject");
  await assert.rejects(
    saver.put({ configurable: { thread_id: "t".repeat(300) } }, checkpoint, meta, {}),
    (err: unknown) => err instanceof InvalidRequest && err.details["key_length"] === 310 && err.details["limit"] === 256,
  );
});

test("a list across threads or namespaces goes through a bounded number of records, else is refused", { skip }, async () => {
  const bounded = new LaneledgerSaver(saver.client, TENANT, { listSearchLimit: 2 });
  await bounded.setup();
  const thread = `lg-${newId()}`;
  const ids: string[] = [];
  for (const [i, ns] of ["", "child", "other"].entries()) {
    ids.push(uuid6(10 + i));
    await bounded.put({ configurable: { thread_id: thread, checkpoint_ns: ns } }, { ...emptyCheckpoint(), id: ids[i] as string }, meta, {});
  }
  const all = async (config: { configurable: Record<string, string> }) => {
    const out = [];
    for await (const t of bounded.list(config)) out.push(t.checkpoint.id);
    return out;
  };
  assert.equal((await all({ configurable: { thread_id: thread, checkpoint_ns: "child" } })).length, 1); // one key: no search
  const searches: { configurable: Record<string, string> }[] = [{ configurable: { thread_id: thread } }, { configurable: {} }];
  for (const config of searches) {
    await assert.rejects(all(config), (err: unknown) => err instanceof InvalidRequest && err.details["limit"] === 2 && err.details["path"] === "$.configurable");
  }
  const unbounded = [];
  for await (const t of saver.list({ configurable: { thread_id: thread } })) unbounded.push(t.checkpoint.id);
  assert.deepEqual(unbounded, [...ids].sort().reverse()); // newest checkpoint id first, across the namespaces
});

/** Every record of the thread, as the service lists them (a dry run of its erasure). */
async function threadRecords(thread: string): Promise<CheckpointInfo[]> {
  const key = threadKey(thread);
  return (await checkpoints.erase({ keys: [key], keyPrefixes: [key + "/"], dryRun: true, tenant: TENANT })).erased;
}

/** Until the checkpoint service, following the committed stream, has met
 * the erasure: the record is erased. */
async function erasedByTheService(record: string): Promise<void> {
  for (const deadline = Date.now() + 10_000; ;) {
    try {
      await checkpoints.get(record, { tenant: TENANT });
    } catch (err) {
      if (err instanceof EntityNotFound && err.details["reason"] === "erased") return;
      throw err;
    }
    assert.ok(Date.now() < deadline, "the checkpoint service did not erase the data subject's records within 10 s");
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("a thread's data subject names its records and their events; the ledger's erasure of it leaves the thread empty, another intact", { skip }, async () => {
  const subject = `customer-${newId()}`;
  const [mine, deleted, other] = [`lg-${newId()}`, `lg-${newId()}`, `lg-${newId()}`];
  const values = { messages: ["marker-theirs-4be1c9"] };
  // As LangGraph.js calls its checkpointer: the run's configurable, data_subject in it, on every put and putWrites.
  const run = async (thread: string, dataSubject?: string) => {
    const configurable = { thread_id: thread, checkpoint_ns: "", ...(dataSubject ? { data_subject: dataSubject } : {}) };
    const first = await saver.put({ configurable }, { ...emptyCheckpoint(), id: uuid6(20), channel_values: values }, meta, {});
    await saver.putWrites({ configurable: { ...configurable, checkpoint_id: first.configurable?.["checkpoint_id"] } }, [["messages", "a pending write"]], "task-1");
    return saver.put({ configurable: { ...configurable, checkpoint_id: first.configurable?.["checkpoint_id"] } }, { ...emptyCheckpoint(), id: uuid6(21), channel_values: values }, meta, {});
  };
  const latest = await run(mine, subject);
  await run(deleted, subject);
  await run(other);

  const records = await threadRecords(mine);
  assert.deepEqual(new Set(records.map((r) => r.format)), new Set([CHECKPOINT_FORMAT, WRITES_FORMAT]));
  assert.deepEqual(new Set(records.map((r) => r.data_subject)), new Set([subject]));
  assert.ok((await threadRecords(other)).every((r) => !r.data_subject));
  const events = (await saver.client.loadSession(mine, { tenant: TENANT })).events;
  assert.deepEqual(events.map((e) => [e["event_type"], e["data_subject"]]), [[CHECKPOINT_EVENT, subject], [WRITES_EVENT, subject], [CHECKPOINT_EVENT, subject]]);
  // A delete's erasure event lists digests of the subject's records: it names the subject too.
  await saver.deleteThread(deleted);
  const erasedEvent = (await saver.client.loadSession(deleted, { tenant: TENANT })).events.find((e) => e["event_type"] === ERASED_EVENT);
  assert.equal(erasedEvent?.["data_subject"], subject);

  const erasure = await saver.client.erase({ dataSubject: subject, actorId: saver.actorId as string, reason: "Art. 17", tenant: TENANT });
  assert.ok(erasure.erasure && !erasure.has_more, "the erasure is committed and done");
  await Promise.all(records.map((r) => erasedByTheService(r.id)));

  assert.equal(await saver.getTuple({ configurable: { thread_id: mine, checkpoint_ns: "" } }), undefined);
  assert.equal(await saver.getTuple(latest), undefined);
  const listed = [];
  for await (const t of saver.list({ configurable: { thread_id: mine } })) listed.push(t);
  assert.deepEqual(listed, []);
  assert.deepEqual(await threadRecords(mine), []);
  // The thread's events and the delete's erasure event, in their erased form: no payload.
  for (const thread of [mine, deleted]) {
    const erased = (await saver.client.loadSession(thread, { tenant: TENANT })).events;
    assert.ok(erased.length && erased.every((e) => JSON.stringify(e["payload"]) === "{}" && typeof e["content_digest"] === "string"), JSON.stringify(erased));
  }
  const kept = await saver.getTuple({ configurable: { thread_id: other, checkpoint_ns: "" } });
  assert.deepEqual(kept?.checkpoint.channel_values, values);
  assert.ok((await saver.client.loadSession(other, { tenant: TENANT })).events.every((e) => JSON.stringify(e["payload"]) !== "{}"));
});
