"""The Claude Code importer's payloads from decoded lines
(laneledger.compat.claudecode_payloads). In-process, no NATS."""

from __future__ import annotations

from typing import Any

import pytest

from laneledger.compat.claudecode_lines import ResultLine, decode_line
from laneledger.compat.claudecode_payloads import inference_outcome, result_costs, run_outcome
from laneledger.contract.errors import InvalidRequest


def result(**fields: Any) -> tuple[ResultLine, dict[str, Any]]:
    obj = {"type": "result", **fields}
    line = decode_line(obj, 7)
    assert isinstance(line, ResultLine)
    return line, obj


def test_an_inference_outcome_joins_texts_and_keeps_integer_token_counts() -> None:
    blocks = [
        {"type": "text", "text": "a"},
        {"type": "thinking", "thinking": "t"},
        {"type": "text", "text": "b"},
        {"type": "tool_use", "id": "toolu_1"},
        {"type": "redacted_thinking"},
    ]
    usage = {"input_tokens": 3, "output_tokens": True, "cache_read_input_tokens": 2.5}
    assert inference_outcome(blocks, usage, "tool_use") == {
        "text": "a\nb",
        "thinking": "t",
        "stop_reason": "tool_use",
        "tool_uses": ["toolu_1"],
        "redacted_thinking": True,
        "input_tokens": 3,
    }


def test_costs_per_model_else_the_total_on_the_init_model() -> None:
    line, _ = result(
        modelUsage={"b": {"costUSD": 0.1, "inputTokens": 5}, "a": {"costUSD": 2}, "c": {}},
        total_cost_usd=9,
    )
    assert result_costs(line, "init-model", 7) == [
        ("cost/a", {"provider": "anthropic", "model": "a", "currency": "USD", "amount": "2"}),
        (
            "cost/b",
            {"provider": "anthropic", "model": "b", "currency": "USD", "amount": "0.1", "input_tokens": 5},
        ),
    ]
    line, _ = result(total_cost_usd=0.25)
    assert result_costs(line, None, 7) == [
        ("cost", {"provider": "anthropic", "model": "unknown", "currency": "USD", "amount": "0.25"})
    ]
    assert result_costs(result()[0], "m", 7) == []
    with pytest.raises(InvalidRequest) as caught:
        result_costs(result(total_cost_usd="lots")[0], "m", 7)
    assert caught.value.details == {"line": 7, "path": "$.total_cost_usd"}


def test_a_run_fails_on_is_error_or_a_subtype_other_than_success() -> None:
    line, obj = result(subtype="success", is_error=False, num_turns=2, result="done")
    assert run_outcome(line, obj, 7) == (
        False,
        {"subtype": "success", "is_error": False, "num_turns": 2, "result": "done"},
    )
    line, obj = result(subtype="error_max_turns", is_error=False)
    failed, summary = run_outcome(line, obj, 7)
    assert failed and summary["error"] == {"code": "error_max_turns", "message": "error_max_turns"}
    assert run_outcome(*result(is_error=True, result="boom"), 7)[1]["error"] == {
        "code": "error",
        "message": "boom",
    }
