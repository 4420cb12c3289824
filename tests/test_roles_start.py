"""The role keeper's first try of the lease, in-process: a NATS still
settling (a new lease bucket with no leader yet) is waited out, not fatal."""

from __future__ import annotations

from typing import Any, cast

import nats.errors
import nats.js.errors
import pytest
from prometheus_client import CollectorRegistry

from services.sequencer.lease import LeaseSettings, LeaseThread
from services.sequencer.metrics import SequencerMetrics
from services.sequencer.roles import RoleKeeper


class FakeLease:
    """A LeaseThread whose first ``acquire``s fail as ``failures`` say."""

    def __init__(self, failures: list[Exception]) -> None:
        self.settings = LeaseSettings()
        self.seen_holder: str | None = "me"
        self._failures = failures
        self.tries = 0
        self.kept = False

    async def open(self) -> None:
        pass

    async def acquire(self) -> bool:
        self.tries += 1
        if self._failures:
            raise self._failures.pop(0)
        return True

    async def keep(self) -> None:
        self.kept = True

    async def stop_renewing(self) -> None:
        pass


class FakeSequencer:
    active = False

    async def activate(self) -> None:
        self.active = True

    async def stand_down(self) -> None:
        self.active = False

    async def follow(self) -> int:
        return 0

    def active_tasks(self) -> list[Any]:
        return []


def keeper(lease: FakeLease, seq: FakeSequencer) -> RoleKeeper:
    return RoleKeeper(seq, cast(LeaseThread, lease), SequencerMetrics(CollectorRegistry()))


async def test_a_lease_bucket_without_a_leader_yet_is_waited_out_at_start(caplog) -> None:
    lease = FakeLease([nats.js.errors.NoStreamResponseError(), nats.errors.NoRespondersError()])
    seq = FakeSequencer()
    await keeper(lease, seq).start()
    assert lease.tries == 3 and lease.kept and seq.active
    assert caplog.text.count("cannot try the lease yet") == 2


async def test_other_failures_of_the_first_try_still_end_the_start() -> None:
    lease = FakeLease([RuntimeError("a bug")])
    seq = FakeSequencer()
    with pytest.raises(RuntimeError, match="a bug"):
        await keeper(lease, seq).start()
    assert lease.tries == 1 and not seq.active
