"""The LangGraph saver's pure mapping (laneledger.adapters.langgraph_records,
spec/langgraph.md): keys that cannot collide, bytes that survive a
redaction pass, and values redacted before serde, LangChain messages
included."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from laneledger.adapters.langgraph_records import (
    decode_bytes,
    encode_bytes,
    ns_key,
    redact_value,
    thread_key,
    writes_key,
)
from laneledger.contract.errors import InvalidRequest
from laneledger.contract.redaction import DEFAULT_REDACTOR

SECRET = "sk-ant-" + "Q9w8E7r6T5y4U3i2O1p0A9s8D7f6"


def test_keys_of_different_threads_and_namespaces_never_collide() -> None:
    keys = {
        ns_key("a/ns/b", ""),
        ns_key("a", "b"),
        ns_key("a%2Fns%2Fb", ""),
        writes_key("a", "", "c"),
        ns_key("a", "/writes/c"),
        thread_key("a/ns"),
    }
    assert len(keys) == 6
    assert all(k.startswith("langgraph/") for k in keys)


def test_encoded_bytes_survive_redaction_and_round_trip() -> None:
    data = bytes(range(256)) * 64 + SECRET.encode()  # every byte value, and a secret's bytes
    text = encode_bytes(data)
    assert DEFAULT_REDACTOR.redact(text).value == text
    assert decode_bytes(text, "$.x") == data
    with pytest.raises(InvalidRequest):
        decode_bytes("not hex", "$.x")


def test_values_are_redacted_before_serde_messages_included() -> None:
    redacted = redact_value(
        {"messages": [HumanMessage(content=f"use {SECRET}"), AIMessage(content="fine")], "api_key": SECRET},
        DEFAULT_REDACTOR,
    )
    human, ai = redacted["messages"]
    assert isinstance(human, HumanMessage) and human.content == "use [REDACTED:anthropic_api_key]"
    assert ai == AIMessage(content="fine")
    assert redacted["api_key"] == "[REDACTED:secret_key]"
    assert redact_value(("a", SECRET), DEFAULT_REDACTOR) == ("a", "[REDACTED:anthropic_api_key]")
    clean = HumanMessage(content="nothing here")
    assert redact_value(clean, DEFAULT_REDACTOR) is clean
