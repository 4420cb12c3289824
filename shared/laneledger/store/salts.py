"""Content salts for sealed events (spec/erasure.md): 32 random bytes each,
as 64 lowercase hex digits.

Drawn from the OS a few hundred at a time: one ``getrandom`` per event
released the GIL once per event on the writer's thread, where py-spy found
4 % of ``bench/drain.py``'s samples (its rate did not move beyond its noise:
docs/performance.md)."""

from __future__ import annotations

from collections.abc import Callable

SALT_BYTES = 32
_PER_DRAW = 256


class SaltSource:
    """Fresh salts, never one twice; the unused rest of a draw stays in this
    process's memory only, like the salts themselves until they commit."""

    def __init__(self, random_bytes: Callable[[int], bytes]) -> None:
        self._random_bytes = random_bytes  # os.urandom, but for a benchmark's seeded source
        self._hex = ""
        self._at = 0

    def next(self) -> str:
        if self._at == len(self._hex):
            self._hex = self._random_bytes(SALT_BYTES * _PER_DRAW).hex()
            self._at = 0
        at = self._at
        self._at = at + 2 * SALT_BYTES
        return self._hex[at : self._at]
