// Data subjects without a server: what the checkpoint client's erase sends
// (as the Python client sends it), and the data subjects the LangGraph saver
// and the OpenAI Agents recorder refuse before anything is sent. Their live
// counterparts are in langgraph.test.ts, openai_agents.test.ts and
// live.test.ts (run by tests/test_sdk_ts.py).

import assert from "node:assert/strict";
import { test } from "node:test";

import { emptyCheckpoint, uuid6 } from "@langchain/langgraph-checkpoint";
import { CheckpointClient, InvalidRequest, Redactor, Subjects, type LedgerClient } from "../src/index.js";
import { LaneledgerSaver } from "../src/langgraph.js";
import { OpenAIAgentsRecorder } from "../src/openai_agents.js";

/** A client that keeps what would be sent and answers each erase with one revision. */
function fakeLedger(): { ledger: LedgerClient; sent: Record<string, unknown>[] } {
  const sent: Record<string, unknown>[] = [];
  const ledger = {
    subjects: new Subjects(),
    tenant: undefined,
    redactor: new Redactor(),
    request: (subject: string, op: string, fields: Record<string, unknown>) => {
      sent.push({ subject, op, ...fields });
      return Promise.resolve({ erased: [{ id: `c-${sent.length}`, key: "k", revision: 1, format: "json", digest: "0".repeat(64) }], artifacts_erased: [], has_more: false });
    },
  };
  return { ledger: ledger as unknown as LedgerClient, sent };
}

test("erase sends dataSubject, createdBefore and keyPrefixes with the first batch only, as the Python client does", async () => {
  const { ledger, sent } = fakeLedger();
  const keys = Array.from({ length: 1500 }, (_, i) => `k-${i}`);
  const report = await new CheckpointClient(ledger).erase({
    keys, keyPrefixes: ["langgraph/"], dataSubject: "customer-42", createdBefore: "2026-01-01T00:00:00Z", dryRun: true, tenant: "acme",
  });
  assert.deepEqual(sent.map((s) => [s["subject"], s["op"], (s["keys"] as string[]).length, s["tenant"], s["dry_run"]]), [
    ["ledger.checkpoint.erase", "erase", 1000, "acme", true],
    ["ledger.checkpoint.erase", "erase", 500, "acme", true],
  ]);
  const [first, second] = sent as [Record<string, unknown>, Record<string, unknown>];
  assert.deepEqual([first["data_subject"], first["created_before"], first["key_prefixes"]], ["customer-42", "2026-01-01T00:00:00Z", ["langgraph/"]]);
  assert.deepEqual([second["data_subject"], second["created_before"], second["key_prefixes"]], [undefined, undefined, undefined]);
  assert.deepEqual(report.erased.map((c) => c.id), ["c-1", "c-2"]);
});

test("the LangGraph saver refuses a data subject that is not a non-empty string, before anything is sent", async () => {
  const { ledger, sent } = fakeLedger();
  const saver = new LaneledgerSaver(ledger, "acme");
  const meta = { source: "loop" as const, step: 1, parents: {} };
  const refused = (err: unknown) => err instanceof InvalidRequest && err.details["path"] === "$.configurable.data_subject";
  for (const subject of ["", 42, { id: "customer-42" }]) {
    await assert.rejects(saver.put({ configurable: { thread_id: "t-1", data_subject: subject } }, { ...emptyCheckpoint(), id: uuid6(0) }, meta, {}), refused);
    await assert.rejects(saver.putWrites({ configurable: { thread_id: "t-1", checkpoint_id: uuid6(0), data_subject: subject } }, [["c", 1]], "task"), refused);
  }
  assert.deepEqual(sent, []);
});

test("the OpenAI Agents recorder refuses an empty dataSubject when it is made", () => {
  const { ledger } = fakeLedger();
  assert.throws(() => new OpenAIAgentsRecorder(ledger, "acme", { dataSubject: "" }), (err: unknown) => err instanceof InvalidRequest && err.details["path"] === "$.dataSubject");
  assert.equal(new OpenAIAgentsRecorder(ledger, "acme", { dataSubject: "customer-42" }).opts.dataSubject, "customer-42");
});
