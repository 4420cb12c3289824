"""A scripted model for the OpenAI Agents SDK (its ``Model`` interface) that
reports its calls in spans as the SDK's own models do: a generation span
with usage (Chat Completions), or, for a ``gpt-*`` name, a response span
holding the ``Response`` (the Responses API). Used by
tests/test_openai_agents_recorder.py and bench/openai_agents.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import Agent, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.tracing import generation_span, response_span
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

BIG = "row;" * 600  # a tool result over 1 KiB: a content reference, not inline


class FakeModel(Model):
    """Answers with the scripted outputs in turn, each in a generation span
    with its usage, as the SDK's Chat Completions model reports one."""

    def __init__(self, name: str, script: list[list[Any]], before: Callable[[], Any] | None = None) -> None:
        self.name = name
        self.script = list(script)
        self.before = before  # awaited before each answer (failure injection)

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        if self.before is not None:
            await self.before()
        if self.name.startswith("gpt-"):
            return self.responses_api_answer()
        with generation_span(model=self.name, input=[{"role": "user", "content": "…"}]) as span:
            output = self.script.pop(0)
            span.span_data.output = [item.model_dump() for item in output]
            span.span_data.usage = {
                "input_tokens": 100,
                "output_tokens": 20,
                "input_tokens_details": {"cached_tokens": 40},
            }
            usage = Usage(requests=1, input_tokens=100, output_tokens=20, total_tokens=120)
            return ModelResponse(output=output, usage=usage, response_id=None)

    def responses_api_answer(self) -> ModelResponse:
        """As the SDK's Responses API model reports one: a response span
        holding the Response (its model, output and usage)."""
        with response_span() as span:
            output = self.script.pop(0)
            usage = ResponseUsage(
                input_tokens=7,
                output_tokens=3,
                total_tokens=10,
                input_tokens_details=InputTokensDetails(cached_tokens=2, cache_write_tokens=0),
                output_tokens_details=OutputTokensDetails(reasoning_tokens=1),
            )
            span.span_data.response = Response(
                id="resp_1",
                created_at=0,
                model=self.name,
                object="response",
                output=output,
                parallel_tool_calls=False,
                tool_choice="auto",
                tools=[],
                usage=usage,
            )
            sdk_usage = Usage(requests=1, input_tokens=7, output_tokens=3, total_tokens=10)
            return ModelResponse(output=output, usage=sdk_usage, response_id="resp_1")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def text(value: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg-1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=value, annotations=[])],
    )


def tool_call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", name=name, arguments=arguments, call_id=call_id, id=f"fc-{call_id}"
    )


def support_agents(ran: list[str], before: Callable[[], Any] | None = None) -> Agent[Any]:
    """triage: calls lookup_order, then hands off to billing, which answers."""

    @function_tool
    async def lookup_order(order_id: str) -> str:
        """Look an order up."""
        ran.append(order_id)
        return BIG

    billing = Agent(name="billing", model=FakeModel("fake-billing", [[text("refund issued")]]))
    return Agent(
        name="triage",
        tools=[lookup_order],
        handoffs=[billing],
        model=FakeModel(
            "fake-triage",
            [
                [tool_call("lookup_order", '{"order_id": "A-17"}', "call-1")],
                [tool_call("transfer_to_billing", "{}", "call-2")],
            ],
            before,
        ),
    )
