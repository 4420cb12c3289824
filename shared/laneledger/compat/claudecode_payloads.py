"""The payloads the Claude Code importer records, built from decoded lines
(spec/claude-code.md's mapping table): pure functions, no I/O. The importer
(``laneledger.compat.claudecode``) gives them ids, causes and lanes."""

from __future__ import annotations

from typing import Any

from laneledger.compat.claudecode_lines import ResultLine, decimal_string

# (ours, Claude Code's) token counts: a message's ``usage``, a model's
# entry of a result's ``modelUsage``.
MESSAGE_TOKENS = (
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
    ("cache_read_tokens", "cache_read_input_tokens"),
    ("cache_write_tokens", "cache_creation_input_tokens"),
)
MODEL_USAGE_TOKENS = (
    ("input_tokens", "inputTokens"),
    ("output_tokens", "outputTokens"),
    ("cache_read_tokens", "cacheReadInputTokens"),
    ("cache_write_tokens", "cacheCreationInputTokens"),
)
# Fields of a result line kept as they came on run.completed / run.failed.
RUN_FIELDS = (
    "num_turns",
    "duration_ms",
    "duration_api_ms",
    "result",
    "usage",
    "permission_denials",
    "stop_reason",
)


def token_counts(usage: dict[str, Any], names: tuple[tuple[str, str], ...]) -> dict[str, int]:
    """The integer counts of ``usage`` under our names."""
    return {
        ours: usage[theirs]
        for ours, theirs in names
        if isinstance(usage.get(theirs), int) and not isinstance(usage.get(theirs), bool)
    }


def inference_outcome(
    blocks: list[dict[str, Any]], usage: dict[str, Any], stop_reason: Any
) -> dict[str, Any]:
    """An assistant message's ``attempt.completed`` outcome: its text and
    thinking, the tool calls it asked for, its token counts."""
    texts = [b.get("text") for b in blocks if b.get("type") == "text"]
    thinking = [b.get("thinking") for b in blocks if b.get("type") == "thinking"]
    outcome: dict[str, Any] = {
        "text": "\n".join(t for t in texts if isinstance(t, str)),
        "thinking": "\n".join(t for t in thinking if isinstance(t, str)),
        "stop_reason": stop_reason,
        "tool_uses": [b.get("id") for b in blocks if b.get("type") == "tool_use"],
    }
    if any(b.get("type") == "redacted_thinking" for b in blocks):
        outcome["redacted_thinking"] = True
    outcome.update(token_counts(usage, MESSAGE_TOKENS))
    return outcome


def result_costs(line: ResultLine, init_model: Any, line_no: int) -> list[tuple[str, dict[str, Any]]]:
    """A result line's ``cost.recorded`` payloads, each with the key naming
    it in the capture: one per model of ``modelUsage`` with a cost, else one
    from ``total_cost_usd`` (on the init line's model), else none."""
    model_usage = line.model_usage
    if isinstance(model_usage, dict) and model_usage:
        costs = []
        for model, usage in sorted(model_usage.items()):
            if not isinstance(usage, dict) or "costUSD" not in usage:
                continue
            cost: dict[str, Any] = {
                "provider": "anthropic",
                "model": model,
                "currency": "USD",
                "amount": decimal_string(usage["costUSD"], f"modelUsage.{model}.costUSD", line_no),
            }
            cost.update(token_counts(usage, MODEL_USAGE_TOKENS))
            costs.append((f"cost/{model}", cost))
        return costs
    if line.total_cost_usd is None:
        return []
    total = {
        "provider": "anthropic",
        "model": str(init_model or "unknown"),
        "currency": "USD",
        "amount": decimal_string(line.total_cost_usd, "total_cost_usd", line_no),
    }
    return [("cost", total)]


def run_outcome(line: ResultLine, obj: dict[str, Any], line_no: int) -> tuple[bool, dict[str, Any]]:
    """Whether the run failed, and the payload of its ``run.completed`` /
    ``run.failed`` (``obj``: the result line as it came)."""
    failed = line.is_error is True or line.subtype not in (None, "success")
    summary: dict[str, Any] = {"subtype": line.subtype, "is_error": line.is_error}
    if line.total_cost_usd is not None:
        summary["total_cost_usd"] = decimal_string(line.total_cost_usd, "total_cost_usd", line_no)
    summary.update((name, obj[name]) for name in RUN_FIELDS if name in obj)
    if failed:
        summary["error"] = {
            "code": str(line.subtype or "error"),
            "message": str(obj.get("result") or line.subtype or ""),
        }
    return failed, summary
