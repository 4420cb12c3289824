// The TypeScript producer of bench/sdk_ts.py (not meant to be run by hand):
// LANES lanes, each appending one-event appends back to back (each waits
// for its receipt), APPENDS in all; prints one JSON line: committed events/s,
// submit → receipt latency percentiles and this process's CPU seconds.
//
//   node dist/tools/bench.js <nats-url> <session> <appends> <lanes>

import { LaneRecorder, LedgerClient } from "../src/index.js";

const [url, session, appendsArg, lanesArg] = process.argv.slice(2);
if (url === undefined || session === undefined || appendsArg === undefined || lanesArg === undefined) {
  console.error("usage: bench.js <nats-url> <session> <appends> <lanes>");
  process.exit(2);
}
const appends = Number(appendsArg);
const lanes = Number(lanesArg);
const client = await LedgerClient.connect(url);
try {
  const actor = await client.ensureActor("acme", "agent:bench-ts@1", "agent");
  const recorders = await Promise.all(Array.from({ length: lanes }, (_, i) => LaneRecorder.open(client, "acme", session, "r1", `lane-${i}`, { actorId: actor.id })));
  const latencies: number[] = [];
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    recorders.map(async (lane, l) => {
      for (let i = l; i < appends; i += lanes) {
        const event = lane.event("note.bench.step", { actorId: actor.id, payload: { i, text: "a tool call's result, about a hundred bytes long: ".padEnd(100, "x") } });
        const started = performance.now();
        await lane.append([event]);
        latencies.push(performance.now() - started);
      }
    }),
  );
  const wall = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  latencies.sort((a, b) => a - b);
  const pct = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
  console.log(JSON.stringify({
    appends, lanes, wall_s: wall, committed_per_s: appends / wall,
    receipt_p50_ms: pct(0.5), receipt_p99_ms: pct(0.99),
    cpu_s: (cpu.user + cpu.system) / 1e6, cpu_ms_per_append: ((cpu.user + cpu.system) / 1e3) / appends,
  }));
} finally {
  await client.close();
}
