"""Decoding Claude Code stream-json lines (laneledger.compat.claudecode_lines):
each line type as its Struct, and a shape that does not fit as InvalidRequest
naming the line and the path. In-process, no NATS."""

from __future__ import annotations

import pytest

from laneledger.compat.claudecode_lines import (
    MAX_PARENT_TOOL_USE_ID,
    AssistantLine,
    OtherLine,
    ResultLine,
    SystemLine,
    ToolUseBlock,
    UserLine,
    decode_as,
    decode_line,
)
from laneledger.contract.errors import InvalidRequest


def test_each_line_type_decodes_to_its_struct() -> None:
    line = decode_line(
        {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text"}], "model": "x"}}, 1
    )
    assert isinstance(line, AssistantLine) and line.message.id == "m1" and line.message.model == "x"
    assert line.message.usage is None and line.parent_tool_use_id is None
    user = decode_line({"type": "user", "message": {}, "parent_tool_use_id": "toolu_1"}, 2)
    assert isinstance(user, UserLine) and user.message.content is None
    assert user.parent_tool_use_id == "toolu_1"
    result = decode_line({"type": "result", "modelUsage": {"m": {}}, "subtype": "success"}, 3)
    assert isinstance(result, ResultLine) and result.model_usage == {"m": {}}
    assert result.subtype == "success" and result.total_cost_usd is None
    system = decode_line({"type": "system", "subtype": "hook_started"}, 4)
    assert isinstance(system, SystemLine) and system.subtype == "hook_started"
    other = decode_line({"type": "mystery_event", "message": 7}, 5)
    assert isinstance(other, OtherLine)
    longest = "x" * MAX_PARENT_TOOL_USE_ID
    assert decode_line({"type": "system", "parent_tool_use_id": longest}, 6).parent_tool_use_id == longest


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ({"type": "assistant", "message": {"content": []}}, "$.message.id"),
        ({"type": "assistant", "message": {"id": 3, "content": []}}, "$.message.id"),
        ({"type": "assistant", "message": {"id": "m", "content": {}}}, "$.message.content"),
        ({"type": "assistant", "message": []}, "$.message"),
        ({"type": "user"}, "$.message"),
        ({"type": "user", "message": "hi"}, "$.message"),
        ({"type": "user", "message": {}, "parent_tool_use_id": ""}, "$.parent_tool_use_id"),
        ({"type": "system", "parent_tool_use_id": "x" * 253}, "$.parent_tool_use_id"),
        ({"type": "mystery_event", "parent_tool_use_id": 7}, "$.parent_tool_use_id"),
    ],
)
def test_a_shape_that_does_not_fit_names_its_line_and_path(obj: dict[str, object], path: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_line(obj, 9)
    assert caught.value.details == {"line": 9, "path": path, "reason": "wrong_shape"}
    assert str(caught.value).startswith(f"invalid_request: {path}: ")


def test_a_tool_use_block_is_decoded_under_its_path_in_the_message() -> None:
    block = decode_as({"type": "tool_use", "id": "t", "name": "Read"}, ToolUseBlock, 4)
    assert (block.id, block.name, block.input) == ("t", "Read", None)
    with pytest.raises(InvalidRequest) as caught:
        decode_as({"type": "tool_use", "id": "t"}, ToolUseBlock, 4, at="$.message.content[]")
    assert caught.value.details["path"] == "$.message.content[].name"
    with pytest.raises(InvalidRequest) as caught:
        decode_as(7, str, 1, at="$.session_id")
    assert caught.value.details["path"] == "$.session_id"
    assert "Expected `str`, got `int`" in str(caught.value)
