"""The sequencer as a real OS process, for crash and multi-process tests.

::

    seq = SequencerProcess(nats_url, tmp_path / "ledger.db", log_dir=tmp_path)
    seq.start()                 # waits for "laneledger-sequencer ready http=... position=N"
    seq.pid, seq.http_url, seq.position
    seq.kill(); seq.restart(); seq.terminate(); seq.stop()

The process handling is ``service_process.ServiceProcess``'s.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from polling import eventually
from service_process import ServiceProcess, ServiceProcessError

SequencerProcessError = ServiceProcessError


class SequencerProcess(ServiceProcess):
    """``python -m laneledger.services.sequencer --http-port 0`` on ``db_path``."""

    def __init__(
        self,
        nats_url: str,
        db_path: str | os.PathLike[str],
        *,
        log_dir: str | os.PathLike[str] | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.nats_url = nats_url
        self.db_path = Path(db_path)
        super().__init__(
            "laneledger.services.sequencer",
            [
                "--nats",
                nats_url,
                "--db",
                str(self.db_path),
                "--http-host",
                "127.0.0.1",
                "--http-port",
                "0",
                *extra_args,
            ],
            log_dir if log_dir is not None else self.db_path.parent,
        )


def ledger_last_position(db: str | os.PathLike[str]) -> int:
    """The last committed position in a ledger file (read-only; 0 if empty)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
    finally:
        conn.close()


async def wait_for_ledger(db: str | os.PathLike[str], position: int, *, timeout: float = 30.0) -> None:
    """Until the ledger file has committed ``position``."""
    await eventually(
        lambda: ledger_last_position(db),
        until=lambda last: last >= position,
        what=f"the ledger {db} at position {position}",
        timeout=timeout,
    )


async def wait_for_stream(
    js, last_position: int, *, stream: str = "LEDGER_EVENTS", timeout: float = 15.0
) -> None:
    """Until the committed stream reaches ``last_position``: the sequencer
    publishes to it after sending the receipts."""
    await eventually(
        lambda: js.stream_info(stream),
        until=lambda info: info.state.last_seq >= last_position,
        what=f"{stream} at position {last_position}",
        timeout=timeout,
    )
