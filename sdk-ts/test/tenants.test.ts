// A tenant's producer user in its own NATS account, on the deployment as
// rendered (tests/test_sdk_ts.py passes producer-acme's and producer-globex's
// URLs in LANELEDGER_TS_ACME_URL, LANELEDGER_TS_GLOBEX_URL; skipped without).

import assert from "node:assert/strict";
import { test } from "node:test";

import { EntityNotFound, LaneRecorder, LedgerClient, LedgerUnavailable, TenantMismatch, newId } from "../src/index.js";

const ACME = process.env["LANELEDGER_TS_ACME_URL"];
const PRODUCER = process.env["LANELEDGER_TS_PRODUCER_URL"];
const GLOBEX = process.env["LANELEDGER_TS_GLOBEX_URL"];
const skip =
  ACME === undefined || GLOBEX === undefined || PRODUCER === undefined
    ? "LANELEDGER_TS_ACME_URL / _GLOBEX_URL / _PRODUCER_URL are not set (tests/test_sdk_ts.py sets them)"
    : false;

test("a tenant's client appends, uploads its blobs and sees no other tenant", { skip }, async () => {
  const acme = await LedgerClient.connect(ACME as string, { tenant: "acme", timeoutMs: 10_000 });
  const globex = await LedgerClient.connect(GLOBEX as string, { tenant: "globex", timeoutMs: 10_000 });
  try {
    const actor = (await acme.ensureActor("acme", "agent:ts-tenant@1", "agent")).id;
    const recorder = await LaneRecorder.open(acme, "acme", `ts-${newId()}`, "r1", "main", { actorId: actor });
    // A value over 1 KiB: uploaded into LEDGER_UPLOADS_acme, copied by the sequencer at commit.
    const big = "b".repeat(4000);
    const receipt = await recorder.append([recorder.event("note.acme.step", { actorId: actor, payload: { big, n: 1 } })]);
    assert.equal(receipt.last_seq, 1);
    const stored = (await acme.loadLane(recorder.lane.id)).events[0]?.["payload"] as Record<string, unknown>;
    assert.equal((stored["big"] as Record<string, unknown>)["size_bytes"], 4000);
    // The same blob again: found committed in LEDGER_BLOBS_acme, not uploaded twice.
    assert.equal((await recorder.append([recorder.event("note.acme.step", { actorId: actor, payload: { big, n: 2 } })])).last_seq, 2);

    // globex sees acme's lane as it sees a lane nobody has, and cannot write for acme.
    await assert.rejects(globex.getLane(recorder.lane.id), (err: unknown) => err instanceof EntityNotFound && err.details["kind"] === "lane");
    await assert.rejects(globex.ensureActor("acme", "agent:intruder@1", "agent"), TenantMismatch);
  } finally {
    await acme.close();
    await globex.close();
  }
});

test("the shared producer writes for several tenants, its receipts in each tenant's inbox", { skip }, async () => {
  const trusted = await LedgerClient.connect(PRODUCER as string, { tenantInboxes: true, timeoutMs: 10_000 });
  try {
    for (const tenant of ["acme", "globex"]) {
      const actor = (await trusted.ensureActor(tenant, "agent:ts-shared@1", "agent")).id;
      const recorder = await LaneRecorder.open(trusted, tenant, `ts-${newId()}`, "r1", "main", { actorId: actor });
      assert.equal((await recorder.append([recorder.event("note.acme.step", { actorId: actor })])).last_seq, 1);
    }
    // A tenant the tenants file does not declare has no append stream: refused at once, said why.
    const actor = (await trusted.ensureActor("initech", "agent:ts-shared@1", "agent")).id;
    const lane = await trusted.createLane("initech", `ts-${newId()}`, "r1", "main", { actorId: actor });
    await assert.rejects(trusted.submit(lane, 0, []), (err: unknown) => err instanceof LedgerUnavailable && /no stream takes/.test(err.message));
  } finally {
    await trusted.close();
  }
});
