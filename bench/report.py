"""Run the benchmarks and write the docs' performance table (docs/performance.md) from what they print.

    .venv/bin/python bench/report.py            # run every benchmark, store results, rewrite the table
    .venv/bin/python bench/report.py --only rss # run some of them (names below), then rewrite
    .venv/bin/python bench/report.py --render   # rewrite the table from the stored results only
    .venv/bin/python bench/report.py --check    # fail if the table is not what --render writes

Each benchmark ends by printing one JSON line; that line, with the command,
the time and a description of the machine, is stored in
``bench/results/<name>.json`` (committed, so every figure in the docs can
be traced to a run). The table between the ``bench-table`` markers in
docs/performance.md is generated from those files and nothing else: a row
edited by hand fails ``--check`` (tests/test_perf_table.py). A figure
measured outside this script (an A/B over two checkouts) is stored as such a
file too, with a ``note`` saying how it was made, under a bench with no
``args``: ``--render`` shows it, a run never overwrites it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- bench-table:begin -->", "<!-- bench-table:end -->"


@dataclass(frozen=True)
class Bench:
    name: str
    args: list[str] | None  # after `python`; None: measured by hand, stored, never run from here
    rows: Callable[[dict], list[tuple[str, str]]]  # (what, figure) rows from its JSON line


def _n(x: float) -> str:
    return f"{x:,.0f}"


def _append_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            f"committed appends, max load, {r['producers']} producer processes, {r['events_per_append']} "
            f"event of ~{r['mean_event_bytes']:.0f} bytes per append, every guarantee on",
            f"{_n(r['committed_per_s'])} events/s",
        ),
        (
            "raw JetStream `publish_async` of the same request bodies, same run",
            f"{_n(r['raw_publish_per_s'])} events/s",
        ),
        ("ratio committed / raw (issue 36's target: 0.30)", f"{r['ratio']:.2f}"),
        (
            f"receipt latency at {r['load_fraction'] * 100:g} % of max load "
            "(submit → receipt; issue 36's target: p50 ≤ 4 ms, p99 ≤ 12 ms)",
            f"p50 {r['receipt_p50_ms_at_20pct']:.1f} ms, p99 {r['receipt_p99_ms_at_20pct']:.1f} ms",
        ),
        *(
            [
                (
                    "ceiling: the same producers against a stand-in sequencer that does only its NATS "
                    "traffic (`bench/null_sequencer.py`), same run",
                    f"{_n(r['ceiling_per_s'])} events/s, ratio {r['ceiling_ratio']:.2f}",
                )
            ]
            if "ceiling_per_s" in r
            else []
        ),
        *(
            [
                (
                    "committed appends, max load, bare producers "
                    "(the raw phase's publishing, no SDK; issue 36's target ratio: 0.50), same run",
                    f"{_n(r['bare_committed_per_s'])} events/s, ratio {r['bare_ratio']:.2f}",
                ),
                (
                    "ceiling with bare producers, same run",
                    f"{_n(r['bare_ceiling_per_s'])} events/s, ratio {r['bare_ceiling_ratio']:.2f}",
                ),
            ]
            if "bare_ceiling_per_s" in r
            else []
        ),
        *(
            [
                (
                    "ceiling of a design without the committed stream's mirror: the stand-in publishing "
                    "nothing to LEDGER_EVENTS (`--no-mirror`), SDK / bare producers, same run",
                    f"ratio {r['unmirrored_ceiling_ratio']:.2f} / {r['unmirrored_bare_ceiling_ratio']:.2f}",
                )
            ]
            if "unmirrored_bare_ceiling_ratio" in r
            else []
        ),
    ]


def _latency_rows(r: dict) -> list[tuple[str, str]]:
    """A run of bench/append.py for its latency phase at another load."""
    return [
        (
            f"the same receipt latency at {r['load_fraction'] * 100:g} % of max load "
            f"({_n(r['offered_per_s_latency_phase'])} events/s; the machine "
            f"{r['cpu_cores_20pct']['machine_busy']:.2f} of {r['cpu_count']} cores busy)",
            f"p50 {r['receipt_p50_ms_at_20pct']:.1f} ms, p99 {r['receipt_p99_ms_at_20pct']:.1f} ms",
        )
    ]


def _txlog_rows(r: dict) -> list[tuple[str, str]]:
    """bench/append.py --txlog-off-too: committing through LEDGER_TXLOG, and not."""
    where = "three-node loopback cluster, R3 streams" if r.get("cluster") else "one nats-server"
    return [
        (
            f"committed appends, max load ({where}), with the replicated transaction log (the default) / "
            "`--txlog off` (the SQLite file alone), same run",
            f"{_n(r['committed_per_s'])} / {_n(r['txlog_off_committed_per_s'])} events/s",
        ),
        (
            f"receipt latency at the same offered load ({where}, {_n(r['offered_per_s_latency_phase'])} "
            "events/s), "
            "with the transaction log / `--txlog off`, same run",
            f"p50 {r['receipt_p50_ms_at_20pct']:.1f} ms, p99 {r['receipt_p99_ms_at_20pct']:.1f} ms / "
            f"p50 {r['txlog_off_receipt_p50_ms_at_20pct']:.1f} ms, "
            f"p99 {r['txlog_off_receipt_p99_ms_at_20pct']:.1f} ms",
        ),
    ]


def _failover_rows(r: dict) -> list[tuple[str, str]]:
    where = "a three-node cluster, R3" if r["cluster"] else "one nats-server"
    return [
        (
            f"failover: the active sequencer SIGKILLed {r['kills']} times ({where}, lease TTL "
            f"{r['lease_ttl_s']:g} s, {r['lanes']} producers): from its lease's expiry to the standby's "
            "first commit / the longest a producer waited for a receipt",
            f"p50 {r['expiry_to_first_commit_p50_ms']:.0f} ms, "
            f"max {r['expiry_to_first_commit_max_ms']:.0f} ms / "
            f"p50 {r['producer_gap_p50_ms']:.0f} ms, max {r['producer_gap_max_ms']:.0f} ms",
        )
    ]


def _txlog_catchup_rows(r: dict) -> list[tuple[str, str]]:
    where = "a three-node cluster, R3 log" if r["cluster"] else "one nats-server"
    load = f", {r['burn']} busy-looping processes on the machine" if r["burn"] else ""
    rates = r["records_per_s"]
    windows = ", ".join(
        f"{way.removeprefix('pipelined, ')}: {_n(rate)}"
        for way, rate in rates.items()
        if way != "one get per round trip"
    )
    return [
        (
            f"catch-up reads of `LEDGER_TXLOG` ({r['records']} one-part records of "
            f"{r['record_bytes']} bytes, {where}{load}; the writer's SQLite work not timed): one get "
            "per round trip (the read before 2026-12-05) / pipelined by `READ_WINDOW` (16 since)",
            f"{_n(rates['one get per round trip'])} / {windows} records/s",
        )
    ]


def _tail_rows(r: dict) -> list[tuple[str, str]]:
    plural = "s" if r["subscribers"] != 1 else ""
    return [
        (
            f"SSE delivery, commit → frame, {r['subscribers']} subscriber{plural}, at "
            f"{r['load_fraction'] * 100:g} % of max append load ({_n(r['offered_events_per_s'])} events/s)",
            f"p50 {r['sse_p50_ms']:.1f} ms, p99 {r['sse_p99_ms']:.1f} ms, every frame in order: "
            f"{'yes' if r['lossless'] else 'NO'}",
        )
    ]


def _drain_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            f"the sequencer alone, draining a pre-loaded backlog ({r['events_per_append']} event per append)",
            f"{_n(r['events_per_s'])} events/s, {r['cpu_us_per_event']:.0f} µs CPU/event",
        )
    ]


def _peers_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            f"beside python `eventsourcing` on SQLite (one fsync per append, ~"
            f"{r['eventsourcing_sqlite']['mean_event_bytes']}-byte events), {n} event(s) per append, "
            f"median of {r['rounds']} interleaved rounds: laneledger's sequencer / eventsourcing",
            f"{_n(r[f'per_append_{n}']['laneledger']['events_per_s'])} / "
            f"{_n(r[f'per_append_{n}']['eventsourcing']['events_per_s'])} events/s "
            f"({r[f'per_append_{n}']['ratio']:.1f}×)",
        )
        for n in (1, 10)
    ]


def _canonical_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            f"RFC 8785 encoding of a {r['event_bytes']}-byte event",
            f"{r['ours_us']:.1f} µs (the `rfc8785` package: {r['rfc8785_us']:.0f} µs)",
        )
    ]


def _verify_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            f"`laneledger verify --db` over {_n(r['events'])} events in {r['lanes']} lanes, every event "
            f"causally linked, every {r['signed_every']}th append signed",
            f"{_n(r['events_per_s'])} events/s; Python heap peak {r['heap_peak_mib']:.2f} MiB "
            f"(at {_n(r['runs'][0]['events'])} events: {r['runs'][0]['heap_peak_mib']:.2f} MiB)",
        )
    ]


def _verify_stream_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            f"`laneledger verify --nats` stream comparison over {_n(r['events'])} events of "
            f"{r['event_kib']} KiB inline ({r['stream_mib']} MiB), in byte-bounded pulls",
            f"{r['mib_per_s']} MiB/s; Python heap peak {r['heap_peak_mib']:.1f} MiB",
        )
    ]


def _drain_signed_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            "the same, every append signed by an ed25519-registered actor (every signature verified)",
            f"{_n(r['events_per_s'])} events/s, {r['cpu_us_per_event']:.0f} µs CPU/event",
        )
    ]


def _drain_batched_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            f"the same with {r['events_per_append']} events per append",
            f"{_n(r['events_per_s'])} events/s, {r['cpu_us_per_event']:.0f} µs CPU/event",
        )
    ]


def _redaction_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            "redaction in the sequencer's step 0 / the SDK's content step (redact, content references)",
            f"+{r['redaction_added_us']:.1f} µs CPU/event / {r['sdk_content_us']:.1f} µs CPU/event",
        )
    ]


def _redaction_adversarial_rows(r: dict) -> list[tuple[str, str]]:
    rules = r["rules"]
    after = max(rules, key=lambda rule: rules[rule]["after_ms"])
    before = max(rules, key=lambda rule: rules[rule]["before_ms"])
    worst = rules[before]
    # bench/redaction.py times a rule too slow on a tenth of the input as
    # a quadratic one: that tenth's time x 100, an estimate.
    before_figure = (
        f"~{worst['before_ms'] / 1000:.0f} s (`{before}`, quadratic)"
        if worst.get("before_estimated")
        else f"{worst['before_ms']:.0f} ms (`{before}`)"
    )
    size = f"{r['kib'] // 1024} MiB" if r["kib"] % 1024 == 0 else f"{r['kib']} KiB"
    return [
        (
            f"redaction of {size} built against one rule (BEGIN markers without END, "
            "`eyJ-` chains, floods of matches, …), worst rule: after / before (per rule: `spec/content.md`)",
            f"{rules[after]['after_ms']:.0f} ms CPU (`{after}`) / {before_figure}",
        )
    ]


def _drain_ab_rows(r: dict) -> list[tuple[str, str]]:
    def span(side: str, key: str) -> str:
        low, high = r[side][key]
        return f"{low:.0f}–{high:.0f}"

    return [
        (
            f"the sequencer alone draining {_n(r['requests'])} one-event appends, A/B of {r['change']}, "
            f"{r['rounds']} alternated rounds on a machine loaded by other work (its events/s not "
            "comparable): after / before",
            f"{span('after', 'cpu_us_per_event')} / {span('before', 'cpu_us_per_event')} µs CPU/event, "
            f"{span('after', 'writer_cpu_us_per_event')} / {span('before', 'writer_cpu_us_per_event')} µs "
            "of it in the ledger writer",
        )
    ]


def _rss_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            f"sequencer RSS across {_n(r['events'])} events ({r['events_per_append']} per append, "
            f"{r['lanes']} lanes)",
            f"{r['rss_mib_at_10pct']:.1f} MiB at 10 % → {r['rss_mib_at_end']:.1f} MiB at the end "
            f"({r['rss_growth_mib_10pct_to_end']:+.1f} MiB)",
        )
    ]


def _fairness_rows(r: dict) -> list[tuple[str, str]]:
    runs = {run["run"]: run for run in r["runs"]}

    def latency(run: dict) -> str:
        return f"p50 {run['globex_receipt_p50_ms']:.1f} ms, p99 {run['globex_receipt_p99_ms']:.1f} ms"

    shared, tenants = runs["one shared stream"], runs["per-tenant streams"]
    unlimited = runs["per-tenant streams, acme's rate unlimited"]
    return [
        (
            f"fairness: tenant globex's receipt latency at {r['globex_rate']:g} appends/s while tenant acme "
            f"floods, `deploy/tenants.toml` limits (acme taken at {_n(r['acme_append_rate'])} tokens/s; "
            "target p99 ≤ 30 ms)",
            latency(tenants),
        ),
        (
            f"the same with one shared append stream (no tenants file; acme committed "
            f"{_n(shared['acme_committed_per_s'])}/s), same run",
            latency(shared),
        ),
        (
            f"the same with per-tenant streams but acme's rate unlimited (acme committed "
            f"{_n(unlimited['acme_committed_per_s'])}/s), same run",
            latency(unlimited),
        ),
        *(
            (
                f"the same while acme floods {kind}, {limits} (acme committed "
                f"{_n(run['acme_events_per_s'])} events/s), same run",
                latency(run),
            )
            for kind in ("0.9 MiB requests", "1000-event requests")
            for limits, name in (
                ("`deploy/tenants.toml` limits", f"{kind}, per-tenant streams"),
                ("acme's rate unlimited", f"{kind}, per-tenant streams, acme's rate unlimited"),
            )
            if (run := runs.get(name)) is not None
        ),
    ]


def _langgraph_rows(r: dict) -> list[tuple[str, str]]:
    def figure(f: dict) -> str:
        return f"{_n(f['per_s'])}/s, p50 {f['p50_ms']:.1f} ms, p99 {f['p99_ms']:.1f} ms"

    ours, sqlite = r["savers"]["laneledger"], r["savers"]["sqlite"]
    return [
        (
            f"LangGraph `{op}`, {int(size) // 1024} KiB of channel state, one thread, sequential: "
            "`LaneledgerSaver` / `langgraph-checkpoint-sqlite`'s `AsyncSqliteSaver`, same run",
            f"{figure(ours[size][op])} / {figure(sqlite[size][op])}",
        )
        for size in ours
        for op in ("aput", "aget_tuple", "alist")
    ]


def _mcp_notify_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            f"MCP subscription: commit → `notifications/resources/updated` at the client, {_n(r['events'])} "
            "events one at a time, `laneledger mcp --serve` over the tail (target ≤ 100 ms)",
            f"p50 {r['notify_p50_ms']:.1f} ms, p99 {r['notify_p99_ms']:.1f} ms, "
            f"max {r['notify_max_ms']:.1f} ms",
        ),
        (
            f"an idle MCP server with subscriptions open, {r['idle_s']:g} s: "
            "CPU of the MCP server / the tail",
            f"{r['idle_cpu_s_mcp']:.3f} / {r['idle_cpu_s_tail']:.3f} CPU s"
            + (
                f" (connected, no subscription: {r['idle_cpu_s_mcp_unsubscribed']:.3f} / "
                f"{r['idle_cpu_s_tail_unsubscribed']:.3f})"
                if "idle_cpu_s_mcp_unsubscribed" in r
                else ""
            ),
        ),
    ]


def _tlog_rows(r: dict) -> list[tuple[str, str]]:
    inc, con, cp = r["proofs"]["inclusion"], r["proofs"]["consistency"], r["checkpoint"]
    n = _n(r["events"])
    return [
        (
            f"the Merkle tree in the writer's transactions ({n} events, {r['events_per_txn']} per "
            "transaction): its own time per event, and its share of the per-event budget at the "
            f"throughput target ({_n(r['target_events_per_s'])} events/s; goal < 10 %)",
            f"{r['tree_us_per_event']:.1f} µs/event, {100 * r['tree_share_of_target_budget']:.1f} %; "
            f"{r['tree_bytes_per_leaf']:.0f} bytes/leaf on disk",
        ),
        (
            "the same writer batches without / with the tree, same run",
            f"{_n(r['plain_events_per_s'])} / {_n(r['tree_events_per_s'])} events/s, "
            f"{r['plain_cpu_us_per_event']} / {r['tree_cpu_us_per_event']} µs CPU/event",
        ),
        (
            f"inclusion / consistency proof at tree size {n}: generate from SQLite, verify, size",
            f"{inc['generate']['mean_us']:.0f} / {con['generate']['mean_us']:.0f} µs, "
            f"{inc['verify']['mean_us']:.0f} / {con['verify']['mean_us']:.0f} µs, "
            f"{inc['bytes_mean']} / {con['bytes_mean']} bytes (≤ {inc['hashes_max']} / "
            f"{con['hashes_max']} hashes)",
        ),
        (
            "a signed checkpoint: sign / open (Ed25519)",
            f"{cp['sign']['mean_us']:.0f} / {cp['open']['mean_us']:.0f} µs, {cp['bytes']} bytes",
        ),
    ]


def _openai_agents_rows(r: dict) -> list[tuple[str, str]]:
    model = (
        f"the first agent's two model calls taking {r['model_ms']:.0f} ms, the third none"
        if r["model_ms"]
        else "models answering at once"
    )
    off = r["off"]

    def run(f: dict) -> str:
        return f"p50 {f['p50_ms']:.1f} ms, p99 {f['p99_ms']:.1f} ms"

    return [
        (
            f"OpenAI Agents SDK run (tool, handoff, three model calls; {model}), `Runner.run` latency: "
            "tracing without a processor / `recorder.processor` / with `strict_tools` run hooks, same run",
            f"{run(off)} / {run(r['processor'])} / {run(r['strict'])}",
        ),
        (
            "the same, the recorder: time in the processor's callbacks on the run's thread; "
            "events recorded per second (processor / strict)",
            f"{r['processor']['callback_us']:.0f} µs per callback ({r['processor']['callbacks_per_run']:.0f} "
            f"per run); {_n(r['processor']['recorded_events_per_s'])} / "
            f"{_n(r['strict']['recorded_events_per_s'])} events/s",
        ),
    ]


def _sdk_ts_rows(r: dict) -> list[tuple[str, str]]:
    return [
        (
            f"{name} SDK producer: {r[key]['appends']:,} one-event appends over {r[key]['lanes']} lanes, "
            "each waiting for its receipt (committed events/s; submit → receipt; producer CPU per append)",
            f"{_n(r[key]['committed_per_s'])} events/s, p50 {r[key]['receipt_p50_ms']:.1f} ms, "
            f"p99 {r[key]['receipt_p99_ms']:.1f} ms, {r[key]['cpu_ms_per_append']:.2f} ms CPU",
        )
        for name, key in (("Python", "python"), ("TypeScript", "typescript"))
    ]


BENCHES = [
    Bench("canonical", ["bench/canonical.py"], _canonical_rows),
    Bench("append", ["bench/append.py", "--unmirrored-ceiling-too"], _append_rows),
    Bench("append-10pct", ["bench/append.py", "--load-fraction", "0.1", "--no-bare"], _latency_rows),
    Bench("append-2pct", ["bench/append.py", "--load-fraction", "0.02", "--no-bare"], _latency_rows),
    Bench("append-txlog", ["bench/append.py", "--no-bare", "--txlog-off-too"], _txlog_rows),
    Bench(
        "append-txlog-cluster", ["bench/append.py", "--no-bare", "--txlog-off-too", "--cluster"], _txlog_rows
    ),
    Bench("failover", ["bench/failover.py"], _failover_rows),
    Bench("failover-cluster", ["bench/failover.py", "--cluster"], _failover_rows),
    Bench("txlog-catchup", ["bench/txlog_catchup.py"], _txlog_catchup_rows),
    Bench(
        "txlog-catchup-loaded", ["bench/txlog_catchup.py", "--cluster", "--burn", "2"], _txlog_catchup_rows
    ),
    Bench("tail", ["bench/tail.py"], _tail_rows),
    Bench("tail-1", ["bench/tail.py", "--subscribers", "1", "--subscriber-procs", "1"], _tail_rows),
    Bench("drain", ["bench/drain.py"], _drain_rows),
    Bench(
        "drain-batched",
        ["bench/drain.py", "--events-per-append", "10", "--requests", "5000"],
        _drain_batched_rows,
    ),
    Bench("drain-signed", ["bench/drain.py", "--requests", "10000", "--signed"], _drain_signed_rows),
    Bench("drain-writer-speed-ab", None, _drain_ab_rows),
    Bench("peers", ["bench/peers.py"], _peers_rows),
    Bench("redaction", ["bench/redaction.py"], _redaction_rows),
    Bench("redaction-adversarial", ["bench/redaction.py", "--adversarial"], _redaction_adversarial_rows),
    Bench("verify", ["bench/verify.py"], _verify_rows),
    Bench("verify-stream", ["bench/verify.py", "--stream"], _verify_stream_rows),
    Bench("rss", ["bench/rss.py"], _rss_rows),
    Bench("fairness", ["bench/fairness.py", "--seconds", "8"], _fairness_rows),  # the stored run's length
    Bench("langgraph", ["bench/langgraph_savers.py"], _langgraph_rows),
    Bench("tlog", ["bench/tlog.py"], _tlog_rows),
    Bench("mcp-notify", ["bench/mcp_notify.py"], _mcp_notify_rows),
    Bench("openai-agents", ["bench/openai_agents.py"], _openai_agents_rows),
    Bench("sdk-ts", ["bench/sdk_ts.py"], _sdk_ts_rows),
    Bench("openai-agents-50ms", ["bench/openai_agents.py", "--model-ms", "50"], _openai_agents_rows),
]


def machine() -> str:
    cpu = "unknown CPU"
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def last_json_line(text: str) -> dict:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise ValueError("the benchmark printed no JSON line")


def run(bench: Bench) -> None:
    assert bench.args is not None
    cmd = [sys.executable, *bench.args]
    print(f"\n=== {bench.name}: {' '.join(['.venv/bin/python', *bench.args])}", flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # shown as it comes: these run for minutes
        sys.stdout.write(line)
        lines.append(line)
    if proc.wait() != 0:
        raise SystemExit(f"{bench.name} failed (exit code {proc.returncode}); its result is not stored")
    RESULTS.mkdir(exist_ok=True)
    record = {
        "command": " ".join([".venv/bin/python", *bench.args]),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "result": last_json_line("".join(lines)),
    }
    (RESULTS / f"{bench.name}.json").write_text(json.dumps(record, indent=1) + "\n")


def table() -> str:
    rows, machines, missing = [], set(), []
    unknown = {path.stem for path in RESULTS.glob("*.json")} - {bench.name for bench in BENCHES}
    if unknown:  # a stored result no bench renders would be a row lost without a word
        raise SystemExit(
            f"bench/results/ holds results no bench in bench/report.py renders: {sorted(unknown)}"
        )
    for bench in BENCHES:
        path = RESULTS / f"{bench.name}.json"
        if not path.exists():
            missing.append(bench.name)
            continue
        record = json.loads(path.read_text())
        machines.add(record["machine"])
        for what, figure in bench.rows(record["result"]):
            rows.append(f"| {what} | {figure} | `{record['command']}` ({record['at'][:10]}) |")
    head = [
        f"Measured on: {'; '.join(sorted(machines))}. Generated by `bench/report.py` from `bench/results/`."
    ]
    if missing:
        head.append(f"Not yet run: {', '.join(missing)}.")
    return "\n".join([*head, "", "| what | figure | command (run on) |", "|---|---|---|", *rows])


def rendered(page: str) -> str:
    """The page with its table block replaced by what bench/results/ holds."""
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(page):
        raise SystemExit(f"docs/performance.md has no {BEGIN} … {END} block")
    return pattern.sub(lambda _: f"{BEGIN}\n{table()}\n{END}", page)


def render() -> None:
    PAGE.write_text(rendered(PAGE.read_text()))
    print("docs/performance.md performance table rewritten")


def check(page: str) -> None:
    """Refuse a table that is not generated: a row edited by hand is a figure no command reproduces."""
    expected = rendered(page)
    if expected != page:
        diff = difflib.unified_diff(
            page.splitlines(), expected.splitlines(), "docs/performance.md", "--render", lineterm="", n=0
        )
        raise SystemExit(
            "docs/performance.md's table is not what `bench/report.py --render` writes from "
            "bench/results/ (store a result, then render):\n" + "\n".join(diff)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=[b.name for b in BENCHES if b.args is not None])
    parser.add_argument("--render", action="store_true", help="only rewrite the table from stored results")
    parser.add_argument(
        "--check", action="store_true", help="only check that the table is what --render would write"
    )
    args = parser.parse_args()
    if args.check:
        check(PAGE.read_text())
        print("docs/performance.md performance table is generated")
        return
    if not args.render:
        for bench in BENCHES:
            if bench.args is not None and (args.only is None or bench.name in args.only):
                run(bench)
    render()


if __name__ == "__main__":
    main()
