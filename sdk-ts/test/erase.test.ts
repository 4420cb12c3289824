// LedgerClient.erasePage and erase without a server: the `erase` command's
// fields as the Python client names them, and erase's page loop (one
// erasure id, each page after the last, the counts summed, maxPages and
// budgetMs). The live counterpart (a real sequencer erasing) is in
// live.test.ts, run by tests/test_sdk_ts.py.

import assert from "node:assert/strict";
import { test } from "node:test";

import { LedgerClient, Redactor, Subjects, type ErasurePage } from "../src/index.js";

/** A client whose requests are kept and answered with `pages`, in order. */
function fakeLedger(pages: Partial<ErasurePage>[]): { client: LedgerClient; sent: Record<string, unknown>[] } {
  const sent: Record<string, unknown>[] = [];
  const client = Object.assign(Object.create(LedgerClient.prototype) as LedgerClient, {
    subjects: new Subjects(),
    tenant: undefined,
    redactor: new Redactor(),
    request: (subject: string, op: string, fields: Record<string, unknown>) => {
      sent.push({ subject, op, ...fields });
      const page = pages[sent.length - 1];
      assert.ok(page, `request ${sent.length} was not expected`);
      return Promise.resolve({ erasure_id: fields["erasure_id"], erasure: { position: 9, event_id: "e-9" }, erased: 0, already_erased: 0, unsealed: 0, has_more: false, next_after_position: 0, dry_run: false, ...page });
    },
  });
  return { client, sent };
}

const WHO = { actorId: "a-1", reason: "Art. 17 request" };

test("erasePage sends the Erase command's fields, snake_case, with Python's defaults; leaves out the scopes not given", async () => {
  const { client, sent } = fakeLedger([{}]);
  await client.erasePage({ ...WHO, dataSubject: "customer-42", erasureId: "x-1" });
  assert.deepEqual(sent, [
    { subject: new Subjects().command("erase"), op: "erase", erasure_id: "x-1", actor_id: "a-1", reason: "Art. 17 request", data_subject: "customer-42", after_position: 0, limit: 200, dry_run: false },
  ]);
  const { client: other, sent: otherSent } = fakeLedger([{}]);
  await other.erasePage({ ...WHO, sessionId: "s-1", runId: "r-1", committedBefore: "2026-01-01T00:00:00Z", erasureId: "x-3", afterPosition: 7, limit: 2, dryRun: true, tenant: "acme" });
  const { subject: _subject, op: _op, ...fields } = otherSent[0] as Record<string, unknown>;
  assert.deepEqual(fields, {
    erasure_id: "x-3", actor_id: "a-1", reason: "Art. 17 request", session_id: "s-1", run_id: "r-1", committed_before: "2026-01-01T00:00:00Z",
    after_position: 7, limit: 2, dry_run: true, tenant: "acme",
  });
});

const THREE_PAGES: Partial<ErasurePage>[] = [
  { erased: 2, has_more: true, next_after_position: 3 },
  { erased: 1, already_erased: 1, has_more: true, next_after_position: 5 },
  { unsealed: 1, has_more: false, next_after_position: 6, erasure: { position: 10, event_id: "e-10" } },
];

test("erase asks page after page with one fresh erasure id, and returns the last page with the counts of all", async () => {
  const { client, sent } = fakeLedger(THREE_PAGES);
  const done = await client.erase({ ...WHO, sessionId: "s-1", limit: 2, tenant: "acme" });
  assert.deepEqual(sent.map((s) => [s["after_position"], s["limit"], s["session_id"], s["tenant"]]), [[0, 2, "s-1", "acme"], [3, 2, "s-1", "acme"], [5, 2, "s-1", "acme"]]);
  const ids = new Set(sent.map((s) => s["erasure_id"]));
  assert.equal(ids.size, 1);
  assert.match(String(done.erasure_id), /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.ok(sent.every((s) => !("max_pages" in s) && !("budget_ms" in s)), "the loop's own options are not sent");
  assert.deepEqual(done, {
    erasure_id: sent[0]?.["erasure_id"], erasure: { position: 10, event_id: "e-10" }, erased: 3, already_erased: 1, unsealed: 1,
    has_more: false, next_after_position: 6, dry_run: false,
  });
  // Another call: another erasure id.
  const again = fakeLedger([{}]);
  await again.client.erase({ ...WHO, sessionId: "s-1" });
  assert.notEqual(again.sent[0]?.["erasure_id"], sent[0]?.["erasure_id"]);
});

test("erase continues a given erasure from afterPosition, and stops at maxPages or once budgetMs has passed, saying has_more", async () => {
  const byPages = fakeLedger(THREE_PAGES);
  const stopped = await byPages.client.erase({ ...WHO, dataSubject: "customer-42", erasureId: "x-1", afterPosition: 1, maxPages: 2 });
  assert.deepEqual(byPages.sent.map((s) => [s["erasure_id"], s["after_position"]]), [["x-1", 1], ["x-1", 3]]);
  assert.deepEqual([stopped.erased, stopped.already_erased, stopped.has_more, stopped.next_after_position], [3, 1, true, 5]);

  const byTime = fakeLedger(THREE_PAGES);
  const spent = await byTime.client.erase({ ...WHO, dataSubject: "customer-42", budgetMs: 0 });
  assert.equal(byTime.sent.length, 1);
  assert.deepEqual([spent.erased, spent.has_more, spent.next_after_position], [2, true, 3]);
});
