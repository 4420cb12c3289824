// A producer process for crash tests (tests/test_sdk_ts.py): appends COUNT
// one-event appends to one lane, each waiting for its commit, and prints one
// JSON line per receipt it was given ({append_id, last_seq, digest,
// positions, waited_ms}): what the producer was told, which the ledger must keep.
//
//   node dist/tools/producer.js <nats-url> <session> <count>

import { LaneRecorder, LedgerClient } from "../src/index.js";

const [url, session, count] = process.argv.slice(2);
if (url === undefined || session === undefined || count === undefined) {
  console.error("usage: producer.js <nats-url> <session> <count>");
  process.exit(2);
}
const client = await LedgerClient.connect(url, { timeoutMs: 2000 });
try {
  const actor = await client.ensureActor("acme", "agent:ts-producer@1", "agent");
  const lane = await LaneRecorder.open(client, "acme", session, "r1", "crash", { actorId: actor.id });
  for (let i = 0; i < Number(count); i++) {
    // Retried with the same append id while the sequencer is away: a resend is safe.
    const started = performance.now();
    const receipt = await lane.append([lane.event("note.acme.step", { actorId: actor.id, payload: { i } })], { retries: 30 });
    console.log(JSON.stringify({ append_id: receipt.append_id, last_seq: receipt.last_seq, digest: receipt.digest, positions: receipt.positions, waited_ms: Math.round(performance.now() - started) }));
  }
} finally {
  await client.close();
}
