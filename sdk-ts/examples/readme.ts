import { LaneRecorder, LedgerClient } from "@laneledger/sdk";

const ledger = await LedgerClient.connect("nats://127.0.0.1:4222");
const agent = await ledger.ensureActor("acme", "agent:my-harness/main@1", "agent");
const lane = await LaneRecorder.open(ledger, "acme", "session-42", "run-1", "main", { actorId: agent.id });
const receipt = await lane.append([
  lane.event("run.started", { actorId: agent.id, subjectId: "run-1" }),
  lane.event("cost.recorded", { actorId: agent.id, payload: { provider: "anthropic", model: "claude", currency: "USD", amount: "0.0123", input_tokens: 1200, output_tokens: 300 } }),
]);
console.log(receipt.first_seq, receipt.last_seq, receipt.entry_hashes);
await ledger.close();
