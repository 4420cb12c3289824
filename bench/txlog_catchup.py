"""Catch-up reads of the transaction log: how fast a writer that fell behind
(a standby back from a network cut, a sequencer restarted on an old file)
reads LEDGER_TXLOG's records (store/txlogstream.py, spec/replication.md).

    .venv/bin/python bench/txlog_catchup.py [--records 2000] [--record-bytes 1500]
        [--windows 4,16,32] [--cluster] [--burn 0]

Everything runs on 127.0.0.1 in a temporary directory: a nats-server (or,
``--cluster``, a three-node cluster with an R3 log, the reader on the first
node). ``--records`` one-part records are appended to LEDGER_TXLOG, then read
back from a worker thread as the writer reads them, in two ways:

* **one get per round trip**: each message fetched and waited for before the
  next (what the writer did before reads were pipelined);
* **pipelined, window W**: ``JetStreamTxLog.read_after`` with ``READ_WINDOW``
  set to each of ``--windows`` (W gets in flight, the next W while the
  reader takes these).

Only the reads are timed (the writer's SQLite work is not). ``--burn N``
runs N busy-looping processes meanwhile, as a loaded machine. Printed:
records/s per way, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "shared"))

from laneledger.contract.subjects import Subjects  # noqa: E402
from laneledger.devtools.natscluster import NatsCluster  # noqa: E402
from laneledger.devtools.natsserver import NatsServer  # noqa: E402
from laneledger.services.sequencer.streams import ensure_stream, txlog_stream_config  # noqa: E402
from laneledger.store import txlogstream  # noqa: E402
from laneledger.store.txlogstream import JetStreamTxLog  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def one_get_per_round_trip(txlog: JetStreamTxLog, last: int) -> int:
    for seq in range(1, last + 1):
        txlog._wait(txlog._get(seq))  # the old read path, for comparison
    return last


def pipelined(txlog: JetStreamTxLog, last: int) -> int:
    records, end = txlog.read_after(0)
    assert end == last
    return sum(1 for _ in records)


async def timed(read: Callable[[JetStreamTxLog, int], int], txlog: JetStreamTxLog, last: int) -> float:
    start = time.perf_counter()
    got = await asyncio.to_thread(read, txlog, last)
    elapsed = time.perf_counter() - start
    assert got == last, f"read {got} of {last} records"
    return last / elapsed


async def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="txlog-catchup-bench-") as tmp:
        base = Path(tmp)
        cluster = server = None
        if args.cluster:
            cluster = NatsCluster(base / "cluster").start()
            urls, replicas = cluster.urls, 3
        else:
            server = NatsServer(base / "nats").start()
            urls, replicas = [server.url], 1
        try:
            nc = await nats.connect(urls[0])  # the reader's one node
            try:
                js = nc.jetstream()
                subjects = Subjects()
                await ensure_stream(js, txlog_stream_config(subjects, replicas))
                txlog = JetStreamTxLog(js, subjects, asyncio.get_running_loop(), max_payload=nc.max_payload)
                record = bytes(args.record_bytes)
                last = 0
                for _ in range(args.records):
                    last = await txlog.append_async(record, after=last)
                rates = {"one get per round trip": await timed(one_get_per_round_trip, txlog, last)}
                for window in args.windows:
                    txlogstream.READ_WINDOW = window
                    rates[f"pipelined, window {window}"] = await timed(pipelined, txlog, last)
            finally:
                await nc.close()
        finally:
            if cluster is not None:
                cluster.stop()
            if server is not None:
                server.stop()
    for way, rate in rates.items():
        log(f"{way}: {rate:,.0f} records/s")
    return {
        "records": args.records,
        "record_bytes": args.record_bytes,
        "cluster": args.cluster,
        "burn": args.burn,
        "records_per_s": {way: round(rate) for way, rate in rates.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=2000, help="records on the log (default 2000)")
    p.add_argument("--record-bytes", type=int, default=1500, help="bytes per record (default 1500)")
    p.add_argument(
        "--windows",
        type=lambda text: [int(w) for w in text.split(",")],
        default=[4, 16, 32],
        help="READ_WINDOW values to try, comma-separated (default 4,16,32)",
    )
    p.add_argument("--cluster", action="store_true", help="a three-node cluster with an R3 log")
    p.add_argument("--burn", type=int, default=0, help="busy-looping processes meanwhile (default 0)")
    args = p.parse_args(argv)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burn)]
    try:
        print(json.dumps(asyncio.run(run(args))), flush=True)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
