"""Anthropic adapter: system outside the list, tool_use / tool_result units, mixed user
messages; checked against the real anthropic client (a local server records the body)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")

from anthropic_api import REPLY, check_messages  # noqa: E402

from ctxwindow import BudgetTooSmall, InvalidMessage, OrphanToolResult, get_counter  # noqa: E402
from ctxwindow_adapters import anthropic as adapter  # noqa: E402
from ctxwindow_adapters._reads import RecentReads, each_item  # noqa: E402
from ctxwindow_adapters.testing import AdapterConformance  # noqa: E402

SYSTEM = [
    {"type": "text", "text": "You are a careful agent.", "cache_control": {"type": "ephemeral"}}
]


@pytest.fixture
def server(recording_server: Any) -> tuple[str, list[tuple[str, Any]]]:
    """A local server answering like the API; the (path, body) of each request."""
    return recording_server(lambda path: REPLY)


def send(base_url: str, window: adapter.AnthropicWindow) -> Any:
    client = anthropic.Anthropic(api_key="test", base_url=base_url, max_retries=0, timeout=10)
    return client.messages.create(model="claude", max_tokens=64, **window.request())


def history(turns: int = 10, words: int = 30) -> list[dict[str, Any]]:
    """4 messages a turn: a question, a call of two tools (text + thinking + tool_use),
    their results (in the other order) with a follow-up text in the same user message,
    and an answer."""
    out: list[dict[str, Any]] = []
    for t in range(turns):
        out.append({"role": "user", "content": f"question {t} " + "word " * 20})
        out.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm " * 5, "signature": f"sig{t}"},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": f"a{t}", "name": "lookup", "input": {"q": t}},
                    {"type": "tool_use", "id": f"b{t}", "name": "lookup", "input": {"q": -t}},
                ],
            }
        )
        out.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"b{t}", "content": "r " * words},
                    {
                        "type": "tool_result",
                        "tool_use_id": f"a{t}",
                        "content": [{"type": "text", "text": "r " * words}],
                    },
                    {"type": "text", "text": f"also consider option {t} " + "x " * 10},
                ],
            }
        )
        out.append({"role": "assistant", "content": "answer " * 15})
    out.append({"role": "user", "content": "and now?"})
    return out  # fmt: skip


def test_round_trip_keeps_units_system_and_objects(server) -> None:
    base_url, bodies = server
    messages = history()
    before = copy.deepcopy(messages)
    counter = get_counter("approx")
    window = adapter.select(messages, 500, system=SYSTEM, counter=counter)
    assert messages == before
    assert len(messages) == 41
    assert window.system is SYSTEM
    kept = window.messages
    originals = [m for m in kept if any(m is o for o in messages)]
    assert len(originals) >= len(kept) - 1  # at most the oldest mixed message is a copy
    assert kept[-1] is messages[-1]
    check_messages(kept)
    converted = adapter.read_messages(kept, SYSTEM)
    assert sum(counter.count_message(m) for m in converted.messages) <= 500
    assert window.record.tokens_after <= 500
    assert window.record.messages_before == 41 and window.record.messages_after == len(kept)
    system = window.record.decisions[0]
    assert system.positions == () and system.action == "kept"
    reply = send(base_url, window)
    assert reply.content[0].text == "ok"
    assert bodies[-1][1]["messages"] == kept and bodies[-1][1]["system"] == SYSTEM


def test_a_mixed_user_message_is_split_without_breaking_the_api_rules(server) -> None:
    """A user message's results and the words beside them go with the call they answer,
    wherever the message stands: an older one is dropped whole, never half of it (the
    words read apart once made it a copy holding them, the newest user message)."""
    base_url, bodies = server
    messages = history(3)
    # budget for the last turn and the newest question: the older mixed messages go whole
    counter = get_counter("approx")
    tail = adapter.read_messages(messages[-5:]).messages
    budget = sum(counter.count_message(m) for m in tail)
    window = adapter.select(messages, budget, counter=counter, task_statement=False)
    copies = [m for m in window.messages if not any(m is o for o in messages)]
    assert copies == []
    assert window.messages == messages[-5:]
    check_messages(window.messages)
    send(base_url, window)
    assert bodies[-1][1]["messages"] == window.messages
    decision = next(d for d in window.record.decisions if d.action == "dropped")
    assert decision.positions and max(decision.positions) < len(messages)


@pytest.mark.parametrize("strategy", ["fixed", "sliding", "summarize"])
def test_strategies_give_valid_requests(server, strategy: str) -> None:
    base_url, bodies = server
    messages = history(12)
    window = adapter.select(messages, 600, strategy, system="Be brief.")
    check_messages(window.messages)
    made = [m for m in window.messages if not any(m is o for o in messages)]
    if strategy == "summarize":
        assert window.record.count("summarized") > 0
        summary = made[0]
        assert summary["role"] == "user" and summary["content"][0]["text"]
    send(base_url, window)
    assert bodies[-1][1]["messages"] == window.messages and bodies[-1][1]["system"] == "Be brief."


def test_system_messages_in_the_list_are_kept() -> None:
    messages = [{"role": "system", "content": "Rules."}, *history(5)]
    window = adapter.select(messages, 200)
    assert window.messages[0] is messages[0]
    check_messages(window.messages)


def test_truncating_the_newest_user_message_gives_a_copy() -> None:
    messages = [*history(2), {"role": "user", "content": [
        {"type": "text", "text": "long " * 400}, {"type": "image", "source": {
            "type": "url", "url": "https://example.com/a.png"}}]}]  # fmt: skip
    window = adapter.select(messages, 200, oversize="truncate")
    last = window.messages[-1]
    assert last is not messages[-1] and messages[-1]["content"][0]["text"] == "long " * 400
    assert last["content"][0]["text"].endswith(
        "characters cut by ctxwindow to fit the token budget]"
    )
    assert last["content"][1] is messages[-1]["content"][1]
    check_messages(window.messages)


def test_bad_input_names_the_message() -> None:
    with pytest.raises(InvalidMessage, match="message 1: unknown role 'tool'"):
        adapter.select([{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}], 50)
    with pytest.raises(InvalidMessage, match="message 0: expected a dict"):
        adapter.select(["hello"], 50)  # type: ignore[list-item]
    call = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    text_first = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "text", "text": "x"},
                                     {"type": "tool_result", "tool_use_id": "t"}]},
    ]  # fmt: skip
    with pytest.raises(InvalidMessage, match="message 2: content block 1 is a tool_result after"):
        adapter.select(text_first, 50)
    orphan = [
        {"role": "user", "content": "q"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz"}]},
    ]
    with pytest.raises(OrphanToolResult, match="message 1: tool result for call 'zz'"):
        adapter.select(orphan, 50)
    unanswered = [{"role": "user", "content": "q"}, text_first[1]]
    with pytest.raises(OrphanToolResult, match="message 1: the assistant's tool call"):
        adapter.select(unanswered, 50)
    with pytest.raises(InvalidMessage, match="system must be a string or a list of text blocks"):
        adapter.select([{"role": "user", "content": "q"}], 50, system=42)  # type: ignore[arg-type]


def test_the_async_window_keeps_the_system() -> None:
    messages = history()
    window = asyncio.run(adapter.aselect(messages, 400, "sliding", system="Be brief."))
    assert window.messages == adapter.select(messages, 400, "sliding", system="Be brief.").messages
    assert window.system == "Be brief."


def test_dropped_orphans_leave_a_valid_copy_and_a_note_in_the_callers_positions() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz"},
                                     {"type": "text", "text": "hi"}]},
        {"role": "user", "content": "x"},
    ]  # fmt: skip
    window = adapter.select(messages, 50, system="s", orphans="drop")
    # the words beside the orphan result go with it (read as a part of it)
    assert window.messages == [messages[0], messages[2]]
    assert window.record.notes[0].startswith("dropped message 1: tool result for call 'zz'")
    check_messages(window.messages)


def test_sdk_content_blocks_come_back_as_themselves(server) -> None:
    base_url, bodies = server
    from anthropic.types import TextBlock, ToolUseBlock

    reply = [TextBlock(type="text", text="Checking."),
             ToolUseBlock(type="tool_use", id="t1", name="lookup", input={"q": 1})]  # fmt: skip
    messages = [
        {"role": "user", "content": "question " * 40},
        {"role": "assistant", "content": reply},  # as a response's content is appended
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
        },
        {"role": "user", "content": "next"},
    ]
    window = adapter.select(messages, 40, user_first=False)
    assert window.messages == messages[1:] and window.messages[0] is messages[1]
    send(base_url, window)
    sent = bodies[-1][1]["messages"]
    assert sent[0]["content"][1]["id"] == "t1" and sent[1]["content"][0]["tool_use_id"] == "t1"


def test_user_first_removes_leading_assistant_turns() -> None:
    messages = history(4)
    counter = get_counter("approx")
    plain = {"counter": counter, "task_statement": False}  # the first user message may go
    free = adapter.select(messages, 260, user_first=False, **plain)
    assert free.messages[0]["role"] == "assistant"  # what Anthropic's own API accepts
    window = adapter.select(messages, 260, **plain)
    first = window.messages[0]
    # the first user turn in words: a question, or the follow-up that shared a turn
    # with older results (sent with its words alone, those results gone with their call)
    assert first["role"] == "user" and not results_of(first)
    removed = len(free.messages) - len(window.messages) + 1
    assert removed > 1 and window.messages[1:] == free.messages[removed:]
    check_messages(window.messages)
    assert window.record.notes[-1].startswith("removed ")
    assert window.record.tokens_after < free.record.tokens_after
    reasons = [d.reason for d in window.record.decisions if "user_first" in d.reason]
    assert reasons and all(d.startswith("among the most recent") for d in reasons)


def test_user_first_opens_on_a_turn_that_answers_tools_and_asks_anew() -> None:
    """Words beside an older call's result ("Please continue.") are a part of that
    exchange, not a new user turn: the task stays the newest user message, so a budget
    too small for it says so, or cuts it, rather than dropping it for a turn the words
    opened (they once came back alone, the window starting with them)."""

    def use(call_id: str) -> dict[str, Any]:
        block = {"type": "tool_use", "id": call_id, "name": "grep", "input": {"q": call_id}}
        return {"role": "assistant", "content": [block]}

    messages = [
        {"role": "user", "content": "TASK: fix the bug. " + "context " * 400},
        use("t1"),
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "small"},
                {"type": "text", "text": "Please continue."},
            ],
        },
        use("t2"),
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "two"}],
        },
    ]
    before = copy.deepcopy(messages)
    for user_first in (False, True):
        with pytest.raises(BudgetTooSmall, match="message 0, the newest user message"):
            adapter.select(messages, 200, "fixed", user_first=user_first)
    window = adapter.select(messages, 200, "fixed", oversize="truncate")
    assert window.messages[0]["content"].startswith("TASK: fix the bug.")
    assert window.messages[1:] == messages[3:]  # the older exchange went with its words
    check_messages(window.messages)
    assert messages == before  # the caller's turn is rebuilt, not edited
    assert not [d for d in window.record.decisions if "user_first" in d.reason]


def results_of(message: Any) -> dict[str, Any]:
    """The tool_result blocks of a message, by the call id they answer."""
    blocks = message["content"] if isinstance(message["content"], list) else []
    return {b["tool_use_id"]: b for b in blocks if b["type"] == "tool_result"}


def test_cleared_results_come_back_as_tool_result_blocks(server, stand_in_run: Any) -> None:
    base_url, bodies = server
    messages = history(6, words=300)
    strategy, _, budget = stand_in_run
    stub = stand_in_run.stub
    window = stand_in_run.select(adapter.select, messages, system=SYSTEM)
    check_messages(window.messages)
    given = {call: (p, b) for p, m in enumerate(messages) for call, b in results_of(m).items()}
    newest = list(results_of(messages[-3]))[-1]  # keep_recent=1: the newest result stays
    cleared: set[str] = set()
    for message in window.messages:
        if any(message is m for m in messages):
            continue
        (position, _), *_ = [given[call] for call in results_of(message)]
        original = messages[position]  # a copy of it: only cleared blocks differ
        assert {**message, "content": None} == {**original, "content": None}
        blocks, last = original["content"], list(results_of(original))[-1]
        if results_of(message)[last] != results_of(original)[last]:
            blocks = list(results_of(original).values())  # the words went with the last
        assert len(message["content"]) == len(blocks)
        for block, was in zip(message["content"], blocks, strict=True):
            if block == was:
                continue
            assert block == {**was, "content": block["content"]}
            assert stub.fullmatch(block["content"]).groups() == (
                "lookup",
                block["tool_use_id"],
            )
            cleared.add(block["tool_use_id"])
    answered = {call for m in window.messages for call in results_of(m)}
    assert cleared == answered - {newest} and len(cleared) >= 5
    replaced = [d for d in window.record.decisions if d.action == "replaced"]
    in_replaced = {call for d in replaced for p in d.positions for call in results_of(messages[p])}
    assert cleared <= in_replaced and all(
        d.reason.startswith(("tool output cleared", "stages[0]")) for d in replaced
    )
    assert window.record.count("dropped") > 0 if strategy == "pipeline" else answered == set(given)
    assert (
        window.record.tokens_after <= budget
        and window.record.tokens_after < window.record.tokens_before / 2
    )
    counter = get_counter("approx")
    read = adapter.read_messages(window.messages, SYSTEM).messages
    assert sum(counter.count_message(m) for m in read) == window.record.tokens_after
    send(base_url, window)
    assert bodies[-1][1]["messages"] == window.messages


class TestConformance(AdapterConformance):
    strategies = ("newest", "fixed", "sliding")
    budgets = range(80, 1400, 40)

    @pytest.fixture
    def adapter(self) -> Any:
        return adapter

    @pytest.fixture
    def history(self) -> list[Any]:
        return history()

    def read(self, items: Any) -> Any:
        return adapter.read_messages(items, SYSTEM).messages

    def check_valid(self, items: Any) -> None:
        check_messages(items)

    def options(self) -> dict[str, Any]:
        return {"system": SYSTEM}


def test_a_tool_result_too_big_for_the_budget_comes_back_cut_in_its_own_block() -> None:
    log = "HEAD of the log\n" + "step passed\n" * 1500 + "TAIL: failed"
    messages = [
        {"role": "user", "content": "Summarize the log of build 7714."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "log", "input": {"b": 7714}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": log}]},
    ]
    before = copy.deepcopy(messages)
    window = adapter.select(messages, 500, "fixed", system="Be brief.")
    assert messages == before
    check_messages(window.messages)
    assert window.messages[:2] == messages[:2] and window.messages[1] is messages[1]
    (block,) = window.messages[2]["content"]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "t1"
    assert block["content"].startswith("HEAD of the log") and block["content"].endswith("failed")
    assert "characters cut by ctxwindow from this tool result" in block["content"]
    assert [d.action for d in window.record.decisions][-1] == "truncated"
    assert window.record.notes[0].startswith("cut the tool result of message 2")


@pytest.fixture
def pieces_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The positions the adapter reads (the system counts as 0), with fresh memories."""
    read: list[int] = []

    def counting(item: Any, position: int) -> Any:
        read.append(position)
        return adapter._pieces_after_system(item, position)

    counted = RecentReads(each_item(counting), adapter._content_of)
    monkeypatch.setattr(adapter, "_READS_WITH_SYSTEM", counted)
    monkeypatch.setattr(
        adapter, "_READS", RecentReads(each_item(adapter._pieces), adapter._content_of)
    )
    return read


def as_first_read(messages: list[dict[str, Any]], budget: int, strategy: str) -> Any:
    """The window with nothing of these messages remembered (deep copies)."""
    return adapter.select(copy.deepcopy(messages), budget, strategy, system=SYSTEM)


@pytest.mark.parametrize("strategy", ["fixed", "sliding"])
def test_a_grown_history_reads_only_what_it_added(pieces_read: list[int], strategy: str) -> None:
    messages = history(12)
    adapter.select(messages, 600, strategy, system=SYSTEM)
    assert sorted(pieces_read) == list(range(len(messages) + 1))
    for turn in range(3):  # a call, its results with text (a split message), an answer
        grown = history(13 + turn)[len(messages) - 1 : -1]
        messages[-1:] = [messages[-1], *grown[1:], {"role": "user", "content": "next?"}]
        del pieces_read[:]
        window = adapter.select(messages, 600, strategy, system=SYSTEM)
        assert pieces_read and min(pieces_read) > len(messages) - 6  # the new messages only
        again = as_first_read(messages, 600, strategy)
        assert window.messages == again.messages
        assert [d.positions for d in window.record.decisions] == [
            d.positions for d in again.record.decisions
        ]
        check_messages(window.messages)
        assert window.messages[-1] is messages[-1]


def test_a_remembered_history_with_content_replaced_is_read_again(pieces_read: list[int]) -> None:
    messages = history(12)
    adapter.select(messages, 600, "fixed", system=SYSTEM)
    messages[-2]["content"] = "a much longer answer " * 60  # the same dict, changed
    del pieces_read[:]
    window = adapter.select(messages, 600, "fixed", system=SYSTEM)
    assert len(pieces_read) == len(messages) + 1
    assert window.tokens <= 600
    assert window.messages == as_first_read(messages, 600, "fixed").messages


def test_without_a_system_the_positions_are_the_callers() -> None:
    messages = history(12)
    adapter.select(messages, 400, "fixed")
    messages.append({"role": "assistant", "content": "sure"})
    messages.append({"role": "user", "content": [{"type": "text", "text": "ok"}, 3]})
    with pytest.raises(InvalidMessage) as raised:
        adapter.select(messages, 400, "fixed")
    assert raised.value.index == len(messages) - 1


@pytest.mark.parametrize("edit", ["system blocks", "content list"])
def test_an_edit_in_place_is_read_again(edit: str) -> None:
    """A system given as blocks and edited in place, or a block appended in place to the
    newest message's list, was windowed from the stale read: the system's stand-in was
    never among the items compared, and a list was compared with itself."""
    messages: list[dict[str, Any]] = []
    for number in range(150):  # beyond the newest 256 items compared
        messages.append({"role": "user", "content": f"question {number} " + "w " * 10})
        messages.append({"role": "assistant", "content": f"answer {number} " + "w " * 10})
    messages.append({"role": "user", "content": [{"type": "text", "text": "short"}]})
    system = [{"type": "text", "text": "Be brief."}]
    adapter.select(messages, 3000, "fixed", system=system)
    if edit == "system blocks":
        system[0]["text"] = "POLICY " * 800
    else:
        messages[-1]["content"].append({"type": "text", "text": "more " * 400})
    window = adapter.select(messages, 3000, "fixed", system=system)
    adapter._READS_WITH_SYSTEM.remembered.clear()
    fresh = adapter.select(messages, 3000, "fixed", system=system)
    assert window.record.tokens_before == fresh.record.tokens_before
    assert window.messages == fresh.messages


# -- the record in the caller's positions ----------------------------------------------
def use(call_id: str) -> dict[str, Any]:
    """An assistant message calling one tool."""
    block = {"type": "tool_use", "id": call_id, "name": "read", "input": {"p": call_id}}
    return {"role": "assistant", "content": [block]}


def answer(call_id: str, text: str, *words: str) -> dict[str, Any]:
    """A user message with the result of ``call_id``, and ``words`` after it."""
    result = {"type": "tool_result", "tool_use_id": call_id, "content": text}
    return {"role": "user", "content": [result, *({"type": "text", "text": w} for w in words)]}


def runs_of(record: Any) -> list[tuple[range, list[int], str]]:
    return [(run.units, list(run.positions), run.action) for run in record.decision_runs]


def test_the_runs_of_decisions_are_in_the_callers_positions() -> None:
    """The system parameter is a unit of no position, and a user message holding a
    result, then words, is one position: the runs said ``range(8, 11)`` of the newest
    exchange (items 5 and 6), as the adapter had read them."""
    messages = [
        {"role": "user", "content": "TASK: fix the bug " * 3},
        use("a"),
        answer("a", "short result a", "go on"),
        use("b"),
        answer("b", "result b " * 20),
        use("c"),
        answer("c", "huge result " * 600),
    ]
    record = adapter.select(messages, 400, "fixed", system="You are careful.").record
    assert [(d.positions, d.action) for d in record.decisions][-1] == ((5, 6), "truncated")
    assert runs_of(record) == [
        (range(0, 1), [], "kept"),  # the system parameter
        (range(1, 2), [0], "kept"),
        (range(2, 4), [1, 2, 3, 4], "kept"),  # the calls, their results, the words after a's
        (range(4, 5), [5, 6], "truncated"),
    ]
    assert type(record.decision_runs[-1].positions) is range  # read from its ends
    assert record.notes[0].startswith("cut the tool result of message 6 ")
    assert record.to_dict(decisions=False)["counts"]["truncated"] == 1


def test_user_first_removals_are_in_the_runs_and_counts() -> None:
    """The units the last pass removed are ``dropped`` in every view of the record: the
    runs (and the counts read from them) said ``kept``, as the core had decided."""
    messages = [
        {"role": "user", "content": "TASK: fix the bug. " + "context " * 400},
        use("t1"),
        answer("t1", "small"),
        {"role": "user", "content": "Please continue."},
        use("t2"),
        answer("t2", "two"),
    ]
    record = adapter.select(messages, 200, "fixed", system="Be brief.").record
    removed = [d for d in record.decisions if "user_first" in d.reason]
    assert [(d.positions, d.action) for d in removed] == [((1, 2), "dropped")]
    (run,) = [run for run in record.decision_runs if "user_first" in run.reason]
    assert (list(run.positions), run.action) == ([1, 2], "dropped")
    counts = record.to_dict(decisions=False)["counts"]
    assert counts["dropped"] == sum(d.action == "dropped" for d in record.decisions) == 2


def test_a_note_listing_several_runs_of_messages_names_the_callers() -> None:
    """The core's note on a current turn bigger than the budget lists the messages of
    the units that went ("messages 4-7, 10-11"): each run in the caller's positions (the
    runs after the first kept the adapter's)."""
    messages = [
        {"role": "user", "content": "TASK: fix the bug"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "now run the tests"},
    ]
    for k in range(5):
        messages += [use(f"c{k}"), answer(f"c{k}", f"result {k} " * 40)]
    record = adapter.select(messages, 250, "sliding", system="Be brief.").record
    gone = sorted(p for d in record.decisions if d.action == "dropped" for p in d.positions)
    assert gone == [3, 4, 5, 6, 9, 10]
    (note,) = [note for note in record.notes if "current turn" in note]
    assert "(messages 3-6, 9-10)" in note, note


def test_the_runs_of_a_long_history_are_ranges_of_the_callers_positions() -> None:
    """A run of many units is mapped from its ends, a warm turn as a first: no look at
    each of its messages."""
    messages = history(200)
    for _ in range(2):  # a first turn, then a warm one on the history grown
        record = adapter.select(messages, 600, "fixed", system=SYSTEM).record
        dropped = [run for run in record.decision_runs if run.action == "dropped"]
        assert len(dropped) == 1 and type(dropped[0].positions) is range
        told = [p for d in record.decisions if d.action == "dropped" for p in d.positions]
        assert list(dropped[0].positions) == sorted(set(told))
        messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]


def test_a_pipelines_first_stage_is_in_the_callers_positions() -> None:
    """``record.stages`` (and ``to_dict``'s) of a stage that windowed the caller's list:
    its decisions, runs and notes in the caller's positions, as the pipeline's own."""
    pytest.importorskip("ctxwindow_pipeline")
    messages = history(6, words=300)
    stages = [{"strategy": "clear_tool_outputs", "keep_recent": 1, "when": "always"}, "fixed"]
    record = adapter.select(messages, 700, "pipeline", system=SYSTEM, stages=stages).record
    first = record.stages[0]
    units = {d.unit: d.positions for d in record.decisions}
    assert {d.unit: d.positions for d in first.decisions} == units
    for run in first.decision_runs:
        assert list(run.positions) == sorted({p for u in run.units for p in units[u]}), run
    assert record.to_dict()["stages"][0]["decisions"] == [d.to_dict() for d in first.decisions]


def test_a_pipelines_note_on_a_stage_keeps_its_message_counts() -> None:
    """ "messages 27 -> 14" in a note on a stage counts the stage's messages: it was read
    as a position and came out as "message 17 -> 14"."""
    pytest.importorskip("ctxwindow_pipeline")
    stages = [{"strategy": "fixed", "budget_share": 2.0}, "fixed"]
    record = adapter.select(history(6), 300, "pipeline", system=SYSTEM, stages=stages).record
    second = record.stages[1]
    assert second.messages_before < len(adapter.read_messages(history(6), SYSTEM).messages)
    (note,) = [note for note in record.notes if note.startswith("stages[1] fixed: tokens")]
    assert f"messages {second.messages_before} -> {second.messages_after}" in note, note


# -- non-text content and errors in the caller's list ---------------------------------
IMAGE_DATA = "A" * 200_000  # a base64 screenshot: its characters are no tokens


def test_an_image_in_a_tool_result_counts_as_a_non_text_part() -> None:
    messages = [
        {"role": "user", "content": "Open the settings page."},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "computer", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": "done"},
            {"type": "image", "source": {
                "type": "base64", "media_type": "image/png", "data": IMAGE_DATA}}]}]},
    ]  # fmt: skip
    result = next(m for m in adapter.read_messages(messages).messages if m.role == "tool")
    assert get_counter("approx").count_message(result) < 100
    window = adapter.select(messages, 300)
    assert window.messages == messages  # kept whole: it fits once counted as an image


def test_a_base64_pdf_counts_as_a_non_text_part_a_text_document_as_words() -> None:
    pdf = {"type": "base64", "media_type": "application/pdf", "data": IMAGE_DATA}
    words = {"type": "text", "media_type": "text/plain", "data": "word " * 400}
    counter = get_counter("approx")

    def count(source: dict[str, Any]) -> int:
        message = {"role": "user", "content": [{"type": "document", "source": source}]}
        return counter.count_message(adapter.read_messages([message]).messages[0])

    assert count(pdf) < 100
    assert count(words) > 400


def test_budget_too_small_names_the_callers_message() -> None:
    messages = [
        {"role": "user", "content": "Find the log."},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "a", "input": {}},
            {"type": "tool_use", "id": "t2", "name": "b", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "ok"},
            {"type": "text", "text": "Now read it."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t3", "name": "log",
                                           "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t3", "content": "x " * 5000}]},
    ]  # fmt: skip
    with pytest.raises(BudgetTooSmall) as caught:
        adapter.select(messages, 50, system="Be brief.")
    assert caught.value.position == 4
    assert "the biggest is message 4," in str(caught.value)


def test_an_sdk_block_edited_in_place_is_read_again() -> None:
    """An SDK block object (not a dict) whose text is set in place: the same list, the
    same block, so only its fields as they are now can tell."""
    from anthropic.types import TextBlock

    messages: list[dict[str, Any]] = []
    for number in range(20):
        messages.append({"role": "user", "content": [TextBlock(type="text", text=f"q{number}")]})
        messages.append({"role": "assistant", "content": [TextBlock(type="text", text="a")]})
    adapter.select(messages, 100_000, "fixed")
    messages[-2]["content"][0].text = "LONG " * 500
    window = adapter.select(messages, 100_000, "fixed")
    adapter._READS.remembered.clear()
    fresh = adapter.select(messages, 100_000, "fixed")
    assert window.record.tokens_before == fresh.record.tokens_before > 500


def test_a_cut_newest_user_message_with_tool_results_keeps_the_exchange_it_answers() -> None:
    """The newest user message answers a pending call and holds two text blocks and an
    image after its tool result: its words go with the result (they answer the call
    together, as an agent's reminder beside results does), so the exchange stays and
    is cut to fit: the result block first, the cut words, the image itself. (It was
    read as a new question before, and the exchange dropped whole.)"""
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    messages = [
        {"role": "user", "content": "Summarize the report."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "r"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "done"},
                {"type": "text", "text": "<reminder>Be concise.</reminder>"},
                image,
                {"type": "text", "text": "Now translate this: " + "lorem ipsum " * 400},
            ],
        },
    ]
    before = copy.deepcopy(messages)
    window = adapter.select(messages, 250, oversize="truncate", system="Be brief.")
    assert messages == before
    check_messages(window.messages)
    first, call, last = window.messages
    assert first is messages[0] and call is messages[1]
    result, text, kept_image = last["content"]
    assert result == messages[2]["content"][0]
    assert text["type"] == "text" and text["text"].startswith(
        "<reminder>Be concise.</reminder>\nNow translate this: lorem ipsum"
    )
    assert "characters cut by ctxwindow" in text["text"]
    assert kept_image is image
    assert window.record.decisions[-1].action == "truncated"
    assert window.record.tokens_after <= 250
