"""The vocabulary: constants == spec/vocabulary.json, the Agent Ledger part ==
its public vector, event-type and payload checks, families, and the worked
examples of spec/vocabulary.md."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from laneledger.contract import vocabulary as v
from laneledger.contract.errors import InvalidPayload, UnknownEventType
from laneledger.contract.model import ProposedEvent, decode, encode

ROOT = Path(__file__).resolve().parent.parent
SPEC = json.loads((ROOT / "spec" / "vocabulary.json").read_text())
AGENT_LEDGER = json.loads((ROOT / "spec" / "vectors" / "agent-ledger" / "vocabulary.json").read_text())
VOCABULARY_MD = (ROOT / "spec" / "vocabulary.md").read_text()


# -- (a) constants == spec ------------------------------------------------------------


def test_versions_match_spec() -> None:
    assert v.SCHEMA_VERSION == SPEC["schema_version"] == "1.0"
    assert SPEC["vocabulary_version"] == v.VOCABULARY_VERSION


def test_lists_match_spec_in_order() -> None:
    assert list(v.ACTION_TYPES) == SPEC["action_types"]
    assert list(v.EFFECT_KINDS) == SPEC["effect_kinds"]
    assert list(v.IDEMPOTENCY_CLASSES) == SPEC["idempotency"]
    assert list(v.AGENT_LEDGER_EVENT_TYPES) == SPEC["event_types"]
    assert list(v.LANELEDGER_EVENT_TYPES) == SPEC["laneledger_event_types"]


def test_dicts_match_spec() -> None:
    assert {k: list(kinds) for k, kinds in v.FAMILIES.items()} == SPEC["families"]
    assert list(v.FAMILIES) == list(SPEC["families"])
    assert {k: list(ts) for k, ts in v.TERMINAL_EVENT_TYPES.items()} == SPEC["terminal_event_types"]


def test_extension_rule_matches_spec() -> None:
    rule = SPEC["extension_rule"]
    assert v.EXTENSION_PATTERN.pattern == rule["pattern"]
    assert frozenset(rule["reserved_namespaces"]) == v.RESERVED_NAMESPACES
    assert len(rule["reserved_namespaces"]) == len(v.RESERVED_NAMESPACES)


def test_spec_has_no_keys_the_constants_do_not_cover() -> None:
    # A key added to vocabulary.json must get a constant (and a test) too.
    assert set(SPEC) == {
        "schema_version",
        "vocabulary_version",
        "action_types",
        "effect_kinds",
        "idempotency",
        "event_types",
        "laneledger_event_types",
        "families",
        "terminal_event_types",
        "extension_rule",
        "payloads",
    }


def test_core_event_types_are_the_two_lists_without_overlap() -> None:
    assert len(v.AGENT_LEDGER_EVENT_TYPES) == 18
    assert len(v.LANELEDGER_EVENT_TYPES) == 17
    assert not set(v.AGENT_LEDGER_EVENT_TYPES) & set(v.LANELEDGER_EVENT_TYPES)
    assert frozenset(SPEC["event_types"]) | frozenset(SPEC["laneledger_event_types"]) == v.CORE_EVENT_TYPES
    assert len(v.CORE_EVENT_TYPES) == 35


def test_agent_ledger_part_equals_the_public_vector_exactly() -> None:
    assert set(AGENT_LEDGER) == {
        "schema_version",
        "action_types",
        "effect_kinds",
        "idempotency",
        "event_types",
    }
    for key, value in AGENT_LEDGER.items():
        assert SPEC[key] == value, key
    assert AGENT_LEDGER["schema_version"] == v.SCHEMA_VERSION
    assert list(v.ACTION_TYPES) == AGENT_LEDGER["action_types"]
    assert list(v.EFFECT_KINDS) == AGENT_LEDGER["effect_kinds"]
    assert list(v.IDEMPOTENCY_CLASSES) == AGENT_LEDGER["idempotency"]
    assert list(v.AGENT_LEDGER_EVENT_TYPES) == AGENT_LEDGER["event_types"]


def test_terminal_types_are_core_and_of_their_own_kind() -> None:
    for kind, types in v.TERMINAL_EVENT_TYPES.items():
        assert types
        for event_type in types:
            assert event_type in v.CORE_EVENT_TYPES
            assert event_type.split(".", 1)[0] == kind
    assert "lane" not in v.TERMINAL_EVENT_TYPES


# -- (b) check_event_type ---------------------------------------------------------------


@pytest.mark.parametrize("event_type", sorted(SPEC["event_types"] + SPEC["laneledger_event_types"]))
def test_every_core_type_is_accepted_and_not_an_extension(event_type: str) -> None:
    v.check_event_type(event_type)
    assert not v.is_extension(event_type)


@pytest.mark.parametrize(
    "event_type",
    [
        "ext.acme.round_audit",
        "lane.framework.custom.thing",
        "tool.acme.audit",
        "run.acme.queued",
        "ext.acme-corp.v2.audit",
        "cost.acme.credit_note",
    ],
)
def test_well_formed_extensions_are_accepted(event_type: str) -> None:
    v.check_event_type(event_type)
    assert v.is_extension(event_type)


@pytest.mark.parametrize(
    "event_type",
    [
        "cost.refund",  # two segments, not core
        "run.paused",  # two segments, not core
        "ext.core.x",  # reserved namespace
        "lane.laneledger.thing",  # reserved namespace
        "Ext.acme.x",  # uppercase kind
        "ext.Acme.x",  # uppercase namespace
        "ext.acme.Round",  # uppercase name
        "RUN.STARTED",  # a core type, but not as spelled
        "ext..x",  # empty namespace
        ".ext.acme.x",  # empty kind
        "ext.acme.",  # empty name
        "ext.acme.x..y",  # empty segment inside the name
        "ext.acme.x.",  # trailing empty segment
        "ext.acme.x y",  # whitespace
        "",
        "ext",
        "1ext.acme.x",  # kind must start with a letter
    ],
)
def test_malformed_types_raise_unknown_event_type(event_type: str) -> None:
    with pytest.raises(UnknownEventType) as err:
        v.check_event_type(event_type)
    assert err.value.code == "unknown_event_type"
    assert err.value.details == {"event_type": event_type}


def test_reserved_namespace_message_names_it() -> None:
    with pytest.raises(UnknownEventType, match="reserved"):
        v.check_event_type("ext.core.x")


# -- (c) family_of ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event_type", "family"),
    [
        ("session.started", "lifecycle"),
        ("run.cancelled", "lifecycle"),
        ("lane.created", "lifecycle"),
        ("lane.resumed", "lifecycle"),
        ("turn.failed", "lifecycle"),
        ("action.completed", "lifecycle"),
        ("attempt.requested", "lifecycle"),
        ("lane.framework.checkpoint.linked", "lifecycle"),
        ("stream.thinking_delta", "streaming"),
        ("cost.recorded", "cost"),
        ("hitl.responded", "hitl"),
        ("memory.conferred", "memory"),
        ("context.prompt_composed", "context"),
        ("verification.preflight", "verification"),
        ("ext.acme.round_audit", "extension"),
        ("tool.acme.audit", "extension"),  # a kind that is no family prefix
        ("lane.framework.custom.thing", "lifecycle"),  # an extension joins its kind's family
        ("cost.acme.credit_note", "cost"),
    ],
)
def test_family_of(event_type: str, family: str) -> None:
    assert v.family_of(event_type) == family


def test_every_core_type_has_a_named_family_and_every_family_but_extension_is_used() -> None:
    used = {v.family_of(t) for t in v.CORE_EVENT_TYPES}
    assert "extension" not in used
    assert used == set(v.FAMILIES) - {"extension"}


# -- (d) check_payload ------------------------------------------------------------------


def cost(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "provider": "anthropic",
        "model": "claude-sonnet-4",
        "amount": "0.0123",
        "currency": "USD",
        "input_tokens": 1520,
        "output_tokens": 310,
    }
    payload.update(changes)
    return {k: val for k, val in payload.items() if val is not _DROP}


_DROP = object()


def test_cost_recorded_accepts_a_decimal_string_amount() -> None:
    payload = cost()
    v.check_payload("cost.recorded", payload)
    assert v.cost_amount(payload) == Decimal("0.0123")


@pytest.mark.parametrize("amount", ["0", "12", "-0.5", "0.000000000000000001", "1234567.89"])
def test_cost_recorded_accepts_other_decimal_strings(amount: str) -> None:
    v.check_payload("cost.recorded", cost(amount=amount))


def test_cost_amounts_sum_exactly() -> None:
    # The point of decimal strings: 0.1 + 0.2 is 0.3, in every language.
    total = sum(v.cost_amount(cost(amount=a)) for a in ("0.1", "0.2"))
    assert str(total) == "0.3"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"amount": 0.0123}, "payload.amount"),  # a binary float
        ({"amount": 1}, "payload.amount"),  # a JSON number of any kind
        ({"amount": "1e-3"}, "payload.amount"),
        ({"amount": ""}, "payload.amount"),
        ({"amount": ".5"}, "payload.amount"),
        ({"amount": "01.5"}, "payload.amount"),
        ({"amount": "0.1234567890123456789"}, "payload.amount"),  # 19 decimals
        ({"amount": _DROP}, "payload.amount"),
        ({"provider": _DROP}, "payload.provider"),
        ({"model": _DROP}, "payload.model"),
        ({"currency": _DROP}, "payload.currency"),
        ({"provider": 7}, "payload.provider"),
        ({"input_tokens": -1}, "payload.input_tokens"),
        ({"output_tokens": -5}, "payload.output_tokens"),
        ({"cache_read_tokens": -1}, "payload.cache_read_tokens"),
        ({"input_tokens": True}, "payload.input_tokens"),  # a bool is not a count
        ({"cache_write_tokens": False}, "payload.cache_write_tokens"),
        ({"output_tokens": 3.0}, "payload.output_tokens"),
        ({"input_tokens": "10"}, "payload.input_tokens"),
        ({"attempt_id": 12}, "payload.attempt_id"),
    ],
)
def test_cost_recorded_refusals_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidPayload) as err:
        v.check_payload("cost.recorded", cost(**changes))
    assert err.value.code == "invalid_payload"
    assert err.value.details["field"] == field


def test_a_float_amount_is_reported_as_found() -> None:
    with pytest.raises(InvalidPayload) as err:
        v.check_payload("cost.recorded", cost(amount=0.0123))
    assert "0.0123" in err.value.details["found"]


@pytest.mark.parametrize("decision", ["approved", "rejected", "edited"])
def test_hitl_responded_accepts_the_three_decisions(decision: str) -> None:
    v.check_payload("hitl.responded", {"pause_id": "p1", "decision": decision})


@pytest.mark.parametrize("decision", ["maybe", "Approved", "", "approve"])
def test_hitl_responded_refuses_an_unknown_decision(decision: str) -> None:
    with pytest.raises(InvalidPayload) as err:
        v.check_payload("hitl.responded", {"pause_id": "p1", "decision": decision})
    assert err.value.details == {"field": "payload.decision", "found": decision}


def test_hitl_paused_needs_pause_id_and_trigger() -> None:
    v.check_payload("hitl.paused", {"pause_id": "p1", "trigger": "side_effecting_tool"})
    with pytest.raises(InvalidPayload) as err:
        v.check_payload("hitl.paused", {"pause_id": "p1"})
    assert err.value.details["field"] == "payload.trigger"


def test_unpinned_types_take_any_payload() -> None:
    for event_type in ("stream.text_delta", "run.started", "ext.acme.round_audit"):
        v.check_payload(event_type, {"anything": [1.5, None, {"x": True}]})


# The payload table of spec/vocabulary.json, driven generically: a value of each
# declared type that must pass, and values that must each be refused.
_GOOD = {
    "string": "x",
    "decimal-string": "1.5",
    "integer>=0": 0,
    "integer>=1": 1,
    "object": {},
    "approved|rejected|edited": "approved",
    "position-ranges": [],
}
_BAD = {
    "string": [5, None, {}],
    "decimal-string": [1.5, "1.5e2", None],
    "integer>=0": [-1, True, "3", 1.0],
    "integer>=1": [0, -1, False, "1"],
    "object": ["x", [], None],
    "approved|rejected|edited": ["maybe", 1],
    "position-ranges": ["1-2", [[1]], [[2, 1]], [[1.5, 2]], [[0, 1]], None],
}


def _payload_cases() -> list[tuple[str, dict[str, str], dict[str, str]]]:
    return [(t, spec["required"], spec["optional"]) for t, spec in SPEC["payloads"].items()]


def test_every_pinned_type_in_the_spec_is_core_and_has_known_field_types() -> None:
    for event_type, required, optional in _payload_cases():
        assert event_type in v.CORE_EVENT_TYPES
        for kind in {**required, **optional}.values():
            assert kind in _GOOD, kind


@pytest.mark.parametrize(("event_type", "required", "optional"), _payload_cases())
def test_check_payload_follows_the_spec_payload_table(
    event_type: str, required: dict[str, str], optional: dict[str, str]
) -> None:
    full = {f: _GOOD[k] for f, k in {**required, **optional}.items()}
    v.check_payload(event_type, full)
    v.check_payload(event_type, {f: _GOOD[k] for f, k in required.items()})
    for field in required:
        missing = {f: val for f, val in full.items() if f != field}
        with pytest.raises(InvalidPayload) as err:
            v.check_payload(event_type, missing)
        assert err.value.details["field"] == f"payload.{field}"
    for field, kind in {**required, **optional}.items():
        for bad in _BAD[kind]:
            with pytest.raises(InvalidPayload) as err:
                v.check_payload(event_type, {**full, field: bad})
            assert err.value.details["field"] == f"payload.{field}", (field, bad)


# -- spec/vocabulary.md ------------------------------------------------------------------


def _examples() -> list[tuple[str, dict[str, Any]]]:
    section = VOCABULARY_MD.split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]
    found = []
    for block in section.split("\n### ")[1:]:
        family = block.split("\n", 1)[0].strip()
        for body in re.findall(r"```json\n(.*?)\n```", block, flags=re.S):
            found.append((family, json.loads(body)))
    return found


def test_the_doc_has_an_example_for_every_family() -> None:
    assert {family for family, _ in _examples()} == set(v.FAMILIES)


@pytest.mark.parametrize(
    ("family", "event"), _examples(), ids=lambda x: x if isinstance(x, str) else x["event_type"]
)
def test_doc_examples_are_valid_proposed_events_of_their_family(family: str, event: dict[str, Any]) -> None:
    proposed = decode(encode(event), ProposedEvent)
    assert proposed.schema_version == v.SCHEMA_VERSION
    v.check_event_type(proposed.event_type)
    v.check_payload(proposed.event_type, proposed.payload)
    assert v.family_of(proposed.event_type) == family
    assert "tenant" not in proposed.payload


def test_doc_names_the_amount_pattern_the_code_uses() -> None:
    assert v.DECIMAL_AMOUNT.pattern in VOCABULARY_MD
    assert v.EXTENSION_PATTERN.pattern in VOCABULARY_MD
