"""What a framework adapter actually guarantees, as data (spec/adapters.md).

Every adapter publishes, per recording hook, whether it records it
``strict`` (committed in order, before the effect where that applies, and a
failure to commit stops the harness), ``best_effort`` (recorded when seen,
possibly after the fact or incomplete) or ``unsupported`` (never recorded),
and which kind of recovery it supports. The adapter puts this object in the
payload of the ``run.started`` it writes (``payload.adapter``), so whoever
reads the run knows how far to trust it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from laneledger.contract.errors import InvalidRequest

Level = Literal["strict", "best_effort", "unsupported"]
LEVELS: tuple[str, ...] = ("strict", "best_effort", "unsupported")

# The hooks every adapter states a level for.
HOOKS: tuple[str, ...] = (
    "run",  # run.started / run.completed
    "turn",  # turn.started / turn.completed|failed
    "model_call",  # an inference: request, outcome, tokens
    "tool_call",  # a tool call: request, outcome
    "requested_before_call",  # attempt.requested committed before the external call
    "outcome",  # attempt.completed|failed for every attempt that ended
    "cost",  # cost.recorded per billable call
    "causation",  # the §2a/§2b spines (laneledger.sdk.spine)
    "subagent",  # a sub-agent on its own lane and actor
    "streaming",  # stream.* deltas
    "hitl",  # hitl.paused / hitl.responded
)

# Recovery kinds: what a restarted harness can rebuild from the ledger.
RECOVERY_KINDS: tuple[str, ...] = (
    "native_state",  # a harness-native state binding: lossless
    "snapshot_and_outcome_replay",  # checkpoint + completed outcomes replayed
    "none",  # evidence only; nothing to resume from
)


class AdapterGuarantees(msgspec.Struct, frozen=True, kw_only=True):
    adapter: str
    version: str
    hooks: dict[str, Level]
    recovery: str

    def __post_init__(self) -> None:
        missing = [hook for hook in HOOKS if hook not in self.hooks]
        unknown = [hook for hook in self.hooks if hook not in HOOKS]
        if missing or unknown:
            raise InvalidRequest(
                "adapter guarantees must state every hook, and only those",
                path="$.hooks",
                missing=missing,
                unknown=unknown,
            )
        bad = {hook: level for hook, level in self.hooks.items() if level not in LEVELS}
        if bad:
            raise InvalidRequest(
                "a guarantee level is strict, best_effort or unsupported", path="$.hooks", found=bad
            )
        if self.recovery not in RECOVERY_KINDS:
            raise InvalidRequest(
                f"unknown recovery kind {self.recovery!r}", path="$.recovery", allowed=list(RECOVERY_KINDS)
            )

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = msgspec.to_builtins(self)  # a Struct becomes an object
        return payload

    @classmethod
    def from_payload(cls, value: Any) -> AdapterGuarantees:
        """Read guarantees back from a ``run.started`` payload's ``adapter``."""
        try:
            return msgspec.convert(value, cls)
        except msgspec.ValidationError as exc:
            raise InvalidRequest(f"not adapter guarantees: {exc}", path="$.payload.adapter") from exc
