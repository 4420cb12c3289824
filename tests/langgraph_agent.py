"""A small LangGraph agent on ``LaneledgerSaver``, run as its own process by
tests/test_langgraph_graph.py (not a test module).

The graph: ``agent`` (a fake chat model that asks for the ``write_note``
tool, then answers once the tool has run) → ``approve`` (``interrupt()``
for a human's approval of the tool call) → ``tools`` (LangGraph's
``ToolNode``) → ``agent`` → end.

    python langgraph_agent.py start NATS_URL THREAD NOTES_FILE   # sync API, up to the interrupt
    python langgraph_agent.py resume NATS_URL THREAD NOTES_FILE ANSWER  # async API
    python langgraph_agent.py continue NATS_URL THREAD NOTES_FILE  # async, after a crash

``LANGGRAPH_AGENT_HANG_IN_TOOL=1``: the tool writes ``<NOTES_FILE>.started``
and then waits to be killed, mid-run. The last line printed is a JSON
summary of what the run returned.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from laneledger.adapters.langgraph import LaneledgerSaver

TENANT = "acme"


class ScriptedChatModel(BaseChatModel):
    """A fake chat model whose answer depends only on the conversation, so
    a process that starts again answers as the one that died would have."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            reply = AIMessage(content=f"Done: {messages[-1].content}")
        else:
            reply = AIMessage(
                content="",
                tool_calls=[
                    {"name": "write_note", "args": {"text": "buy milk"}, "id": "call-1", "type": "tool_call"}
                ],
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


def build(notes: Path) -> StateGraph[MessagesState]:
    @tool
    def write_note(text: str) -> str:
        """Append a note to the notes file."""
        if os.environ.get("LANGGRAPH_AGENT_HANG_IN_TOOL") == "1":
            Path(f"{notes}.started").write_text("started")
            time.sleep(120)  # killed here by the test, mid-run
        with notes.open("a") as f:
            f.write(text + "\n")
        return f"noted {text!r}"

    model = ScriptedChatModel()

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def approve(state: MessagesState) -> Command[Any]:
        call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
        answer = interrupt({"question": "run this tool?", "tool": call["name"], "args": call["args"]})
        if answer == "approved":
            return Command(goto="tools")
        return Command(goto=END, update={"messages": [AIMessage(content=f"Not run: {answer}")]})

    def route(state: MessagesState) -> str:
        return "approve" if state["messages"][-1].tool_calls else END  # type: ignore[attr-defined]

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("approve", approve, destinations=("tools", END))
    graph.add_node("tools", ToolNode([write_note]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["approve", END])
    graph.add_edge("tools", "agent")
    return graph


def config(thread: str) -> Any:
    """A run id per invocation, in the metadata, as LangGraph's server sets
    it: the saver makes each a laneledger run."""
    return {"configurable": {"thread_id": thread}, "metadata": {"run_id": str(uuid.uuid4())}}


def summary(result: dict[str, Any]) -> str:
    interrupts = [i.value for i in result.get("__interrupt__", [])]
    return json.dumps({"messages": [m.content for m in result["messages"]], "interrupts": interrupts})


def start(url: str, thread: str, notes: Path) -> None:
    saver = LaneledgerSaver.open_sync(url, tenant=TENANT)
    try:
        app = build(notes).compile(checkpointer=saver)
        result = app.invoke(
            {"messages": [HumanMessage(content="note that I must buy milk")]},
            config(thread),
        )
        print(summary(result), flush=True)
    finally:
        saver.close_sync()


async def resume(url: str, thread: str, notes: Path, answer: Any) -> None:
    async with LaneledgerSaver.connect(url, tenant=TENANT) as saver:
        app = build(notes).compile(checkpointer=saver)
        command: Any = Command(resume=answer) if answer is not None else None
        # "sync": each step's checkpoint and writes are stored before the
        # next step starts, so a kill inside the tool finds the approval
        # stored (the default "async" may still be saving it).
        result = await app.ainvoke(command, config(thread), durability="sync")
        print(summary(result), flush=True)


def main(argv: list[str]) -> None:
    mode, url, thread, notes = argv[:4]
    if mode == "start":
        start(url, thread, Path(notes))
    elif mode == "resume":
        asyncio.run(resume(url, thread, Path(notes), argv[4]))
    elif mode == "continue":
        asyncio.run(resume(url, thread, Path(notes), None))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
