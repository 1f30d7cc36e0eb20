"""LangChain adapter: BaseMessage windows and the trim_messages stand-in, run through
langchain-core's own conversion and a real chat model class inside a chain."""

from __future__ import annotations

import asyncio
import copy
import re
from typing import Any, ClassVar

import numpy as np
import pydantic
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("openai")

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.messages import trim_messages as langchain_trim_messages
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable
from openai.types.chat import ChatCompletionMessageParam

from ctxwindow import InvalidMessage, InvalidOption, OrphanToolResult, get_counter
from ctxwindow_adapters import langchain as adapter
from ctxwindow_adapters.testing import AdapterConformance

OPENAI_MESSAGES = pydantic.TypeAdapter(list[ChatCompletionMessageParam])


def history(turns: int = 8, words: int = 30) -> list[BaseMessage]:
    """5 messages a turn (a question, two parallel tool calls, their results in the other
    order, an answer) after a system message, and a newest question: 42 messages."""
    out: list[BaseMessage] = [SystemMessage("You are brief.", id="sys")]
    for t in range(turns):
        out.append(
            HumanMessage(
                f"question {t} " + "word " * 20, id=f"h{t}", additional_kwargs={"lang": "en"}
            )
        )
        out.append(
            AIMessage(
                "",
                id=f"ai{t}",
                response_metadata={"model": "m", "turn": t},
                tool_calls=[
                    {"name": "lookup", "args": {"q": t}, "id": f"a{t}"},
                    {"name": "lookup", "args": {"q": -t}, "id": f"b{t}"},
                ],
            )
        )
        out.append(ToolMessage("r " * words, tool_call_id=f"b{t}", id=f"tb{t}"))
        out.append(ToolMessage("r " * words, tool_call_id=f"a{t}", id=f"ta{t}", artifact={"t": t}))
        out.append(AIMessage("answer " * 15, id=f"ans{t}"))
    out.append(HumanMessage("and now?", id="last"))
    return out  # fmt: skip


def check_valid(messages: list[BaseMessage]) -> None:
    """Tool messages directly follow the AIMessage that called them, and every call is
    answered; the OpenAI conversion of the window passes the openai SDK's types."""
    pending: set[str] = set()
    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in pending, f"orphan tool message at {index}"
            pending.discard(message.tool_call_id)
            continue
        assert not pending, f"message {index} comes before the results of {pending}"
        if isinstance(message, AIMessage):
            pending = {call["id"] for call in message.tool_calls if call["id"]}
    assert not pending
    OPENAI_MESSAGES.validate_python(convert_to_openai_messages(messages))


class Recorder(BaseCallbackHandler):
    """What a chat model was called with, as LangChain reports it."""

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.calls.extend(messages)


def test_round_trip_same_objects_units_and_budget() -> None:
    messages = history()
    before = copy.deepcopy(messages)
    counter = get_counter("approx")
    window = adapter.select(messages, 400, counter=counter)
    assert messages == before
    assert len(messages) == 42
    kept = window.messages
    assert all(any(m is o for o in messages) for m in kept)
    positions = [next(p for p, o in enumerate(messages) if o is m) for m in kept]
    assert positions == sorted(positions)
    assert kept[0] is messages[0] and kept[-1] is messages[-1]
    check_valid(kept)
    assert sum(counter.count_message(m) for m in adapter.read_messages(kept).messages) <= 400
    ids = {d.ids for d in window.record.decisions}
    assert ("ai0", "tb0", "ta0") in ids  # decisions name the caller's messages by id
    assert window.record.messages_before == 42 and window.record.messages_after == len(kept)


@pytest.mark.parametrize("strategy", ["fixed", "sliding", "summarize"])
def test_trim_messages_runnable_in_a_chain_with_a_real_chat_model(strategy: str) -> None:
    messages = history(12)
    trimmer = adapter.trim_messages(max_tokens=500, token_counter="approx", strategy=strategy)
    assert isinstance(trimmer, Runnable)
    model = GenericFakeChatModel(messages=iter(["fine"]))
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history")])
    chain = prompt | trimmer | model  # the trimmer takes the prompt's PromptValue
    recorder = Recorder()
    reply = chain.invoke({"history": messages}, config={"callbacks": [recorder]})
    assert reply.content == "fine"
    (sent,) = recorder.calls
    expected = adapter.trim_messages(messages, max_tokens=500, strategy=strategy)
    assert sent == expected
    check_valid(sent)
    made = [m for m in sent if not any(m is o for o in messages)]
    if strategy == "summarize":
        # where what it covers was: after the system message and the task statement (the
        # first human message), so a HumanMessage, which every chat model accepts there
        assert made and isinstance(made[0], HumanMessage)
        assert sent[1] is messages[1] and sent.index(made[0]) == 2
        assert made[0].response_metadata["ctxwindow"]["synthetic"] is True
        assert made[0].response_metadata["ctxwindow"]["covers"]
    else:
        assert not made


def test_trim_messages_accepts_langchain_token_counters() -> None:
    messages = history()

    def per_message(message: BaseMessage) -> int:
        return len(str(message.content)) // 4 + 3

    for token_counter in (count_tokens_approximately, "approximate", per_message):
        kept = adapter.trim_messages(messages, max_tokens=300, token_counter=token_counter)
        assert isinstance(kept, list) and kept[0] is messages[0] and kept[-1] is messages[-1]
        check_valid(kept)
        assert count_tokens_approximately(kept) <= 300 or token_counter is per_message
    by_count = adapter.trim_messages(messages, max_tokens=12, token_counter=len)
    assert len(by_count) <= 12
    check_valid(by_count)


class WordCountingModel(GenericFakeChatModel):
    """A real chat model class whose token count is words (a real model asks its
    tokenizer; this one needs no download)."""

    def get_num_tokens_from_messages(self, messages: list[BaseMessage], tools: Any = None) -> int:
        return sum(len(str(m.content).split()) + 2 for m in messages)


def test_a_chat_model_counts_tokens() -> None:
    messages = history()
    model = WordCountingModel(messages=iter([]))
    window = adapter.select(messages, 120, counter=model)
    assert window.record.counter.startswith("langchain:")
    assert model.get_num_tokens_from_messages(window.messages) <= 120
    assert window.record.tokens_after == model.get_num_tokens_from_messages(window.messages)
    check_valid(window.messages)
    kept = adapter.trim_messages(messages, max_tokens=120, token_counter=model)
    assert kept == window.messages


def test_async_select_is_the_same_window() -> None:
    messages = history()
    window = asyncio.run(adapter.aselect(messages, 300, "sliding"))
    assert window.messages == adapter.select(messages, 300, "sliding").messages


def test_start_on_and_end_on() -> None:
    messages = history()
    kept = adapter.trim_messages(messages, max_tokens=300, start_on="human")
    assert isinstance(kept[0], SystemMessage) and isinstance(kept[1], HumanMessage)
    check_valid(kept)
    plain = adapter.trim_messages(messages, max_tokens=300)
    assert kept == [plain[0], *plain[plain.index(kept[1]) :]]
    ended = adapter.trim_messages(messages[:-1], max_tokens=300, end_on=[AIMessage])
    assert isinstance(ended[-1], AIMessage)
    window_record = adapter.select(messages, 300).record
    assert window_record.engaged


def _started_on(windower: Any, messages: list[BaseMessage], start_on: str) -> Any:
    """The adapter's window of ``messages`` trimmed to start on ``start_on``, as
    ``trim_messages`` trims it, through the adapter's own Call (its record kept)."""
    return adapter.Call(
        windower,
        adapter.read_messages(messages),
        adapter.SHAPE,
        trim=adapter.Trim(
            lambda window: adapter._bounds(window, start_on=(start_on,), end_on=()), "start_on"
        ),
    ).select()


def test_start_on_updates_the_record() -> None:
    messages = history()
    counter = get_counter("approx")
    plain_options = {"task_statement": False}  # the window may open on an AI message
    windower = adapter.windower_for(None, "fixed", 300, counter, plain_options)
    trimmed = _started_on(windower, messages, "human")
    plain = adapter.select(messages, 300, counter=counter, **plain_options)
    removed = len(plain) - len(trimmed)
    assert removed > 0
    assert trimmed.record.messages_after == len(trimmed)
    assert trimmed.record.tokens_after == sum(
        counter.count_message(m) for m in adapter.read_messages(trimmed.messages).messages
    )
    assert trimmed.record.notes[-1] == f"removed {removed} more message(s): start_on"
    assert sum(d.action == "kept" for d in trimmed.record.decisions) < sum(
        d.action == "kept" for d in plain.record.decisions
    )


def test_a_summary_removed_by_start_on_leaves_the_record_true() -> None:
    """A window of whole items and a summary is given back without a slot per message;
    a trim that removes the summary still takes its tokens out of the record."""
    messages = history()
    counter = get_counter("approx")
    windower = adapter.windower_for(None, "summarize", 500, counter, {})
    full = adapter.Call(windower, adapter.read_messages(messages), adapter.SHAPE).select()
    made = [m for m in full.messages if not any(m is o for o in messages)]
    assert len(made) == 1 and full.messages.index(made[0]) == 2  # after the task statement
    trimmed = _started_on(windower, messages, "ai")
    assert not any(m is made[0] or m.content == made[0].content for m in trimmed.messages)
    first_ai = next(i for i, m in enumerate(full.messages) if isinstance(m, AIMessage))
    assert first_ai > 2
    assert trimmed.messages == [full.messages[0], *full.messages[first_ai:]]
    assert trimmed.record.tokens_after == sum(
        counter.count_message(m) for m in adapter.read_messages(trimmed.messages).messages
    )
    assert trimmed.record.notes[-1] == f"removed {first_ai - 1} more message(s): start_on"


def test_start_on_and_end_on_keep_tool_exchanges_whole() -> None:
    messages = history(3)
    # the newest message is a ToolMessage: end_on="ai" must not end on the calling AIMessage
    messages = messages[:-2]
    assert isinstance(messages[-1], ToolMessage)
    ended = adapter.trim_messages(messages, max_tokens=1000, end_on="ai")
    assert isinstance(ended, list) and isinstance(ended[-1], AIMessage)
    assert not ended[-1].tool_calls  # the answer before, not the call without its results
    check_valid(ended)
    started = adapter.trim_messages(history(3), max_tokens=300, start_on=["human", "ai"])
    check_valid(started)


@pytest.mark.parametrize("start_on", ["tool", ToolMessage, ["human", "tool"]])
def test_start_on_a_tool_message_says_it_cannot_be_honoured(start_on: Any) -> None:
    """LangChain's own trim opens the window on the first ToolMessage, sending a result
    without its call; keeping the two together, no window can start there, so rather
    than return the system message alone (every match sits inside an exchange) it says
    so, for a list and for a Runnable alike."""
    messages = history(3)
    theirs = langchain_trim_messages(
        messages, max_tokens=1000, token_counter="approximate", strategy="last",
        include_system=True, start_on="tool",
    )  # fmt: skip
    assert isinstance(theirs[1], ToolMessage)  # LangChain's window: a result without its call
    with pytest.raises(InvalidOption, match="start_on cannot name a tool message"):
        adapter.trim_messages(messages, max_tokens=1000, start_on=start_on)
    with pytest.raises(InvalidOption, match="start_on cannot name a tool message"):
        adapter.trim_messages(max_tokens=1000, start_on=start_on)
    assert adapter.trim_messages(messages, max_tokens=1000, end_on="tool")  # a unit's end


def test_start_on_never_removes_a_system_message_in_the_middle() -> None:
    """An OpenAI developer message in the middle of the history comes to LangChain as a
    SystemMessage: start_on removes what comes before the first human message, but not
    the policy; LangChain's own trim_messages loses it."""
    messages = convert_to_messages(
        [
            {"role": "system", "content": "You are brief."},
            {"role": "user", "content": "tell me about my account " + "word " * 200},
            {"role": "assistant", "content": "It is in good standing."},
            {"role": "developer", "content": "Never reveal the account number."},
            {"role": "assistant", "content": "Anything else?"},
            {"role": "user", "content": "What is my account number?"},
        ]
    )
    policy = messages[3]
    assert isinstance(policy, SystemMessage)
    kept = adapter.trim_messages(
        messages, max_tokens=100, token_counter="approximate", start_on="human"
    )
    assert kept == [messages[0], policy, messages[-1]]
    assert kept[1] is policy
    theirs = langchain_trim_messages(
        messages, max_tokens=100, token_counter="approximate", start_on="human",
        include_system=True,
    )  # fmt: skip
    assert theirs == [messages[0], messages[-1]]  # the difference the README states
    ended = adapter.trim_messages(
        [*messages[:4], messages[-1], SystemMessage("Answer in French.")],
        max_tokens=1000, token_counter="approximate", end_on="ai",
    )  # fmt: skip
    assert ended == [messages[0], messages[1], messages[2], policy, ended[-1]]
    assert ended[-1].content == "Answer in French."


def test_unsupported_trim_messages_arguments_say_so() -> None:
    messages = history(2)
    for kwargs, words in [
        ({"strategy": "first"}, "strategy='first' is not supported"),
        ({"include_system": False}, "include_system=False is not supported"),
        ({"allow_partial": True}, "allow_partial and text_splitter are not supported"),
        ({"text_splitter": str.split}, "allow_partial and text_splitter are not supported"),
        ({"start_on": 3}, "start_on takes message type names"),
        ({"token_counter": 3}, "token_counter must be"),
    ]:
        with pytest.raises(InvalidOption, match=words):
            adapter.trim_messages(messages, max_tokens=100, **kwargs)


def test_truncated_newest_message_is_a_copy() -> None:
    messages = [SystemMessage("Be brief."), HumanMessage("long " * 500, id="q")]
    window = adapter.select(messages, 100, oversize="truncate")
    last = window.messages[-1]
    assert last is not messages[-1] and isinstance(last, HumanMessage) and last.id == "q"
    assert "cut by ctxwindow" in str(last.content)
    assert messages[-1].content == "long " * 500


def test_bad_input_names_the_message() -> None:
    with pytest.raises(InvalidMessage, match="message 1: expected a LangChain BaseMessage"):
        adapter.select([HumanMessage("x"), {"role": "user", "content": "y"}], 50)
    with pytest.raises(OrphanToolResult, match="message 1: tool result for call 'zz'"):
        adapter.select([HumanMessage("x"), ToolMessage("r", tool_call_id="zz")], 50)
    no_id = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None}])
    with pytest.raises(InvalidMessage, match="message 0: tool call 0 has no 'id'"):
        adapter.select([no_id], 50)


def cleared_results(window: Any, messages: list[BaseMessage], stub: re.Pattern[str]) -> list[str]:
    """The call ids whose ToolMessage came back as a copy holding the stub (in order),
    checking that each copy differs from the original in its content only."""
    cleared = []
    for message in window.messages:
        if any(message is m for m in messages):
            continue
        assert isinstance(message, ToolMessage), f"not a stand-in: {message!r}"
        (original,) = [m for m in messages if m.id == message.id]
        assert message == original.model_copy(update={"content": message.content})
        assert stub.fullmatch(message.content).groups() == ("lookup", message.tool_call_id)
        cleared.append(message.tool_call_id)
    return cleared


def test_cleared_results_come_back_as_tool_messages(stand_in_run: Any) -> None:
    messages = history(6, words=300)
    strategy, _, budget = stand_in_run
    window = stand_in_run.select(adapter.select, messages)
    check_valid(window.messages)
    cleared = cleared_results(window, messages, stand_in_run.stub)
    answered = [m.tool_call_id for m in window.messages if isinstance(m, ToolMessage)]
    assert cleared == answered[:-1] and len(cleared) >= 5  # keep_recent=1
    replaced = [d for d in window.record.decisions if d.action == "replaced"]
    assert {f"t{call}" for call in cleared} <= {i for d in replaced for i in d.ids}
    assert all(isinstance(messages[d.positions[0]], AIMessage) for d in replaced)
    assert window.record.count("dropped") > 0 if strategy == "pipeline" else len(answered) == 12
    assert window.record.tokens_after <= budget
    assert window.record.tokens_after < window.record.tokens_before / 2
    counter = get_counter("approx")
    read = adapter.read_messages(window.messages).messages
    assert sum(counter.count_message(m) for m in read) == window.record.tokens_after
    model = GenericFakeChatModel(messages=iter(["fine"]))
    recorder = Recorder()
    assert model.invoke(window.messages, config={"callbacks": [recorder]}).content == "fine"
    assert recorder.calls == [window.messages]


def test_a_stand_in_finds_its_result_when_call_ids_repeat(clearing_run: Any) -> None:
    # some models number their calls afresh each turn ("call_0"): the stand-in still
    # replaces the very result it stands for, not one answering another turn's call
    messages: list[BaseMessage] = [SystemMessage("You are brief.", id="sys")]
    for t in range(4):
        messages += [
            HumanMessage(f"question {t}", id=f"h{t}"),
            AIMessage("", id=f"ai{t}", tool_calls=[{"name": "lookup", "args": {}, "id": "call_0"}]),
            ToolMessage(f"rows of turn {t} " * 80, tool_call_id="call_0", id=f"tool{t}"),
        ]
    messages.append(HumanMessage("and now?", id="last"))
    before = copy.deepcopy(messages)
    window = adapter.select(messages, 10_000, "clear_tool_outputs", **clearing_run.options)
    assert messages == before
    check_valid(window.messages)
    assert len(window.messages) == len(messages)
    assert cleared_results(window, messages, clearing_run.stub) == ["call_0"] * 3
    stubs = [m.id for m in window.messages if not any(m is o for o in messages)]
    assert stubs == ["tool0", "tool1", "tool2"]


class TestConformance(AdapterConformance):
    strategies = ("newest", "fixed", "sliding")
    budgets = range(60, 900, 20)
    whole_items = True
    not_an_item: ClassVar[dict[str, str]] = {"role": "user", "content": "not a BaseMessage"}

    @pytest.fixture
    def adapter(self) -> Any:
        return adapter

    @pytest.fixture
    def history(self) -> list[Any]:
        return history()

    def read(self, items: Any) -> Any:
        return adapter.read_messages(items).messages

    def check_valid(self, items: Any) -> None:
        check_valid(items)


def test_a_tool_result_too_big_for_the_budget_comes_back_as_a_cut_tool_message() -> None:
    messages = history(2)[:-1]
    log = "HEAD\n" + "step passed\n" * 1500 + "TAIL"
    messages += [
        HumanMessage("Summarize the build log.", id="ask"),
        AIMessage("", id="call", tool_calls=[{"name": "log", "args": {}, "id": "L"}]),
        ToolMessage(log, tool_call_id="L", id="log", artifact={"build": 7714}),
    ]
    window = adapter.select(messages, 400, "fixed")
    check_valid(window.messages)
    cut = window.messages[-1]
    assert isinstance(cut, ToolMessage) and cut is not messages[-1]
    assert cut.tool_call_id == "L" and cut.id == "log" and cut.artifact == {"build": 7714}
    assert cut.content.startswith("HEAD") and cut.content.endswith("TAIL")
    assert "characters cut by ctxwindow from this tool result" in cut.content
    assert window.messages[-2] is messages[-2]


# -- what agent loops hold: chunks, data blocks, garbled calls, edits in place ---------
def test_a_streamed_reply_accumulated_as_a_chunk_is_windowed() -> None:
    """An agent loop appends the AIMessageChunk its stream added up to (tool calls
    included): it was rejected as 'cannot be windowed'."""
    from langchain_core.messages import AIMessageChunk

    streamed = AIMessageChunk(
        "", id="s", tool_call_chunks=[{"name": "lookup", "args": '{"q": 1}', "id": "c", "index": 0}]
    )
    messages = [*history(2), streamed, ToolMessage("found", tool_call_id="c", id="tc")]
    window = adapter.select(messages, 10_000)
    assert window.messages == messages and window.messages[-2] is streamed
    small = adapter.select(messages, 200)
    check_valid(small.messages)
    assert small.messages[-2:] == messages[-2:]  # the pending exchange


def test_a_data_block_is_counted_as_the_words_it_holds() -> None:
    """A tool result given as a json block was read as a part without text: 9 tokens
    where LangChain's counter counts 1,255, and the window went far over the budget."""
    data = {"rows": [{"id": f"R{i:04d}", "note": "seat changed " * 3} for i in range(60)]}
    messages = [
        HumanMessage("Which rows changed?", id="ask"),
        AIMessage("", id="call", tool_calls=[{"name": "rows", "args": {}, "id": "r"}]),
        ToolMessage([{"type": "json", "json": data}], tool_call_id="r", id="rows"),
        AIMessage("Sixty of them.", id="answer"),
        HumanMessage("Thanks. And the next step?", id="next"),
    ]
    for counter in ("approx", count_tokens_approximately):
        window = adapter.select(messages, 200, counter=counter)
        assert messages[2] not in window.messages  # too big to keep
        if counter is count_tokens_approximately:
            assert count_tokens_approximately(window.messages) <= 200
        assert window.record.tokens_before > 1000


def test_garbled_tool_calls_keep_their_error_results() -> None:
    """An AIMessage's invalid_tool_calls are sent to the provider as calls, and a tool
    answers each with an error: the answer was an orphan, and the history refused."""
    garbled = AIMessage(
        "",
        id="g",
        invalid_tool_calls=[
            {
                "name": "lookup",
                "args": '{"q": ',
                "id": "bad",
                "error": "bad JSON",
                "type": "invalid_tool_call",
            }
        ],
    )
    error = ToolMessage("error: arguments are not JSON", tool_call_id="bad", status="error", id="e")
    messages = [*history(2), garbled, error, HumanMessage("try again", id="again")]
    window = adapter.select(messages, 10_000)
    assert window.messages == messages
    small = adapter.select(messages, 260)
    kept = {id(m) for m in small.messages}
    assert (id(garbled) in kept) == (id(error) in kept)  # a call and its result together


def test_a_cleared_tool_result_drops_its_media_blocks() -> None:
    """A cleared result kept its image block (10 KB of base64) beside the stub, where
    the core counted the stub alone: the window went over the budget."""
    image = {
        "type": "image",
        "source_type": "base64",
        "mime_type": "image/png",
        "data": "A" * 10_000,
    }
    messages: list[BaseMessage] = [HumanMessage("Check the pages.", id="task")]
    for n in range(5):
        page = [{"type": "text", "text": f"page {n}: " + "lorem ipsum " * 150}, image]
        messages.append(
            AIMessage(
                "", id=f"a{n}", tool_calls=[{"name": "shot", "args": {"n": n}, "id": f"c{n}"}]
            )
        )
        messages.append(ToolMessage(page, tool_call_id=f"c{n}", id=f"t{n}"))
    messages.append(HumanMessage("Which page is broken?", id="ask"))
    counter = count_tokens_approximately
    window = adapter.select(messages, 700, "clear_tool_outputs", keep_recent=1, counter=counter)
    stand_ins = [m for m in window.messages if not any(m is o for o in messages)]
    assert stand_ins and all(isinstance(m.content, str) for m in stand_ins)
    assert counter(window.messages) == window.record.tokens_after <= 700


@pytest.mark.parametrize(
    "edit", ["system", "task", "block text", "block appended", "call added", "call edited"]
)
def test_an_edit_in_place_is_windowed_from_the_new_content(edit: str) -> None:
    """Edits in place were windowed from the stale read: a system prompt or the task
    statement (beyond the newest 256 messages compared), a content block list (kept by
    reference, so equal to itself), a parallel call added to the newest AIMessage, a
    call's arguments replaced in its dict (what is kept of a list is a copy of each
    dict in it, which equals the message's own only until one changes)."""
    messages = history(60)  # 302 messages
    messages.insert(1, HumanMessage("The task: book the flight.", id="task"))
    newest = AIMessage(
        [{"type": "text", "text": "thinking"}],
        id="newest",
        tool_calls=[{"name": "f", "args": {}, "id": "x1"}],
    )
    messages.append(newest)
    blocks: list[Any] = newest.content  # type: ignore[assignment]
    messages.append(ToolMessage("one", tool_call_id="x1", id="rx1"))
    adapter.select(messages, 3000)
    if edit == "system":
        messages[0].content = "You are terse. " + "POLICY " * 400
    elif edit == "task":
        messages[1].content = "The task, reworded: " + "detail " * 400
    elif edit == "block text":
        blocks[0]["text"] += " more" * 400
    elif edit == "block appended":
        blocks.append({"type": "text", "text": "more " * 400})
    elif edit == "call edited":
        newest.tool_calls[0]["args"] = {"q": "x" * 1600}
    else:
        newest.tool_calls.append({"name": "f", "args": {}, "id": "x2", "type": "tool_call"})
        messages.append(ToolMessage("two", tool_call_id="x2", id="rx2"))
    window = adapter.select(messages, 3000)
    adapter._READS.remembered.clear()
    fresh = adapter.select(messages, 3000)
    assert window.messages == fresh.messages
    assert window.record.tokens_before == fresh.record.tokens_before
    assert window.record.tokens_after == fresh.record.tokens_after <= 3000


@pytest.mark.parametrize("count", [0.9, "7", True])
def test_a_langchain_counter_that_does_not_count_in_ints_is_named(count: Any) -> None:
    with pytest.raises(InvalidOption, match="must return a whole number of tokens"):
        adapter.select(history(1), 50, counter=lambda messages: count)


@pytest.mark.parametrize("count", [7.0, np.float64(7.0), np.int64(7)])
def test_a_langchain_counter_may_count_in_whole_floats_and_numpy_numbers(count: Any) -> None:
    window = adapter.select(history(1), 50, counter=lambda messages: count)
    assert window.record.tokens_after == 7 * len(window.messages)


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ({"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                         "data": "JVBER" * 6000}}, False),
        ({"type": "file_search_call", "results": [{"text": "the refund policy " * 50}]}, True),
        ({"type": "image", "source_type": "base64", "data": "iVBOR" * 6000}, False),
        ({"type": "json", "json": {"rows": list(range(300))}}, True),
        ({"type": "tool_call_chunk", "name": "f", "args": '{"q": 1}', "id": "c"}, False),
        ({"type": "redacted_thinking", "data": "EmwKAhgB" * 500}, False),
    ],
)  # fmt: skip
def test_content_blocks_count_as_words_only_when_they_are_words(
    block: dict[str, Any], words: bool
) -> None:
    """A PDF's base64 was read as words (106 tokens became 10,040, and a cut pasted the
    bytes into the text); a file search's results were a flat media cost."""
    (read,) = adapter.read_messages(
        [HumanMessage([{"type": "text", "text": "Look."}, block])]
    ).messages
    kinds = [(part.type, part.text is not None) for part in read.content]
    assert kinds == [("text", True), (block["type"], words)]


def test_trim_messages_keeps_the_task_unless_told_not_to() -> None:
    """The README's second difference from LangChain's trim_messages, and its way out."""
    messages = history(6)
    messages.insert(1, HumanMessage("The task: " + "detail " * 20, id="task"))
    ours = adapter.trim_messages(messages, max_tokens=400, start_on="human")
    theirs = langchain_trim_messages(
        messages, max_tokens=400, token_counter=count_tokens_approximately, strategy="last",
        include_system=True, start_on="human",
    )  # fmt: skip
    assert ours[1] is messages[1] and theirs[1] is not messages[1]
    plain = adapter.trim_messages(
        messages,
        max_tokens=400,
        start_on="human",
        token_counter="approximate",
        task_statement=False,
    )
    assert [id(m) for m in plain] == [id(m) for m in theirs]


def test_call_blocks_repeating_tool_calls_count_once() -> None:
    call = {"name": "search", "args": {"q": "y"}, "id": "c2"}
    blocks = AIMessage(
        content=[{"type": "text", "text": "let me check"},
                 {"type": "tool_use", "id": "c2", "name": "search", "input": {"q": "y"}}],
        tool_calls=[call],
    )  # fmt: skip
    plain = AIMessage(content="let me check", tool_calls=[call])
    counter = get_counter("approx")

    def count(message: AIMessage) -> int:
        history = [HumanMessage("q"), message, ToolMessage("r", tool_call_id="c2")]
        read = adapter.read_messages(history)
        return counter.count_message(read.messages[1])

    assert count(blocks) == count(plain)


def anthropic_style_history(turns: int = 6) -> list[BaseMessage]:
    """ChatAnthropic's replies: each tool call both a ``tool_use`` block in the content
    and an entry of ``tool_calls`` (which LangChain's approximate count then leaves
    out, counting the blocks), and named senders and tools."""
    out: list[BaseMessage] = [SystemMessage("Be brief.")]
    for turn in range(turns):
        call = {"name": "search", "args": {"query": f"flights to city {turn}"}, "id": f"tu{turn}"}
        block = {"type": "tool_use", "id": f"tu{turn}", "name": "search", "input": call["args"]}
        out += [
            HumanMessage(f"Find flights to city {turn}.", name="alice"),
            AIMessage([{"type": "text", "text": "Let me search."}, block], tool_calls=[call]),
            ToolMessage("AZ123 09:05, LH456 11:10. " * 5, tool_call_id=f"tu{turn}", name="search"),
            AIMessage("The first is AZ123."),
        ]
    out.append(HumanMessage("Book the first one.", name="alice"))
    return out


@pytest.mark.parametrize("max_tokens", [150, 300, 450])
def test_the_window_fits_max_tokens_as_the_callers_counter_counts_it(max_tokens: int) -> None:
    """The counter is asked about the caller's own messages, not ones rebuilt from
    ctxwindow's reading (which dropped the tool_use blocks a ChatAnthropic reply holds:
    at 300 tokens the window counted 394)."""
    messages = anthropic_style_history()
    kept = adapter.trim_messages(
        messages, max_tokens=max_tokens, token_counter=count_tokens_approximately
    )
    assert isinstance(kept, list)
    check_valid(kept)
    assert count_tokens_approximately(kept) <= max_tokens
    window = adapter.select(messages, max_tokens, counter=count_tokens_approximately)
    assert window.messages == kept
    assert window.record.tokens_after == count_tokens_approximately(window.messages)
    assert window.record.tokens_before == count_tokens_approximately(messages)

    def counted_afresh(messages: list[BaseMessage]) -> int:  # a new object: no counts kept
        return count_tokens_approximately(messages)

    waited = asyncio.run(adapter.aselect(messages, max_tokens, counter=counted_afresh))
    assert waited.messages == kept
    assert waited.record.tokens_after == window.record.tokens_after


def test_a_cut_newest_message_is_counted_as_the_copy_sent() -> None:
    """The newest user message cut to fit is counted as the copy the adapter sends: the
    caller's message with the cut text, its name kept."""
    messages = anthropic_style_history(2)
    messages[-1] = HumanMessage("Book the first one. " * 200, name="alice")
    cut = adapter.select(messages, 120, counter=count_tokens_approximately, oversize="truncate")
    assert cut.messages[-1] is not messages[-1] and cut.messages[-1].name == "alice"
    assert cut.record.tokens_after == count_tokens_approximately(cut.messages) <= 120


def test_cleared_results_are_counted_as_the_copies_sent(stand_in_run: Any) -> None:
    """A cleared tool result is counted as the ToolMessage sent in its place: the
    caller's, its name kept, with the stand-in's text."""
    messages = [
        m.model_copy(update={"name": "lookup"}) if isinstance(m, ToolMessage) else m
        for m in history(6, words=300)
    ]
    window = stand_in_run.select(adapter.select, messages, counter=count_tokens_approximately)
    sent = [m for m in window.messages if isinstance(m, ToolMessage)]
    assert any(stand_in_run.stub.search(m.text) for m in sent)
    assert all(m.name == "lookup" for m in sent)
    assert window.record.tokens_after == count_tokens_approximately(window.messages)


class CountedCalls:
    """A token counter of one message that counts how often it is asked."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, message: BaseMessage) -> int:
        self.calls += 1
        return count_tokens_approximately([message])


class CountingWordsModel(WordCountingModel):
    """A chat model counting how often it is asked to count."""

    asked: ClassVar[list[int]] = []

    def get_num_tokens_from_messages(self, messages: list[BaseMessage], tools: Any = None) -> int:
        self.asked.append(len(messages))
        return super().get_num_tokens_from_messages(messages, tools)


def test_a_history_grown_by_one_message_costs_that_messages_count() -> None:
    """The same token counter object is wrapped once: the core keeps counts per counter
    object, so a wrapper made each call had every message counted again every turn."""
    messages = history(40)
    counter = CountedCalls()
    adapter.select(messages, 2000, counter=counter)
    assert counter.calls > 0
    for turn in range(3):
        messages.append(HumanMessage(f"and then {turn}?"))
        counter.calls = 0
        adapter.select(messages, 2000, counter=counter)
        assert counter.calls == 1
        messages.append(AIMessage(f"then {turn}."))
        counter.calls = 0
        adapter.trim_messages(messages, max_tokens=2000, token_counter=counter)
        assert counter.calls == 1
    model = CountingWordsModel(messages=iter([]))
    # a chat model, and its bound method (a new object at each access)
    for counted_by in (lambda: model, lambda: model.get_num_tokens_from_messages):
        adapter.select(messages, 2000, counter=counted_by())
        messages.append(HumanMessage(f"one more {len(messages)}"))
        model.asked.clear()
        adapter.select(messages, 2000, counter=counted_by())
        assert model.asked == [1]


def test_token_counters_are_not_kept_alive_by_their_wrappers() -> None:
    """The wrappers kept per token counter hold a function or a chat model weakly, so
    that one made per request (a closure over a request's tokenizer) is freed; one that
    cannot be held weakly (a builtin) is held among a bounded few."""
    import gc
    import weakref

    def make() -> Any:
        def count(message: BaseMessage) -> int:
            return len(str(message.content))

        return count

    counter = make()
    gone = weakref.ref(counter)
    adapter.select(history(2), 500, counter=counter)
    model = CountingWordsModel(messages=iter([]))
    model_gone = weakref.ref(model)
    adapter.select(history(2), 500, counter=model.get_num_tokens_from_messages)
    del counter, model
    gc.collect()
    assert gone() is None and model_gone() is None
    wrappers = adapter._Wrappers(held=2)
    unreferable = [SlottedCounter() for _ in range(4)]
    assert wrappers.get(unreferable[0]) is wrappers.get(unreferable[0])
    for counter_without_weakrefs in unreferable:
        wrappers.get(counter_without_weakrefs)
    assert len(wrappers) == 2


class SlottedCounter:
    """A token counter that cannot be referred to weakly (no ``__weakref__`` slot)."""

    __slots__ = ()

    def __call__(self, messages: list[BaseMessage]) -> int:
        return len(messages)


def test_one_wrapper_per_token_counter_across_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    counter = CountedCalls()
    with ThreadPoolExecutor(8) as pool:
        wrappers = list(pool.map(lambda _: adapter._counter(counter), range(64)))
    assert all(wrapper is wrappers[0] for wrapper in wrappers)
    assert adapter._counter("approximate") is adapter._counter(count_tokens_approximately)
