import { LedgerClient } from "@laneledger/sdk";

// Erase every event naming a data subject (spec/erasure.md): every page, the counts summed.
const ledger = await LedgerClient.connect("nats://127.0.0.1:4222", { tenant: "acme" });
const dpo = await ledger.ensureActor("acme", "human:dpo", "human");
const done = await ledger.erase({ dataSubject: "customer-42", actorId: dpo.id, reason: "Art. 17 request" });
console.log(done.erasure_id, done.erased, done.already_erased);
await ledger.close();
