"""pydantic-ai adapter: the history processor inside a real Agent with a FunctionModel,
and the window of list[ModelMessage] on its own."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import re
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import ctxwindow
from ctxwindow import InvalidMessage, OrphanToolResult, get_counter
from ctxwindow_adapters import pydantic_ai as adapter
from ctxwindow_adapters.testing import AdapterConformance


def history(turns: int = 10, words: int = 30) -> list[ModelMessage]:
    """A system prompt with the first question, then per turn two parallel tool calls,
    their returns (in the other order), an answer and the next question: 41 messages."""
    out: list[ModelMessage] = [
        ModelRequest(
            parts=[SystemPromptPart("Be brief."), UserPromptPart("question 0 " + "w " * 30)]
        )
    ]
    for t in range(turns):
        out.append(
            ModelResponse(
                parts=[
                    TextPart("Let me look."),
                    ToolCallPart("lookup", {"q": t}, tool_call_id=f"a{t}"),
                    ToolCallPart("lookup", {"q": -t}, tool_call_id=f"b{t}"),
                ],
                model_name="m",
            )
        )
        out.append(
            ModelRequest(
                parts=[
                    ToolReturnPart("lookup", "r " * words, tool_call_id=f"b{t}"),
                    ToolReturnPart("lookup", {"rows": ["r"] * (words // 3)}, tool_call_id=f"a{t}"),
                ]
            )
        )
        out.append(ModelResponse(parts=[TextPart("answer " * 15)], model_name="m"))
        out.append(
            ModelRequest(
                parts=[UserPromptPart(f"question {t + 1} " + "w " * 30)], metadata={"turn": t}
            )
        )
    return out  # fmt: skip


def check_valid(messages: list[ModelMessage]) -> None:
    """Each tool call is answered in the next request, each return answers the response
    before it, and the history ends with a request (pydantic-ai requires it)."""
    assert isinstance(messages[-1], ModelRequest)
    for index, message in enumerate(messages):
        returns = {p.tool_call_id for p in message.parts if isinstance(p, ToolReturnPart)}
        calls = {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
        if returns:
            before = messages[index - 1]
            assert isinstance(before, ModelResponse)
            assert returns == {p.tool_call_id for p in before.parts if isinstance(p, ToolCallPart)}
        if calls:
            after = messages[index + 1]
            assert calls == {p.tool_call_id for p in after.parts if isinstance(p, ToolReturnPart)}


def test_select_round_trip() -> None:
    messages = history()
    before = copy.deepcopy(messages)
    counter = get_counter("approx")
    window = adapter.select(messages, 400, counter=counter)
    assert messages == before
    assert len(messages) == 41
    assert window.messages[0] is messages[0]  # the system prompt and the task statement
    # Without the task statement, the first request loses its user prompt: a copy of it
    # holds the system part alone.
    window = adapter.select(messages, 400, counter=counter, task_statement=False)
    kept = window.messages
    check_valid(kept)
    first = kept[0]
    assert first is not messages[0] and first.parts == [messages[0].parts[0]]  # system part
    assert dataclasses.replace(messages[0], parts=first.parts) == first  # every other field
    assert all(any(m is o for o in messages) for m in kept[1:])
    assert kept[-1] is messages[-1]
    assert sum(counter.count_message(m) for m in adapter.read_messages(kept).messages) <= 400
    assert window.record.messages_before == 41 and window.record.messages_after == len(kept)


@pytest.mark.parametrize("strategy", ["fixed", "sliding", "summarize"])
def test_history_processor_in_a_real_agent(strategy: str) -> None:
    messages = history(12)[:-1]  # ends with the model's answer; the run adds a question
    received: list[list[ModelMessage]] = []

    def model(seen: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(list(seen))
        return ModelResponse(parts=[TextPart("fine")])

    processor = adapter.ctxwindow_processor(budget=500, strategy=strategy)
    agent = Agent(FunctionModel(model), capabilities=[processor.capability()])
    result = agent.run_sync("and now?", message_history=messages)
    assert result.output == "fine"
    (seen,) = received
    window = processor.last
    assert window is not None and window.record.engaged
    assert len(seen) < len(messages)
    # what the model got is the window (pydantic-ai puts tool returns in call order and
    # joins consecutive requests)
    assert summary(seen) == summary(window.messages)
    check_valid(seen)
    newest = seen[-1]
    assert isinstance(newest, ModelRequest) and newest.parts[-1].content == "and now?"
    assert isinstance(seen[0].parts[0], SystemPromptPart)
    made = [p for m in seen for p in m.parts
            if isinstance(p, UserPromptPart) and str(p.content).startswith("Summary")]  # fmt: skip
    assert bool(made) == (strategy == "summarize")
    if strategy == "summarize":
        assert window.record.count("summarized") > 0
        (made_request,) = [m for m in window.messages if "ctxwindow" in (m.metadata or {})]
        assert made_request.metadata["ctxwindow"]["synthetic"] is True


def test_processor_is_async_and_keeps_the_last_request() -> None:
    # the last request holds only tool returns: pinned, so the window still ends with it
    messages = history(6)[:-2]
    processor = adapter.ctxwindow_processor(budget=300)
    out = asyncio.run(processor(messages))
    assert out[-1] is messages[-1] and out[-2] is messages[-2]
    check_valid(out)
    windower = ctxwindow.from_config({"strategy": "fixed", "budget": 9999})
    overridden = adapter.ctxwindow_processor(300, windower=windower)
    assert overridden.windower.budget == 300
    assert asyncio.run(overridden(messages)) == out
    agent = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")])),
                  capabilities=[ProcessHistory(processor)])  # fmt: skip
    assert agent.run_sync("q", message_history=history(3)).output == "x"


def test_a_request_is_split_by_its_parts() -> None:
    # a request answering a call and asking a new question in one
    messages = history(4)
    mixed = ModelRequest(parts=[*messages[-3].parts, UserPromptPart("also this " + "w " * 20)])
    messages[-3] = mixed
    del messages[-2:]  # ... so that its question is the newest one
    messages.append(ModelResponse(parts=[TextPart("ok " * 40)]))
    messages.append(ModelRequest(parts=[UserPromptPart("last")]))
    counter = get_counter("approx")
    keep = adapter.read_messages(messages[-3:]).messages
    budget = sum(counter.count_message(m) for m in keep[-3:]) + 10
    window = adapter.select(messages, budget, counter=counter)
    copies = [m for m in window.messages if not any(m is o for o in messages)]
    assert [c.parts for c in copies] == [[messages[0].parts[0]], [mixed.parts[-1]]]
    assert copies[1].parts[0] is mixed.parts[-1]
    check_valid(window.messages)


def test_the_runs_of_decisions_are_in_the_callers_positions() -> None:
    """A request with two tool returns is two Messages: the runs gave the adapter's
    positions, one more for every such request before them."""
    messages = history(30)
    record = adapter.select(messages, 400, "fixed").record
    units = {d.unit: d.positions for d in record.decisions}
    (dropped,) = [run for run in record.decision_runs if run.action == "dropped"]
    assert type(dropped.positions) is range and dropped.positions.stop <= len(messages)
    for run in record.decision_runs:
        assert list(run.positions) == sorted({p for u in run.units for p in units[u]}), run


def test_a_summary_covers_the_callers_positions_as_the_record_does() -> None:
    """A request is read into several Messages: the summary's ``covers`` named those
    (``#2 ... #51`` of 41 requests and responses); it names the caller's items, each
    once, the very ones the record says it summarized or kept as written from, as
    LangChain's summary does."""
    messages: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("Plan a trip.")])
    ]
    for turn in range(20):
        call = ToolCallPart("lookup", {"i": turn}, tool_call_id=f"c{turn}")
        answer = ToolReturnPart("lookup", f"r{turn} " * 30, tool_call_id=f"c{turn}")
        messages += [
            ModelResponse(parts=[call]),
            ModelRequest(parts=[answer, UserPromptPart(f"question {turn} " * 5)]),
        ]
    window = adapter.select(messages, 300, "summarize")
    (summary,) = [m for m in window.messages if m.metadata and "ctxwindow" in m.metadata]
    covers = summary.metadata["ctxwindow"]["covers"]
    summarized = sorted(
        {p for d in window.record.decisions if d.action == "summarized" for p in d.positions}
    )
    # and the newest it was written from, kept verbatim too in the room it leaves
    written_from = {
        p for d in window.record.decisions if "written from it too" in d.reason for p in d.positions
    }
    assert summarized and covers == tuple(f"#{p}" for p in sorted({*summarized, *written_from}))
    assert all(int(ref[1:]) < len(messages) for ref in covers)


def test_bad_input_names_the_message() -> None:
    with pytest.raises(InvalidMessage, match="message 1: expected a ModelRequest"):
        adapter.select([ModelRequest(parts=[UserPromptPart("x")]), {"role": "user"}], 50)
    orphan = [ModelRequest(parts=[UserPromptPart("x")]),
              ModelRequest(parts=[ToolReturnPart("f", "r", tool_call_id="zz")])]  # fmt: skip
    with pytest.raises(OrphanToolResult, match="message 1: tool result for call 'zz'"):
        adapter.select(orphan, 50)
    unanswered = [ModelRequest(parts=[UserPromptPart("x")]),
                  ModelResponse(parts=[ToolCallPart("f", {}, tool_call_id="c")]),
                  ModelRequest(parts=[UserPromptPart("y")])]  # fmt: skip
    with pytest.raises(OrphanToolResult, match="message 1: the assistant's tool call"):
        adapter.select(unanswered, 50)


def summary(messages: list[ModelMessage]) -> list[tuple[str, list[tuple[str, Any, str]]]]:
    """Each message's kind and its parts (kind, call id, content), parts sorted, and
    consecutive requests joined."""
    out: list[tuple[str, list[tuple[str, Any, str]]]] = []
    for m in messages:
        parts = [(type(p).__name__, getattr(p, "tool_call_id", None) or "",
                  str(getattr(p, "content", ""))) for p in m.parts]  # fmt: skip
        if out and out[-1][0] == "ModelRequest" == type(m).__name__:
            parts = out.pop()[1] + parts
        out.append((type(m).__name__, sorted(parts)))
    return out


def test_truncation_cuts_a_copy_and_the_record_names_the_callers_message() -> None:
    messages = [ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("long " * 300)])]
    window = adapter.select(messages, 100, oversize="truncate")
    (request,) = window.messages
    assert request is not messages[0] and request.parts[0] is messages[0].parts[0]
    assert str(request.parts[1].content).endswith("cut by ctxwindow to fit the token budget]")
    assert messages[0].parts[1].content == "long " * 300
    (note,) = window.record.notes
    assert note.startswith("truncated message 0 from 1,500 to ")
    assert [d.action for d in window.record.decisions] == ["kept", "truncated"]
    assert all(d.positions == (0,) for d in window.record.decisions)


def test_budget_too_small_names_the_tool_return_and_what_helps() -> None:
    """A tool return that cannot fit is named as the caller's message, part and tool;
    the advice is what can help (oversize='cut', a bigger budget), never truncating the
    user message."""
    messages: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("Why did it fail?")]),
        ModelResponse(parts=[ToolCallPart("read_log", {"job": 7}, tool_call_id="log")]),
        ModelRequest(parts=[ToolReturnPart("read_log", "error line\n" * 2000, tool_call_id="log")]),
    ]
    with pytest.raises(ctxwindow.BudgetTooSmall) as raised:
        adapter.select(messages, 300, oversize="raise")
    text = str(raised.value)
    biggest = "message 2 of the messages passed, its ToolReturnPart of tool 'read_log' (call 'log')"
    assert biggest in text and raised.value.biggest.startswith(biggest)
    assert re.search(r"\b[\d,]+ tokens;", text)
    assert "oversize='cut'" in text and "raise the budget" in text
    assert "truncate" not in text and "newest user" not in text
    assert raised.value.budget == 300 and raised.value.needed > 5000
    assert raised.value.position == 2  # the caller's item, as data
    assert f"{raised.value.biggest_tokens:,} tokens" in text
    assert adapter.select(messages, 300).messages[-1] is not messages[-1]  # 'cut' fits it

    # in a real agent, where even cut to its head and tail the result cannot fit
    def model(seen: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart("read_log", {"job": 7}, tool_call_id="log")])
        return ModelResponse(parts=[TextPart("fine")])

    processor = adapter.ctxwindow_processor(budget=40)
    agent = Agent(FunctionModel(model), capabilities=[processor.capability()])

    @agent.tool_plain
    def read_log(job: int) -> str:
        return "error line\n" * 2000

    with pytest.raises(ctxwindow.BudgetTooSmall) as raised:
        agent.run_sync("Why did it fail?", message_history=[])
    text = str(raised.value)
    assert "message 2 of the messages passed, its ToolReturnPart of tool 'read_log'" in text
    assert "raise the budget" in text and "truncating the UserPromptPart cannot help" in text
    assert "pass oversize='truncate'" not in text

    # a user prompt that is too big keeps the core's advice, in the caller's positions
    asked = [*messages[:2], ModelRequest(parts=[UserPromptPart("paste " * 2000)])]
    asked[1] = ModelResponse(parts=[TextPart("Which job?")])
    said = r"message 2 of the messages passed, its UserPromptPart, .* pass oversize='truncate'"
    with pytest.raises(ctxwindow.BudgetTooSmall, match=said):
        asyncio.run(adapter.aselect(asked, 100, oversize="raise"))


def cleared_returns(
    window: list[ModelMessage], messages: list[ModelMessage], stub: re.Pattern[str]
) -> list[str]:
    """The call ids whose ToolReturnPart came back holding the stub, in a copied request
    that differs from the original only there."""
    returns = {p.tool_call_id: (m, p) for m in messages for p in m.parts if _is_return(p)}
    cleared = []
    for message in window:
        if any(message is m for m in messages):
            continue
        if not any(_is_return(p) for p in message.parts):
            continue  # the first request, its question dropped; the run's new question
        assert isinstance(message, ModelRequest)
        original = returns[message.parts[0].tool_call_id][0]
        assert dataclasses.replace(original, parts=message.parts) == message
        assert len(message.parts) == len(original.parts)
        for part, was in zip(message.parts, original.parts, strict=True):
            if part is was:
                continue
            assert part == dataclasses.replace(was, content=part.content)
            assert stub.fullmatch(part.content).groups() == ("lookup", part.tool_call_id)
            cleared.append(part.tool_call_id)
    return cleared


def _is_return(part: Any) -> bool:
    return isinstance(part, ToolReturnPart)


def test_cleared_returns_come_back_as_tool_return_parts(stand_in_run: Any) -> None:
    messages = history(6, words=300)
    strategy, _, budget = stand_in_run
    window = stand_in_run.select(adapter.select, messages)
    check_valid(window.messages)
    cleared = cleared_returns(window.messages, messages, stand_in_run.stub)
    answered = [p.tool_call_id for m in window.messages for p in m.parts if _is_return(p)]
    assert cleared == answered[:-1] and len(cleared) >= 5  # keep_recent=1
    replaced = [d for d in window.record.decisions if d.action == "replaced"]
    in_replaced = {p.tool_call_id for d in replaced for i in d.positions
                   for p in messages[i].parts if _is_return(p)}  # fmt: skip
    assert set(cleared) <= in_replaced
    assert window.record.count("dropped") > 0 if strategy == "pipeline" else len(answered) == 12
    assert window.record.tokens_after <= budget
    assert window.record.tokens_after < window.record.tokens_before / 2
    counter = get_counter("approx")
    read = adapter.read_messages(window.messages).messages
    assert sum(counter.count_message(m) for m in read) == window.record.tokens_after


def test_cleared_returns_reach_a_real_agent(stand_in_run: Any) -> None:
    messages = history(6, words=300)[:-1]  # ends with the model's answer
    before = copy.deepcopy(messages)
    received: list[list[ModelMessage]] = []

    def model(seen: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(list(seen))
        return ModelResponse(parts=[TextPart("fine")])

    strategy, options, budget = stand_in_run
    stub = stand_in_run.stub
    processor = adapter.ctxwindow_processor(budget=budget, strategy=strategy, **options)
    agent = Agent(FunctionModel(model), capabilities=[processor.capability()])
    result = agent.run_sync("and now?", message_history=messages)
    assert result.output == "fine" and messages == before
    (seen,) = received
    check_valid(seen)
    window = processor.last
    assert window is not None and window.record.count("replaced") >= 3
    stubs = [p for m in seen for p in m.parts if _is_return(p) and stub.fullmatch(str(p.content))]
    cleared = cleared_returns(window.messages, messages, stand_in_run.stub)
    assert sorted(p.tool_call_id for p in stubs) == sorted(cleared) and len(cleared) >= 3
    assert all(stub.fullmatch(p.content).group(2) == p.tool_call_id for p in stubs)


class ShortensTheFirstQuestion(ctxwindow.BaseStrategy):
    """Keeps everything, sending a shorter stand-in for the first question."""

    name = "shortens_the_first_question"

    def engages_within_budget(self, history: ctxwindow.History) -> bool:
        return True

    def choose(self, history: ctxwindow.History) -> ctxwindow.Selection:
        selection = history.selection()
        for unit in range(len(history.units)):
            if unit not in history.must_keep:
                selection.keep(unit, "kept")
        first = next(p for p, m in enumerate(history.messages) if m.role == "user")
        stub = dataclasses.replace(
            history.messages[first], content="question 0, shortened", metadata={"synthetic": True}
        )
        selection.replace(first, stub, "shortened")
        return selection


def test_a_stand_in_for_part_of_a_request_replaces_only_that_part() -> None:
    messages = history(3)
    before = copy.deepcopy(messages)
    # the task statement off: kept by rule, the first question could not be replaced
    strategy = ShortensTheFirstQuestion(task_statement=False)
    window = adapter.select(messages, 10_000, strategy)
    assert messages == before
    first, *rest = window.messages
    assert all(m is o for m, o in zip(rest, messages[1:], strict=True))
    system, question = first.parts
    assert system is messages[0].parts[0]
    assert question == dataclasses.replace(messages[0].parts[1], content="question 0, shortened")
    (decision,) = [d for d in window.record.decisions if d.action == "replaced"]
    assert decision.positions == (0,) and decision.reason == "shortened"


class TestConformance(AdapterConformance):
    strategies = ("newest", "fixed", "sliding")
    budgets = range(120, 1100, 40)

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


# -- remembered reads ---------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["fixed", "sliding"])
def test_grown_message_by_message_reads_only_the_new_ones(
    counted_reads: Any, strategy: str
) -> None:
    # at most the new message and the request that was last (pinned no more)
    counted_reads(adapter).check_growth(history(14), 600, strategy, most=2)


def test_a_grown_history_is_one_the_core_recognises(counted_reads: Any) -> None:
    """The Messages read before are the very ones sent again, the last request's
    included: the core grows its remembered history by the new Message instead of
    reading the whole list (a Message that changed, say a pin dropped once its request
    is no longer last, would make every turn a cold read)."""
    reads = counted_reads(adapter)
    messages = history(10)
    before = reads.read(messages)
    grown = [*messages, ModelResponse(parts=[TextPart("an answer")], model_name="m")]
    after = reads.read(grown)
    assert reads.starts[-1] == (len(messages), len(grown))
    assert all(a is b for a, b in zip(before.messages, after.messages, strict=False))
    windower = ctxwindow.from_config({"strategy": "fixed", "budget": 300, "counter": "approx"})
    windower.select(before.messages)
    counted: list[Any] = []
    count_message = windower.counter.count_message

    def counting(message: Any) -> int:
        counted.append(message)
        return count_message(message)

    windower.counter.count_message = counting  # type: ignore[method-assign]
    windower.select(after.messages)
    assert len(counted) <= 2, counted  # the new Message, not the history


def test_a_part_changed_in_place_is_read_again(counted_reads: Any) -> None:
    reads = counted_reads(adapter)
    messages = history(10)
    reads.read(messages)
    part = messages[-3].parts[0]
    assert isinstance(part, ToolReturnPart)
    part.content = "a different tool output " * 40
    converted = reads.read(messages)
    assert reads.starts[-1] == (0, len(messages))  # read whole again
    assert any("a different tool output" in m.text for m in converted.messages)


def test_a_processor_given_a_windower_and_a_budget_keeps_its_time_limit() -> None:
    given = ctxwindow.Windower(
        ctxwindow.get_strategy("fixed"), 4000, time_limit=0.5, on_timeout="recent"
    )
    processor = adapter.ctxwindow_processor(windower=given, budget=2000)
    assert processor.windower.budget == 2000
    assert processor.windower.time_limit == given.time_limit


def test_a_missing_sdk_names_the_adapters_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['pydantic_ai'] = None\n"
        "sys.modules['langchain_core'] = None\n"
        "for name in ('langchain', 'pydantic_ai'):\n"
        "    try:\n"
        "        __import__('ctxwindow_adapters.' + name)\n"
        "    except ImportError as error:\n"
        "        print(error)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = run.stdout
    assert "pip install 'ctxwindow-adapters[langchain]'" in out
    assert "pip install 'ctxwindow-adapters[pydantic-ai]'" in out
    assert "ctxwindow_adapters.pydantic_ai needs" in out and "ctxwindow.adapters" not in out


def test_a_tool_returns_nested_content_edited_in_place_is_read_again() -> None:
    """A ToolReturnPart's dict content changed in place: the same part, the same dict."""
    messages: list[Any] = []
    for number in range(20):
        call = ToolCallPart("read", {"n": number}, f"c{number}")
        messages.append(ModelRequest(parts=[UserPromptPart(f"question {number}")]))
        messages.append(ModelResponse(parts=[call]))
        messages.append(ModelRequest(parts=[ToolReturnPart("read", {"rows": "r"}, f"c{number}")]))
    adapter.select(messages, 100_000)
    messages[-1].parts[0].content["rows"] = "row " * 500
    window = adapter.select(messages, 100_000)
    adapter._READS.remembered.clear()
    fresh = adapter.select(messages, 100_000)
    assert window.record.tokens_before == fresh.record.tokens_before > 400


@pytest.mark.parametrize(
    ("parts", "says"),
    [
        ([SystemPromptPart("rule " * 2000), UserPromptPart("hi")], "agent's system_prompt"),
        ([UserPromptPart("paste " * 2000)], "the last request's UserPromptPart text"),
    ],
    ids=["system", "user"],
)
def test_budget_too_small_advises_in_pydantic_ais_terms(parts: list[Any], says: str) -> None:
    """The advice names the parts an app holds and the options the adapter takes, not
    another framework's messages (a "system prompt", "the newest user message")."""
    with pytest.raises(ctxwindow.BudgetTooSmall) as raised:
        adapter.select([ModelRequest(parts=parts)], 60, oversize="raise")
    text = str(raised.value)
    assert says in text
    assert "newest user message" not in text and "tool results" not in text
    assert "shorten the system prompt" not in text


def test_an_image_in_a_tool_return_counts_as_a_non_text_part() -> None:
    """A ToolReturnPart holding an image (BinaryContent) costs what an image in a
    UserPromptPart costs, never the few characters pydantic-ai renders it as."""
    image = BinaryContent(b"\x89PNG" + b"x" * 100_000, media_type="image/png")
    call = ModelResponse(parts=[ToolCallPart("snap", {}, "c1")])
    returned = [ModelRequest(parts=[UserPromptPart("go")]), call,
                ModelRequest(parts=[ToolReturnPart("snap", image, "c1")])]  # fmt: skip
    asked = [ModelRequest(parts=[UserPromptPart(["look", image])])]
    counter = get_counter("approx")
    tool = [m for m in adapter.read_messages(returned).messages if m.role == "tool"]
    user = adapter.read_messages(asked).messages
    assert counter.count_message(tool[0]) >= counter.count_message(user[0]) - 2 > 80
    both = [ModelRequest(parts=[ToolReturnPart("snap", ["here", image], "c1")])]
    listed = adapter.read_messages([*returned[:2], *both]).messages[-1]
    assert counter.count_message(listed) > 80
