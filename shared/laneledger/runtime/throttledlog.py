"""A warning a requester can cause at will (a refused reply subject), logged
at most once per interval with how many like it came since, so that a flood
of bad requests is visible in the log without flooding it (issue 34: 3.4 MB
of warnings in ten minutes). The metrics count every one."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class ThrottledWarning:
    def __init__(
        self,
        log: logging.Logger,
        what: str,
        *,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log, self._what, self._every_s, self._clock = log, what, every_s, clock
        self._last: float | None = None
        self._unlogged = 0

    def note(self, detail: str) -> None:
        """One occurrence; logged (with the count of those not logged since
        the last line) unless a line went out less than ``every_s`` ago."""
        self._unlogged += 1
        now = self._clock()
        if self._last is not None and now - self._last < self._every_s:
            return
        self._log.warning("%s (%d since the last such line): %s", self._what, self._unlogged, detail)
        self._last, self._unlogged = now, 0
