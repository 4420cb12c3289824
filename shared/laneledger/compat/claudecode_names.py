"""What Claude Code's names mean to laneledger: the importer's adapter
identity and guarantees, the human's actor key, tool names by effect and the
sub-agent's display id (spec/claude-code.md). Shared by the importer
(``laneledger.compat.claudecode``) and the live adapters."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection

from laneledger.sdk.guarantees import AdapterGuarantees

ADAPTER = "laneledger.claude-code"
# 2: each sub-agent its own lane and actor (1 merged those whose tool-use ids
# share 8 leading characters, i.e. all of them), the root prompt a human's,
# a sub-agent's turn ended by its spawning call's result.
ADAPTER_VERSION = "2"
RUNTIME = "claude-code"
# Who typed the prompt is not in a capture; a caller that knows says so.
DEFAULT_HUMAN = "human:unknown"


def is_human_key(key: str) -> bool:
    """Whether ``key`` is a human's actor key, ``human:<identifier>``."""
    return key.startswith("human:") and key != "human:"


IMPORT_GUARANTEES = AdapterGuarantees(
    adapter=ADAPTER,
    version=ADAPTER_VERSION,
    hooks={
        "run": "best_effort",
        "turn": "best_effort",
        "model_call": "best_effort",
        "tool_call": "best_effort",
        "requested_before_call": "unsupported",
        "outcome": "best_effort",
        "cost": "best_effort",
        "causation": "best_effort",
        "subagent": "best_effort",
        "streaming": "unsupported",
        "hitl": "unsupported",
    },
    recovery="none",
)

# Tool names (verbatim, as Claude Code sends them) by effect; anything else
# is "unknown". Spawning a sub-agent is "Task" on older versions, "Agent" on
# newer ones (Korg §2b).
READ_TOOLS = frozenset(
    {"Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch", "TodoRead", "NotebookRead", "BashOutput"}
)
WRITE_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit", "TodoWrite"})
SPAWN_TOOLS = frozenset({"Task", "Agent"})

# The <id8> of the actor key agent:<runtime>/sub-<id8>@<v> (spec/verify.md).
_DISPLAY_ID = re.compile(r"^[0-9A-Za-z_-]{8}$")


def subagent_display_id(ptuid: str, taken: Collection[str]) -> str:
    """The 8 characters naming the sub-agent spawned by tool call ``ptuid`` in
    its actor key (``agent:claude-code/sub-<id8>@<v>``), none of ``taken``
    (the session's sub-agents named before it).

    Korg §2b writes ``ptuid[:8]``, but every Claude Code tool-use id starts
    ``toolu_01``: the first 8 characters name every sub-agent alike. The last
    8 are the id's random part; where they are not 8 id characters, or an
    earlier sub-agent of the session has them, 8 hex digits of a digest of the
    id (and of a counter, until one is free). The name depends only on the id
    and the sub-agents before it, so a re-import names each one alike."""
    candidate, n = ptuid[-8:], 0
    while not _DISPLAY_ID.match(candidate) or candidate in taken:
        candidate = hashlib.sha256(f"{n}\0{ptuid}".encode()).hexdigest()[:8]
        n += 1
    return candidate


def tool_effect(name: str) -> str:
    if name in READ_TOOLS:
        return "read"
    if name in WRITE_TOOLS:
        return "write"
    return "unknown"
