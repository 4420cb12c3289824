"""The sequencer as a process that dies in the one window the transaction log
opens: after LEDGER_TXLOG acknowledged a transaction, before the SQLite
``COMMIT`` (tests/test_txlog.py). ``python -m txlog_crash_sequencer ARGS``
(with tests/ on PYTHONPATH) runs the real sequencer with ARGS; its
``LANELEDGER_TEST_DIE_AFTER_TXLOG_APPEND``-th append to the log is its last:
the process exits with status 137, as SIGKILL would, the moment the append
returns."""

from __future__ import annotations

import os
import sys

from laneledger.services.sequencer.__main__ import main
from laneledger.store.txlogstream import JetStreamTxLog

DIE_AFTER = int(os.environ["LANELEDGER_TEST_DIE_AFTER_TXLOG_APPEND"])
# Every append ends here, on the event loop: a batch committed on the loop
# awaits it, one on the writer thread waits for it (JetStreamTxLog.append).
_real_append = JetStreamTxLog.append_async
_appends = 0


async def _append_then_die(self: JetStreamTxLog, record: bytes, *, after: int) -> int:
    global _appends
    seq = await _real_append(self, record, after=after)
    _appends += 1
    if _appends >= DIE_AFTER:
        os._exit(137)
    return seq


JetStreamTxLog.append_async = _append_then_die  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
