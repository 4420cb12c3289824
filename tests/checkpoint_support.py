"""The checkpoint service as a real OS process, for its tests (not a test module).

* ``CheckpointProcess``: ``python -m laneledger.services.checkpoint``, with
  ``kill()`` (SIGKILL) and ``restart()``.

The in-process ``checkpoint_service`` and ``checkpoints`` fixtures are in
checkpoint_fixtures.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from service_process import ServiceProcess


class CheckpointProcess(ServiceProcess):
    """``python -m laneledger.services.checkpoint`` on ``data_dir``; its logs beside it."""

    def __init__(
        self, nats_url: str, data_dir: str | os.PathLike[str], *, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.nats_url = nats_url
        self.data_dir = Path(data_dir)
        super().__init__(
            "laneledger.services.checkpoint",
            [
                "--nats",
                nats_url,
                "--data",
                str(self.data_dir),
                "--http-host",
                "127.0.0.1",
                "--http-port",
                "0",
                *extra_args,
            ],
            self.data_dir.parent,
            log_name=self.data_dir.name,
        )
