"""Actor identity conventions (Korg §1.1, §2b, §6.5), as ``laneledger verify``
checks them (normative text: ``spec/verify.md``, "Actor identity").

An actor's ``key`` names who acts:

* ``agent:<name>@<version>`` — an agent runtime; in a multi-agent harness
  ``agent:<runtime>/main@<v>`` for the main agent and
  ``agent:<runtime>/sub-<id8>@<v>`` for each sub-agent, ``<id8>`` 8
  characters (of ``[0-9A-Za-z_-]``) derived from the parent tool-use id that
  spawned it and unique among the sub-agents of its session. Korg §2b writes
  the id's first 8, which every Claude Code id shares (``toolu_01``); the
  Claude Code importer's choice is ``compat.claudecode_names.subagent_display_id``
  (``spec/claude-code.md``, "Sub-agents"). The check here sees one key, so
  it checks that form, not the uniqueness;
* ``human:<identifier>``, ``korg:<component>``, ``mcp:<server>``,
  ``import:<source>@<version>``.

The sequencer accepts any key (the object model does not mandate one), so a
ledger that breaks a convention is not corrupt: the findings are warnings,
and errors only under ``laneledger verify --strict-actors`` (the dogfood
checklist's reading, where a non-conforming identity fails).
"""

from __future__ import annotations

import re

PREFIXES = ("agent", "human", "korg", "mcp", "import")
# The prefixes whose actors must have that kind (the others are services,
# tools or components of any kind).
KIND_OF_PREFIX = {"agent": "agent", "human": "human"}

_VERSIONED = re.compile(r"^(?P<name>[^@\s]+)@(?P<version>[^@\s]+)$")
_SPINE_ROLE = re.compile(r"^(main|sub-[0-9A-Za-z_-]{8})$")

# Finding kinds (stable; spec/verify.md).
ACTOR_PREFIX = "actor_prefix"
ACTOR_VERSION = "actor_version"
ACTOR_SPINE = "actor_spine"
ACTOR_KIND = "actor_kind"
FINDING_KINDS = (ACTOR_PREFIX, ACTOR_VERSION, ACTOR_SPINE, ACTOR_KIND)


def identity_findings(key: str, kind: str) -> list[tuple[str, str]]:
    """Every convention ``key`` (of an actor of ``kind``) breaks, as
    ``(finding kind, message)``; empty when it conforms."""
    prefix, colon, rest = key.partition(":")
    if not colon or prefix not in PREFIXES or not rest:
        return [
            (
                ACTOR_PREFIX,
                f"actor key {key!r} does not start with one of " + ", ".join(p + ":" for p in PREFIXES),
            )
        ]
    found: list[tuple[str, str]] = []
    if prefix in ("agent", "import"):
        versioned = _VERSIONED.match(rest)
        if versioned is None:
            found.append((ACTOR_VERSION, f"actor key {key!r} is not {prefix}:<name>@<version>"))
        elif prefix == "agent" and "/" in versioned["name"]:
            _, _, role = versioned["name"].rpartition("/")
            if not _SPINE_ROLE.match(role):
                found.append(
                    (
                        ACTOR_SPINE,
                        f"actor key {key!r}: a runtime's agent is "
                        "agent:<runtime>/main@<v> or "
                        "agent:<runtime>/sub-<id8>@<v>",
                    )
                )
    expected_kind = KIND_OF_PREFIX.get(prefix)
    if expected_kind is not None and kind != expected_kind:
        found.append(
            (
                ACTOR_KIND,
                f"actor key {key!r} has kind {kind!r}, a {prefix}: actor is of kind {expected_kind!r}",
            )
        )
    return found
