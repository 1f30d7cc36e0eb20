"""OpenAI adapters: chat-completions dicts and Responses API items, checked against the
real openai client (its request goes to a local server that records the body)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any

import pydantic
import pytest

openai = pytest.importorskip("openai")

from openai.types.chat import ChatCompletionMessageParam  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseInputParam  # noqa: E402

import ctxwindow  # noqa: E402
from ctxwindow import InvalidMessage, InvalidOption, OrphanToolResult, get_counter  # noqa: E402
from ctxwindow_adapters import openai as chat  # noqa: E402
from ctxwindow_adapters import openai_responses as responses  # noqa: E402
from ctxwindow_adapters.testing import AdapterConformance  # noqa: E402

OPENAI_CHAT = pydantic.TypeAdapter(list[ChatCompletionMessageParam])
CHAT_REPLY = {
    "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "ok"}}],
}  # fmt: skip
RESPONSES_REPLY = {
    "id": "resp_1", "object": "response", "created_at": 0, "model": "m", "status": "completed",
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}]}],
}  # fmt: skip


@pytest.fixture
def server(recording_server: Any) -> tuple[str, list[tuple[str, Any]]]:
    """A local server answering like the API; the (path, body) of each request."""
    return recording_server(
        lambda path: RESPONSES_REPLY if path.endswith("/responses") else CHAT_REPLY, "/v1"
    )


def client(base_url: str) -> Any:
    return openai.OpenAI(api_key="test", base_url=base_url, max_retries=0, timeout=10)


# -- chat completions -------------------------------------------------------------------
def chat_history(turns: int = 10) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "Be brief.", "id": "sys"}]
    for t in range(turns):
        out.append({"role": "user", "content": f"question {t} " + "word " * 20, "id": f"u{t}"})
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"a{t}",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    },
                    {
                        "id": f"b{t}",
                        "type": "function",
                        "function": {"name": "g", "arguments": "{}"},
                    },
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": f"b{t}", "content": "result " * 15})
        out.append({"role": "tool", "tool_call_id": f"a{t}", "content": "result " * 15})
        out.append({"role": "assistant", "content": "answer " * 12, "metadata": {"x": t}})
    out.append({"role": "user", "content": "and now?", "id": "last"})
    return out  # fmt: skip


def test_chat_window_is_the_same_dicts_and_goes_out_through_the_real_client(server) -> None:
    base_url, bodies = server
    history = chat_history()
    before = copy.deepcopy(history)
    window = chat.select(history, 400)
    assert history == before
    assert len(history) == 52
    assert 4 < len(window) < len(history)
    assert all(any(m is h for h in history) for m in window.messages)
    assert window.messages[0] is history[0] and window.messages[-1] is history[-1]
    assert window.record.tokens_after <= 400
    request = chat.request_messages(window)
    OPENAI_CHAT.validate_python(request)
    reply = client(base_url).chat.completions.create(model="m", messages=request)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "ok"
    assert bodies[-1][1]["messages"] == request
    assert all("id" not in m and "metadata" not in m for m in request)


def test_chat_adapter_takes_a_windower_and_is_ctxwindow_to_openai() -> None:
    assert chat.to_openai is ctxwindow.to_openai
    windower = ctxwindow.from_config({"strategy": "fixed", "budget": 400})
    history = chat_history()
    assert [id(m) for m in chat.select(history, windower=windower).messages] == [
        id(m) for m in ctxwindow.select(history, 400).messages
    ]
    with pytest.raises(InvalidOption, match="not both"):
        chat.select(history, windower=windower, strategy="fixed")
    with pytest.raises(InvalidOption, match="budget is required"):
        chat.select(history)


# -- Responses API ----------------------------------------------------------------------
def responses_history(turns: int = 8, words: int = 30) -> list[Any]:
    """40 items: per turn a user message, a reasoning item with two parallel function
    calls, their outputs (in the other order), and an assistant message."""
    items: list[Any] = [{"type": "message", "role": "developer", "content": "Be brief."}]
    for t in range(turns):
        items.append(
            {
                "role": "user",
                "content": [{"type": "input_text", "text": f"question {t} " + "word " * 20}],
            }
        )
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{t}",
                "summary": [{"type": "summary_text", "text": "thinking " * 5}],
                "encrypted_content": "xyz",
            }
        )
        items.append(
            {
                "type": "function_call",
                "id": f"fc_a{t}",
                "call_id": f"a{t}",
                "name": "lookup",
                "arguments": json.dumps({"q": t}),
            }
        )
        items.append(
            {
                "type": "function_call",
                "id": f"fc_b{t}",
                "call_id": f"b{t}",
                "name": "lookup",
                "arguments": json.dumps({"q": -t}),
            }
        )
        items.append({"type": "function_call_output", "call_id": f"b{t}", "output": "r " * words})
        items.append({"type": "function_call_output", "call_id": f"a{t}", "output": "r " * words})
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "id": f"msg_{t}",
                "status": "completed",
                "content": [{"type": "output_text", "text": "answer " * 10, "annotations": []}],
            }
        )
    items.append({"role": "user", "content": "and now?"})
    return items  # fmt: skip


def field(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def check_pairs(items: list[Any]) -> None:
    """Every reasoning item is followed by its calls, every call's output follows, and
    no output lacks its call: what the API requires."""
    open_calls: set[str] = set()
    for index, item in enumerate(items):
        kind = field(item, "type")
        if kind == "function_call":
            open_calls.add(field(item, "call_id"))
        elif kind == "function_call_output":
            assert field(item, "call_id") in open_calls, f"orphan at {index}"
            open_calls.discard(field(item, "call_id"))
        elif kind == "reasoning":
            assert field(items[index + 1], "type") == "function_call"
        elif open_calls:
            pytest.fail(f"item {index} comes before the outputs of {open_calls}")
    assert not open_calls


def test_responses_round_trip_keeps_pairs_and_reasoning_and_goes_out(server) -> None:
    base_url, bodies = server
    items = responses_history()
    before = copy.deepcopy(items)
    counter = get_counter("approx")
    window = responses.select(items, 500, counter=counter)
    assert items == before
    assert len(items) == 58
    kept = window.messages
    assert all(any(m is i for i in items) for m in kept)  # the very objects
    positions = [next(p for p, i in enumerate(items) if i is m) for m in kept]
    assert positions == sorted(positions)
    assert kept[0] is items[0] and kept[-1] is items[-1]  # developer and newest user
    check_pairs(kept)
    assert sum(counter.count_message(m) for m in responses.read_items(kept).messages) <= 500
    assert window.record.messages_before == 58 and window.record.messages_after == len(kept)
    dropped = [d for d in window.record.decisions if d.action == "dropped"]
    assert dropped and all(max(d.positions) < 58 for d in dropped)
    turn = next(d for d in window.record.decisions if 2 in d.positions)
    assert turn.positions == (2, 3, 4, 5, 6) and turn.ids == ("rs_0", "fc_a0", "fc_b0", None, None)
    pydantic.TypeAdapter(ResponseInputParam).validate_python(kept)
    reply = client(base_url).responses.create(model="m", input=kept)
    assert reply.output_text == "ok"
    assert bodies[-1][0].endswith("/responses") and bodies[-1][1]["input"] == kept


@pytest.mark.parametrize("strategy", ["fixed", "sliding", "summarize"])
def test_responses_strategies_give_valid_input(server, strategy: str) -> None:
    base_url, bodies = server
    items = responses_history(12)
    window = responses.select(items, 450, strategy)
    check_pairs(window.messages)
    made = [m for m in window.messages if not any(m is i for i in items)]
    if strategy == "summarize":
        assert made and made[0]["type"] == "message" and made[0]["role"] == "system"
        assert window.record.count("summarized") > 0
    else:
        assert not made
    pydantic.TypeAdapter(ResponseInputParam).validate_python(window.messages)
    client(base_url).responses.create(model="m", input=window.messages)
    assert bodies[-1][1]["input"] == window.messages


def interleaved_history(turns: int) -> list[dict[str, Any]]:
    """A reasoning model's parallel calls, each output put right after its call (as
    many agent loops append them), turn after turn."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "audit the service"}]
    for t in range(turns):
        items.append(
            {"type": "reasoning", "id": f"rs_{t}", "summary": [], "encrypted_content": "e"}
        )
        for call in ("a", "b"):
            call_id = f"{call}{t}"
            items.append(
                {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id,
                 "name": "read", "arguments": json.dumps({"path": f"{call_id}.py"})}
            )  # fmt: skip
            items.append({"type": "function_call_output", "call_id": call_id, "output": "x " * 60})
    items.append({"role": "user", "content": "and now?"})
    return items


@pytest.mark.parametrize("strategy", ["fixed", "sliding", "clear_tool_outputs"])
@pytest.mark.parametrize("budget", [150, 300, 600])
def test_responses_parallel_calls_with_outputs_between_keep_their_reasoning(
    strategy: str, budget: int
) -> None:
    items = interleaved_history(6)
    window = responses.select(items, budget, strategy)
    kept = window.messages
    positions = [next(p for p, i in enumerate(items) if i is m) for m in kept]
    assert positions == sorted(positions)  # the caller's order
    check_pairs(kept)
    for position in positions:  # a kept call's response keeps its reasoning item
        if items[position].get("type") == "function_call":
            reasoning = max(p for p in range(position) if items[p].get("type") == "reasoning")
            assert reasoning in positions, (position, reasoning)
    pydantic.TypeAdapter(ResponseInputParam).validate_python(kept)
    turn = next(d for d in window.record.decisions if 1 in d.positions)
    assert turn.positions == (1, 2, 3, 4, 5)  # one response: reasoning, calls, outputs


@pytest.mark.parametrize("strategy", ["fixed", "sliding"])
def test_responses_runs_of_decisions_are_in_the_callers_positions(strategy: str) -> None:
    """A turn is one Message of several items, its outputs read after it even where the
    caller put them between its calls: the runs gave the adapter's positions (three
    Messages for each turn's five items)."""
    items = interleaved_history(40)
    record = responses.select(items, 300, strategy).record
    units = {d.unit: d.positions for d in record.decisions}
    (dropped,) = [run for run in record.decision_runs if run.action == "dropped"]
    assert dropped.positions == range(1, 1 + 5 * len(dropped.units))  # whole turns
    for run in record.decision_runs:
        assert list(run.positions) == sorted({p for u in run.units for p in units[u]}), run
    assert record.count("dropped") == sum(d.action == "dropped" for d in record.decisions)


def test_responses_sdk_objects_come_back_as_themselves() -> None:
    items = responses_history(6)
    for index, item in enumerate(items):
        if item.get("type") == "function_call":
            items[index] = ResponseFunctionToolCall(**item)
    window = responses.select(items, 300)
    objects = [m for m in window.messages if isinstance(m, ResponseFunctionToolCall)]
    assert objects and all(any(o is i for i in items) for o in objects)
    check_pairs(window.messages)


def test_responses_other_items_are_kept_whole() -> None:
    items = [
        {"role": "user", "content": "search the web " * 20},
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "x"}},
        {"type": "message", "role": "assistant", "content": "found " * 20},
        {"type": "item_reference", "id": "msg_0"},
        {"role": "user", "content": "thanks"},
    ]  # fmt: skip
    window = responses.select(items, 40)
    assert window.messages[-1] is items[-1]
    assert window.messages == [items[3], items[4]] or window.messages == [items[4]]


def test_responses_bad_input_names_the_item() -> None:
    with pytest.raises(InvalidMessage, match="message 1: unknown message role 'robot'"):
        responses.select([{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}], 50)
    with pytest.raises(InvalidMessage, match="message 0: expected a Responses API item"):
        responses.select([42], 50)
    with pytest.raises(InvalidMessage, match="needs the 'call_id'"):
        responses.select([{"type": "function_call_output", "output": "x"}], 50)
    orphan = [{"role": "user", "content": "x"},
              {"type": "function_call_output", "call_id": "zz", "output": "x"}]  # fmt: skip
    with pytest.raises(OrphanToolResult, match="message 1: tool result for call 'zz'"):
        responses.select(orphan, 50)
    window = responses.select(orphan, 50, orphans="drop")
    assert window.messages == [orphan[0]]
    assert any(d.positions == (1,) and d.action == "dropped" for d in window.record.decisions)


@pytest.mark.parametrize("strategy", ["fixed", "sliding", "summarize"])
def test_chat_strategies_give_valid_requests(server, strategy: str) -> None:
    base_url, bodies = server
    history = chat_history(14)
    window = chat.select(history, 450, strategy)
    made = [m for m in window.messages if not any(m is h for h in history)]
    assert bool(made) == (strategy == "summarize")
    assert all(m["metadata"]["synthetic"] for m in made)  # a summary carries its metadata
    request = chat.request_messages(window)
    OPENAI_CHAT.validate_python(request)
    client(base_url).chat.completions.create(model="m", messages=request)  # type: ignore[arg-type]
    assert bodies[-1][1]["messages"] == request
    assert all("metadata" not in m for m in bodies[-1][1]["messages"])


def check_stand_in_run(window: Any, strategy: str, budget: int, answered: list[str]) -> None:
    """What both OpenAI shapes share: the stand-ins are recorded as replaced, the window
    is within the budget and much smaller."""
    replaced = [d for d in window.record.decisions if d.action == "replaced"]
    assert len(replaced) >= (3 if strategy == "pipeline" else 5)
    assert all(d.reason.startswith(("tool output cleared", "stages[0]")) for d in replaced)
    assert window.record.count("dropped") > 0 if strategy == "pipeline" else len(answered) == 12
    assert window.record.tokens_after <= budget
    assert window.record.tokens_after < window.record.tokens_before / 2


def test_chat_cleared_results_are_tool_messages(server, stand_in_run: Any) -> None:
    base_url, bodies = server
    history = chat_history(6)
    for message in history:
        if message["role"] == "tool":
            message["content"] = "result " * 150
    strategy, _, budget = stand_in_run
    stub = stand_in_run.stub
    window = stand_in_run.select(chat.select, history)
    cleared, stood_for = [], set()
    for message in window.messages:
        if any(message is h for h in history):
            continue
        position = message["metadata"]["stands_in_for"]  # a copy of that very dict
        assert message == {**history[position], "content": message["content"],
                           "metadata": message["metadata"]}  # fmt: skip
        assert message["metadata"]["synthetic"] is True
        call = message["tool_call_id"]
        assert stub.fullmatch(message["content"]).groups() == (
            {"a": "f", "b": "g"}[call[0]],
            call,
        )
        cleared.append(call)
        stood_for.add(position)
    answered = [m["tool_call_id"] for m in window.messages if m["role"] == "tool"]
    assert cleared == answered[:-1]  # keep_recent=1
    check_stand_in_run(window, strategy, budget, answered)
    replaced = {p for d in window.record.decisions if d.action == "replaced" for p in d.positions}
    assert stood_for <= replaced  # in the caller's positions: the very results replaced
    request = chat.request_messages(window)
    OPENAI_CHAT.validate_python(request)
    client(base_url).chat.completions.create(model="m", messages=request)  # type: ignore[arg-type]
    assert bodies[-1][1]["messages"] == request
    sent = [m["content"] for m in bodies[-1][1]["messages"] if m["role"] == "tool"]
    assert sum(bool(stub.fullmatch(text)) for text in sent) == len(cleared)


def test_responses_cleared_outputs_are_function_call_outputs(server, stand_in_run: Any) -> None:
    base_url, bodies = server
    items = responses_history(6, words=300)
    strategy, _, budget = stand_in_run
    stub = stand_in_run.stub
    window = stand_in_run.select(responses.select, items)
    check_pairs(window.messages)
    outputs = {i["call_id"]: i for i in items if i.get("type") == "function_call_output"}
    cleared = []
    for item in window.messages:
        if any(item is i for i in items):
            continue
        original = outputs[item["call_id"]]  # a copy of the output: a new output only
        assert item == {**original, "output": item["output"]}
        assert stub.fullmatch(item["output"]).groups() == ("lookup", item["call_id"])
        cleared.append(item["call_id"])
    answered = [i["call_id"] for i in window.messages if i.get("type") == "function_call_output"]
    assert cleared == answered[:-1]  # keep_recent=1
    check_stand_in_run(window, strategy, budget, answered)
    replaced = [d for d in window.record.decisions if d.action == "replaced"]
    in_replaced = {items[p]["call_id"] for d in replaced for p in d.positions
                   if items[p].get("type") == "function_call_output"}  # fmt: skip
    assert set(cleared) <= in_replaced
    counter = get_counter("approx")
    read = responses.read_items(window.messages).messages
    assert sum(counter.count_message(m) for m in read) == window.record.tokens_after
    pydantic.TypeAdapter(ResponseInputParam).validate_python(window.messages)
    client(base_url).responses.create(model="m", input=window.messages)
    assert bodies[-1][1]["input"] == window.messages


class TestChatConformance(AdapterConformance):
    strategies = ("newest", "fixed", "sliding")
    whole_items = True

    @pytest.fixture
    def adapter(self) -> Any:
        return chat

    @pytest.fixture
    def history(self) -> list[Any]:
        return chat_history()

    def read(self, items: Any) -> Any:
        return [ctxwindow.Message.from_dict(item) for item in items]

    def check_valid(self, items: Any) -> None:
        OPENAI_CHAT.validate_python(chat.request_messages(ctxwindow.Window(items, None)))  # type: ignore[arg-type]


class TestResponsesConformance(AdapterConformance):
    strategies = ("newest", "fixed", "sliding")
    budgets = range(60, 950, 30)
    whole_items = True

    @pytest.fixture
    def adapter(self) -> Any:
        return responses

    @pytest.fixture
    def history(self) -> list[Any]:
        return responses_history()

    def read(self, items: Any) -> Any:
        return responses.read_items(items).messages

    def check_valid(self, items: Any) -> None:
        check_pairs(items)


def test_the_openai_adapter_exports_the_same_function() -> None:
    from ctxwindow_adapters import openai as adapter

    assert adapter.to_openai is ctxwindow.to_openai
    messages = [{"role": "user", "content": f"q{i}", "id": f"u{i}"} for i in range(50)]
    window = adapter.select(messages, 60)
    assert adapter.request_messages(window) == ctxwindow.to_openai(window.messages)


def test_using_ctxwindow_loads_no_adapter_or_framework() -> None:
    """Loading the plugins imports this distribution's package (it is listed by
    ``ctxwindow plugins``) and its hook module (request bodies for the CLI), but no
    adapter module and no framework."""
    code = (
        "import sys, ctxwindow\n"
        "ctxwindow.select([{'role': 'user', 'content': 'hi'}], 50, 'fixed')\n"
        "assert 'ctxwindow_adapters.bodies' in sys.modules\n"
        "heavy = ('ctxwindow_adapters.', 'langchain_core', 'pydantic_ai', 'openai', 'anthropic')\n"
        "hook = 'ctxwindow_adapters.bodies'\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy) and m != hook))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- remembered reads ---------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["fixed", "sliding"])
def test_responses_grown_item_by_item_reads_only_the_new_items(
    counted_reads: Any, strategy: str
) -> None:
    """Each item kind in turn (a user message, reasoning, calls, outputs, an answer):
    the new item is read, with the run of model output it may continue, and the window
    is a first read's."""
    # at most the new item and the response it may continue: reasoning, two calls and
    # their outputs (a call after them would belong to that response)
    counted_reads(responses).check_growth(responses_history(14), 450, strategy, most=6)


def test_responses_an_item_changed_in_place_is_read_again(counted_reads: Any) -> None:
    reads = counted_reads(responses)
    items = responses_history(10)
    reads.read(items)
    items[-1]["content"] = "a much longer question now " * 40  # the same dict, changed
    converted = reads.read(items)
    assert reads.starts[-1] == (0, len(items))  # read whole again
    assert converted.messages[-1].text == items[-1]["content"]


def test_responses_a_conversion_handed_out_before_keeps_its_positions(
    counted_reads: Any,
) -> None:
    """Another thread may still be windowing with a conversion while a later call reads
    the run of model output it ended on again: its Messages keep their positions."""
    reads = counted_reads(responses)
    full = responses_history(10)
    cut = max(i for i, item in enumerate(full) if field(item, "type") == "function_call")
    earlier = reads.read(full[: cut + 1])  # ends inside a run of model output
    kept = list(earlier.messages)
    later = reads.read(full)
    assert reads.starts[-1][0] < cut + 1  # the run was read again
    assert earlier.messages == kept
    assert [earlier.position_of(m) for m in kept] == list(range(len(kept)))
    assert later.messages[: len(kept) - 1] == kept[:-1]
    assert later.messages[len(kept) - 1] is not kept[-1]  # the run, with its new items
    assert earlier.position_of(later.messages[len(kept) - 1]) is None


# -- Responses: media in outputs, programs, stand-ins, errors in the caller's list ----
SHOT = "data:image/png;base64," + "A" * 200_000  # its characters are no tokens


def _tool_tokens(items: list[Any]) -> int:
    counter = get_counter("approx")
    messages = responses.read_items(items).messages
    return sum(counter.count_message(m) for m in messages if m.role == "tool")


def test_responses_screenshots_and_images_in_outputs_count_as_non_text_parts() -> None:
    computer = [
        {"type": "computer_call", "call_id": "c1", "action": {"type": "screenshot"}},
        {"type": "computer_call_output", "call_id": "c1",
         "output": {"type": "computer_screenshot", "image_url": SHOT}},
    ]  # fmt: skip
    function = [
        {"type": "function_call", "call_id": "f1", "name": "snap", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1",
         "output": [{"type": "input_text", "text": "here"},
                    {"type": "input_image", "image_url": SHOT}]},
    ]  # fmt: skip
    assert _tool_tokens(computer) < 100
    assert _tool_tokens(function) < 100


def test_responses_a_program_counts_its_code_and_its_output_its_result() -> None:
    items = [
        {"role": "user", "content": "Run it."},
        {"type": "program", "call_id": "p1", "code": "x = 1\n" * 400},
        {"type": "program_output", "call_id": "p1", "result": "row " * 2000},
    ]
    counter = get_counter("approx")
    turn, output = responses.read_items(items).messages[1:]
    assert counter.count_message(turn) > 500
    assert counter.count_message(output) > 1900


def test_responses_stand_ins_stay_valid_for_the_output_type() -> None:
    items = [
        {"role": "user", "content": "Go."},
        {"type": "computer_call", "call_id": "c1", "action": {"type": "screenshot"}},
        {"type": "computer_call_output", "call_id": "c1",
         "output": {"type": "computer_screenshot", "image_url": SHOT}},
        {"type": "shell_call", "call_id": "s1", "action": {"commands": ["ls"]}},
        {"type": "shell_call_output", "call_id": "s1", "output": [
            {"stdout": "file\n" * 3000, "stderr": "",
             "outcome": {"type": "exit", "exit_code": 0}}]},
        {"type": "program", "call_id": "p1", "code": "print(1)"},
        {"type": "program_output", "call_id": "p1", "result": "row " * 2000},
        {"role": "user", "content": "ok"},
    ]  # fmt: skip
    window = responses.select(
        items, 100_000, "clear_tool_outputs", keep_recent=0, min_tokens=0, when="always"
    )
    outputs = {"computer_call_output", "shell_call_output", "program_output"}
    by_call = {x["call_id"]: x for x in window.messages if x.get("type") in outputs}
    assert by_call["c1"] is items[2]  # a screenshot has no valid text stand-in: kept
    shell = by_call["s1"]["output"]
    assert isinstance(shell, list) and shell[0]["outcome"] == {"type": "exit", "exit_code": 0}
    assert "file" not in shell[0]["stdout"]
    program = by_call["p1"]
    assert "output" not in program and "row" not in program["result"]


def test_responses_budget_too_small_names_the_callers_item() -> None:
    items = [
        {"role": "user", "content": "Find the log."},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"role": "user", "content": "Now read it."},
        {"type": "reasoning", "id": "rs_2", "summary": []},
        {"type": "function_call", "call_id": "c3", "name": "log", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c3", "output": "x " * 5000},
    ]
    with pytest.raises(ctxwindow.BudgetTooSmall) as caught:
        responses.select(items, 20)
    assert caught.value.position == 7
    assert "the biggest is message 7," in str(caught.value)


# -- in-place edits of nested parts ---------------------------------------------------
def _parted_history(turns: int, sdk: bool) -> list[Any]:
    """User messages and assistant messages whose text is in a content part (an SDK
    output object when ``sdk``)."""
    from openai.types.responses import ResponseOutputMessage

    items: list[Any] = []
    for t in range(turns):
        items.append({"role": "user", "content": [{"type": "input_text", "text": f"q{t} w w"}]})
        text = {"type": "output_text", "text": f"a{t} w w", "annotations": []}
        answer = {"type": "message", "role": "assistant", "id": f"msg_{t}",
                  "status": "completed", "content": [text]}  # fmt: skip
        items.append(ResponseOutputMessage(**answer) if sdk else answer)  # type: ignore[arg-type]
    return items


@pytest.mark.parametrize("sdk", [False, True], ids=["dict part", "sdk part"])
def test_responses_a_content_part_edited_in_place_is_read_again(sdk: bool) -> None:
    """The same list, the same item, the same part: only its text changed. The window
    and its counts are a first read's, never the stale conversion's."""
    items = _parted_history(20, sdk)
    responses.select(items, 100_000)
    part = items[-3].content[0] if sdk else items[-3]["content"][0]  # a settled answer
    if sdk:
        part.text = "LONG " * 500
    else:
        part["text"] = "LONG " * 500
    window = responses.select(items, 100_000)
    responses._READS.remembered.clear()
    fresh = responses.select(items, 100_000)
    assert window.record.tokens_before == fresh.record.tokens_before > 500
    assert window.messages == fresh.messages


# -- malformed items, item_reference --------------------------------------------------
@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"type": "function_call_output", "output": "x"}, "message 1: .*needs the 'call_id'"),
        ({"type": "message", "role": "assistant", "content": 42}, "message 1: .*'content' must"),
        ({"type": "message", "role": "user", "content": {"a": 1}}, "message 1: .*'content' must"),
        ({"type": "item_reference"}, "message 1: an item_reference needs the 'id'"),
    ],
)
def test_responses_a_malformed_item_raises_naming_it_and_changes_nothing(
    bad: dict[str, Any], says: str
) -> None:
    for items in ([{"role": "user", "content": "x"}, bad],
                  [*responses_history(20)[:1], bad, *responses_history(20)[1:]]):  # fmt: skip
        before = copy.deepcopy(items)
        with pytest.raises(InvalidMessage, match=says):
            responses.select(items, 10_000)
        assert items == before


def test_responses_an_item_of_a_type_the_adapter_does_not_know_is_kept_whole() -> None:
    """The API adds item types: one the adapter does not know is a unit of its own,
    counted as its JSON, sent as it came (refused, an app would break the day it ships)."""
    new = {"type": "hologram_call_output_v9", "payload": "p " * 50}
    items = [*responses_history(4), new, {"role": "user", "content": "and now?"}]
    window = responses.select(items, 100_000)
    assert any(item is new for item in window.messages)
    assert window.record.tokens_before > 50


def _referencing_history(turns: int) -> list[Any]:
    """Turns that continue earlier responses by reference (``item_reference`` to a call
    kept by the API), each answered by an output with the referenced call's id."""
    items: list[Any] = []
    for t in range(turns):
        items.append({"role": "user", "content": f"question {t} " + "w " * 10})
        items.append({"type": "item_reference", "id": f"fc_{t}"})
        items.append({"type": "function_call_output", "call_id": f"call_{t}a", "output": "r " * 40})
        items.append({"type": "function_call_output", "call_id": f"call_{t}b", "output": "r " * 40})
    items.append({"role": "user", "content": "and now?"})
    return items


@pytest.mark.parametrize("strategy", ["fixed", "sliding"])
def test_responses_an_item_reference_stays_with_the_outputs_it_answers(strategy: str) -> None:
    """No orphan error, and a window never holds an output without its reference nor a
    reference without its outputs; the reference counts (as its JSON), never 0."""
    items = _referencing_history(12)
    window = responses.select(items, 400, strategy)
    kept = window.messages
    assert kept[-1] is items[-1] and len(kept) < len(items)
    for index, item in enumerate(items):
        if item.get("type") == "item_reference":
            answers = items[index + 1 : index + 3]
            assert all((x in kept) == (item in kept) for x in answers)
    turn = responses.read_items(items[:4]).messages[1]
    assert get_counter("approx").count_message(turn) > 0


def test_responses_an_item_reference_grown_output_by_output_reads_as_a_first_read(
    counted_reads: Any,
) -> None:
    """An output added after a reference's outputs (the next item of the list) still
    answers the reference: its run is read again, not settled on the outputs before."""
    responses.select(_referencing_history(3), 300)  # no orphans
    counted_reads(responses).check_growth(_referencing_history(14), 300, "fixed", most=4)


def test_responses_a_pipelines_stage_counts_are_the_callers_items(stand_in_run: Any) -> None:
    """A stage that windowed the caller's list counts the caller's items, in its record
    and in the pipeline's note on it, never the Messages read from them (a run of model
    output is one)."""
    items = responses_history(12)
    window = stand_in_run.select(responses.select, items)
    record = window.record
    stages = record.stages or (record,)
    assert stages[0].messages_before == len(items) == record.messages_before
    assert stages[-1].messages_after == len(window.messages) == record.messages_after
    for number, stage in enumerate(record.stages):
        (note,) = [n for n in record.notes if n.startswith(f"stages[{number}] ")]
        assert f"messages {stage.messages_before} -> {stage.messages_after}" in note
