import { LaneledgerSaver } from "@laneledger/sdk/langgraph";

// The checkpointer of a LangGraph.js graph: builder.compile({ checkpointer: saver }).
const saver = await LaneledgerSaver.connect("nats://127.0.0.1:4222", { tenant: "acme" });
const latest = await saver.getTuple({ configurable: { thread_id: "thread-1" } });
console.log(latest?.checkpoint.id, latest?.metadata?.step);
await saver.close();
