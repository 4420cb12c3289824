import { Guard, LaneRecorder, LedgerClient } from "@laneledger/sdk";

declare function sendEmail(): Promise<string>; // your tool

const ledger = await LedgerClient.connect("nats://127.0.0.1:4222"); // { tenant: "acme" } for a producer-acme user
const agent = await ledger.ensureActor("acme", "agent:my-harness/main@1", "agent");
const lane = await LaneRecorder.open(ledger, "acme", "session-42", "run-1", "main", { actorId: agent.id });
await lane.append([lane.event("run.started", { actorId: agent.id, subjectId: "run-1" })]);

const guard = new Guard(lane, agent.id);
await guard.turn((turn) =>
  turn.toolCall("send_email", { effect: "write", idempotency: "none" }, (call) =>
    call.attempt(async (attempt) => attempt.complete({ result: await sendEmail() })), // runs after attempt.requested commits
  ),
);
await ledger.close();
