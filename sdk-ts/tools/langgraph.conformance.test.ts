// LangGraph.js's conformance suite (@langchain/langgraph-checkpoint-validation,
// through its library entry `validate`: its CLI, 1.1.1, cannot import an
// initializer) against LaneledgerSaver, run by vitest:
// `vitest run --globals dist/tools/langgraph.conformance.test.js` with
// LANELEDGER_TS_NATS_URL naming a nats-server where the sequencer and the
// checkpoint service run (tests/test_sdk_ts.py starts them). Each checkpointer
// the suite creates writes as a tenant of its own, so no two see each other's
// threads (the suite's isolation rule), on the shared trusted connection.

import { randomBytes } from "node:crypto";
import { validate, type CheckpointSaverTestInitializer } from "@langchain/langgraph-checkpoint-validation";
import { LaneledgerSaver } from "../src/langgraph.js";

const url = process.env["LANELEDGER_TS_NATS_URL"];

const initializer: CheckpointSaverTestInitializer<LaneledgerSaver> = {
  checkpointerName: "@laneledger/sdk LaneledgerSaver",
  async createCheckpointer() {
    if (!url) throw new Error("LANELEDGER_TS_NATS_URL is not set: run it from tests/test_sdk_ts.py");
    return LaneledgerSaver.connect(url, { tenant: `lgv-${randomBytes(6).toString("hex")}` });
  },
  async destroyCheckpointer(saver) {
    await saver?.close(); // undefined when createCheckpointer failed
  },
};

validate(initializer);
