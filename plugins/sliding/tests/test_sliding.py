"""What the sliding window keeps, beyond the contract: the recent run, the important older
units, what makes a unit important, and how scorers are found and checked."""

from __future__ import annotations

import json
import random
import re
import types
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Conversation, History, get_counter
from ctxwindow.testing import calls, result
from ctxwindow_sliding import KeywordScorer, SlidingWindow
from ctxwindow_sliding.strategy import TASK_BOOST

FACT = "By the way, the wifi password at the cabin is pinecone42."
TOPICS = ["the weather", "a football match", "lunch plans", "a new phone", "traffic"]


def chat(turns: int = 40, fact_at: int = 5) -> list[dict[str, Any]]:
    """Small talk, one useful fact early on, and a question about it at the end."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn in range(turns):
        text = FACT if turn == fact_at else f"Let's talk about {TOPICS[turn % 5]}, part {turn}."
        messages.append({"role": "user", "content": text, "id": f"u{turn}"})
        messages.append(
            {"role": "assistant", "content": f"Sure, happy to chat ({turn}).", "id": f"a{turn}"}
        )
    messages.append(
        {"role": "user", "content": "What was the wifi password at the cabin?", "id": "q"}
    )
    return messages


def at(messages: list[dict[str, Any]], message_id: str) -> int:
    return next(i for i, m in enumerate(messages) if m.get("id") == message_id)


def decision(window: ctxwindow.Window[Any], position: int) -> ctxwindow.Decision:
    return next(d for d in window.record.decisions if position in d.positions)


def cost(messages: list[Any]) -> int:
    counter = get_counter("approx")
    return sum(counter.count_message(ctxwindow.Message.from_dict(m)) for m in messages)


def test_keeps_the_old_fact_that_fixed_loses_in_chronological_order() -> None:
    messages = chat()
    sliding = SlidingWindow().select(messages, 200)
    fixed = ctxwindow.select(messages, budget=200, strategy="fixed")
    fact = at(messages, "u5")
    assert messages[fact] in sliding.messages
    assert messages[fact] not in fixed.messages
    positions = [messages.index(m) for m in sliding.messages]
    assert positions == sorted(positions)
    kept = decision(sliding, fact)
    assert kept.action == "kept"
    assert kept.reason.startswith("important (rank ")
    assert kept.score is not None and kept.score >= 1.0  # the best match, scaled to 1
    dropped = [d for d in sliding.record.decisions if d.action == "dropped"]
    assert dropped and all((d.score or 0.0) < kept.score for d in dropped)
    # a unit whose importance is 0 has no score in the record: a visit never touches it
    assert any(d.score is None for d in dropped)


def uniform(units: int) -> list[dict[str, Any]]:
    """Units of one size (13 tokens), every third about the cabin, then a question."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(units):
        text = f"cabin fact {i:03d}" if i % 3 == 0 else f"small talk {i:03d}"
        messages.append({"role": ("user", "assistant")[i % 2], "content": text.ljust(40, ".")})
    messages.append({"role": "user", "content": "Tell me about the cabin."})
    return messages


def test_important_units_stay_within_their_share_and_the_recent_run_fills_the_rest() -> None:
    messages = uniform(60)
    for share in (0.3, 0.5, 0.8):
        # the task statement off: every older unit here competes on its score alone
        window = SlidingWindow(important_share=share, task_statement=False).select(messages, 400)
        record = window.record.decisions
        assert {d.tokens for d in record[1:-1]} == {13}
        room = 400 - record[0].tokens - record[-1].tokens
        recent = [d for d in record if d.action == "kept" and d.reason == "recent"]
        important = [d for d in record if d.action == "kept" and d.reason.startswith("important")]
        # The recent run: contiguous from the newest, as long as its share of the room allows.
        assert [d.unit for d in recent] == list(
            range(len(record) - 1 - len(recent), len(record) - 1)
        )
        assert len(recent) == (room - int(room * share)) // 13
        # The important units: as many as the rest holds, and the best scored of the others.
        assert len(important) == (room - 13 * len(recent)) // 13
        dropped = [d for d in record if d.action == "dropped"]
        assert min(d.score or 0 for d in important) >= max(d.score or 0 for d in dropped)
        about = {d.unit for d in record if "cabin fact" in str(messages[d.positions[0]]["content"])}
        older = about - {d.unit for d in recent}
        assert len(older & {d.unit for d in important}) == min(len(older), len(important))


def test_room_the_important_units_leave_extends_the_recent_run() -> None:
    messages = chat(turns=12)
    messages[-1] = {"role": "user", "content": "Thanks, bye!", "id": "q"}  # matches nothing
    budget, share = 150, 0.9
    window = SlidingWindow(important_share=share).select(messages, budget)
    record = window.record.decisions
    important = [d for d in record if d.action == "kept" and d.reason.startswith("important")]
    assert important == []  # nothing matches; the opening message is kept as the task statement
    assert decision(window, 1).reason.startswith("task statement")
    recent = sorted(
        p for d in record if d.action == "kept" and d.reason == "recent" for p in d.positions
    )
    assert recent == list(range(recent[0], len(messages) - 1))
    must_keep = ("system message", "newest user message", "task statement")
    room = budget - sum(d.tokens for d in record if d.reason.startswith(must_keep))
    assert sum(d.tokens for d in record if d.reason == "recent") > room - int(room * share)


def test_metadata_importance_is_honoured() -> None:
    messages = chat()
    note = at(messages, "a12")
    messages[note] = {**messages[note], "metadata": {"importance": 3}}
    window = SlidingWindow().select(messages, 200)
    assert messages[note] in window.messages
    assert decision(window, note).score == pytest.approx(3.0)  # nothing in common with the query
    # A negative importance demotes even the best keyword match.
    fact = at(messages, "u5")
    messages[fact] = {**messages[fact], "metadata": {"importance": -5}}
    window = SlidingWindow().select(messages, 200)
    assert messages[fact] not in window.messages
    # A value that is not a number is ignored, and the record says so.
    messages[note] = {**messages[note], "metadata": {"importance": "high"}}
    window = SlidingWindow().select(messages, 200)
    assert messages[note] not in window.messages
    assert any("importance 'high' is not a number" in note for note in window.record.notes)


def test_the_opening_task_statement_is_boosted() -> None:
    task = "Plan a three-day trip to Lisbon on a budget of 900 euros."
    messages = chat()
    messages.insert(1, {"role": "user", "content": task, "id": "task"})
    window = SlidingWindow().select(messages, 200)
    assert messages[1] in window.messages
    kept = decision(window, 1)  # small enough for the core to keep it outright
    assert kept.reason.startswith("task statement") and kept.score == pytest.approx(TASK_BOOST)
    # Too big for that (over a quarter of the budget), the boost still ranks it first.
    long_task = {"role": "user", "content": " ".join([task] * 5), "id": "task"}
    messages[1] = long_task
    window = SlidingWindow().select(messages, 200)
    kept = decision(window, 1)
    assert kept.reason == "task statement (ranked first among older units)"
    assert kept.score == pytest.approx(TASK_BOOST)
    # The option off: neither kept by rule nor boosted.
    window = SlidingWindow(task_statement=False).select(messages, 200)
    assert long_task not in window.messages
    assert decision(window, 1).score is None  # importance 0
    # The same words later in the chat have no boost, and nothing in common with the query.
    later = chat()
    later.insert(30, {"role": "user", "content": task, "id": "task"})
    window = SlidingWindow().select(later, 200)
    assert later[30] not in window.messages
    assert decision(window, 30).score is None


def test_an_agents_long_task_statement_comes_before_results_rich_in_identifiers() -> None:
    """A task too big for the runner to keep outright, then search results each adding
    ids: what those add per token outweighed the boost, and the task went though it was
    the most important unit (a new user's review). It is ranked first, as the docs say."""
    rng = random.Random(0)
    words = "the flight leaves from the main terminal and the hotel is near the old town".split()
    prose = " ".join(rng.choice(words) for _ in range(250))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "user", "content": f"Task: a trip for mia_3321 to Lisbon in May. {prose}"},
    ]
    for number in range(12):
        hotels = [{"id": f"HT{rng.randint(1000, 9999)}", "price": rng.randint(80, 300)}]
        messages += [calls(f"call_{number}"), result(f"call_{number}", json.dumps(hotels * 3))]
    messages += [{"role": "user", "content": "yes go ahead"}]
    window = SlidingWindow().select(messages, 700)
    kept = decision(window, 1)
    assert kept.action == "kept" and kept.reason.startswith("task statement")
    assert window.tokens <= 700


def test_the_query_argument_overrides_the_newest_user_message() -> None:
    messages = chat()
    messages[-1] = {"role": "user", "content": "Thanks, that's all.", "id": "q"}
    strategy = SlidingWindow()
    assert messages[at(messages, "u5")] not in strategy.select(messages, 150).messages
    with_query = strategy.select(messages, 150, query="cabin wifi password")
    assert messages[at(messages, "u5")] in with_query.messages


def test_a_tool_exchange_is_kept_or_dropped_whole() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "wifi_lookup", "arguments": "{}"}}
    messages = chat()
    messages[12:12] = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "cabin wifi password: pinecone42"},
    ]
    for budget in range(60, 400, 13):
        window = SlidingWindow().select(messages, budget)
        present = [messages[12] in window.messages, messages[13] in window.messages]
        assert all(present) or not any(present), budget
        assert cost(window.messages) <= budget


class Longest:
    """A third party's scorer: longer units matter more, scaled by a factor."""

    def __init__(self, factor: float) -> None:
        self.name = f"longest x{factor:g}"
        self.factor = factor

    def score(self, history: History) -> list[float]:
        return [self.factor * len(history.unit_text(u)) for u in range(len(history.units))]


class Broken:
    name = "broken"

    def __init__(self, scores: Any) -> None:
        self.scores = scores

    def score(self, history: History) -> Any:
        return self.scores(len(history.units))


@pytest.fixture
def third_party(ctxwindow_register: Any) -> list[str | None]:
    """A plugin registering scorers through the core hook; unregistered after."""
    made: list[str | None] = []
    module = types.ModuleType("longest_plugin")

    def longest(argument: str | None) -> Longest:
        made.append(argument)
        return Longest(float(argument or 1))

    @ctxwindow.hookimpl
    def register_importance_scorers(register: Any) -> None:
        register("longest", longest)
        register("not-a-scorer", lambda argument: object())
        register("short", lambda argument: Broken(lambda n: [1.0] * (n - 1)))
        register("nan", lambda argument: Broken(lambda n: [float("nan")] * n))

    module.register_importance_scorers = register_importance_scorers  # type: ignore[attr-defined]
    ctxwindow_register(module, name="longest-plugin", distribution="ctxwindow-longest")
    return made


def test_a_third_party_scorer_registered_by_hook_is_selected_by_name(
    third_party: list[str | None], tmp_path: Path
) -> None:
    messages = chat()
    long_one = at(messages, "a20")
    messages[long_one] = {**messages[long_one], "content": "A long story. " * 12}
    strategy = SlidingWindow(scorer="longest:2")
    assert strategy.scorer.name == "longest x2" and third_party == ["2"]
    window = strategy.select(messages, 250)
    assert messages[long_one] in window.messages
    assert decision(window, long_one).reason == "important (rank 1)"
    longest = len(messages[long_one]["content"])
    for dropped in (d for d in window.record.decisions if d.action == "dropped"):
        text = messages[dropped.positions[0]]["content"]
        assert dropped.score == pytest.approx(len(text) / longest)  # keywords play no part
    config = tmp_path / "ctxwindow.toml"
    config.write_text('strategy = "sliding"\nbudget = 250\nscorer = "longest"\n')
    assert messages[long_one] in ctxwindow.from_config(config).select(messages).messages


def test_a_scorer_that_breaks_its_promise_is_named(third_party: list[str | None]) -> None:
    with pytest.raises(ctxwindow.PluginError, match="'not-a-scorer' made a object"):
        SlidingWindow(scorer="not-a-scorer")
    with pytest.raises(ctxwindow.PluginError, match=r"'broken' returned 81 scores for 82 units"):
        SlidingWindow(scorer="short").select(chat(), 200)
    with pytest.raises(ctxwindow.PluginError, match="not finite"):
        SlidingWindow(scorer="nan").select(chat(), 200)


def test_unknown_scorer_fails_at_configuration() -> None:
    with pytest.raises(ctxwindow.UnknownScorer, match=r"'no-such-scorer'.*available: keywords"):
        SlidingWindow(scorer="no-such-scorer")
    with pytest.raises(ctxwindow.UnknownScorer):
        ctxwindow.from_config({"strategy": "sliding", "budget": 100, "scorer": "nope"})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"important_share": 1.5}, "between 0 and 1"),
        ({"important_share": -0.1}, "between 0 and 1"),
        ({"important_share": "half"}, "expects float"),
        ({"important_share": True}, "expects float"),
        ({"scorer": 3}, "expects str"),
        ({"recent_share": 0.5}, "unknown option"),
        ({"scorer": "keywords:speaker=-1"}, "speaker must be a number >= 0"),
        ({"scorer": "keywords:reach=2.5"}, "reach must be an integer"),
        ({"scorer": "keywords:colour=blue"}, "is not one of neighbours=..."),
    ],
)
def test_bad_options_raise_invalid_option(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ctxwindow.InvalidOption, match=message):
        SlidingWindow(**options)


def test_selected_by_name_through_the_entry_point() -> None:
    window = ctxwindow.select(chat(), budget=200, strategy="sliding")
    assert window.record.strategy == "sliding"
    sliding = next(p for p in ctxwindow.get_plugins() if p.distribution == "ctxwindow-sliding")
    assert "register_importance_scorers" in sliding.hooks
    assert ctxwindow.get_importance_scorer("keywords").name == "keywords"


def test_a_chat_loop_reads_only_the_new_messages() -> None:
    strategy = SlidingWindow(scorer="keywords:reach=3")  # its own scorer instance
    scorer = strategy.scorer
    assert isinstance(scorer, KeywordScorer)
    conversation = Conversation(chat())
    strategy.select(conversation, 200)
    first = scorer.indexed
    assert first == len(conversation)
    for turn in range(3):
        conversation.append({"role": "assistant", "content": f"Noted ({turn})."})
        conversation.append({"role": "user", "content": "And the cabin wifi password?"})
        window = strategy.select(conversation, 200)
        assert conversation.originals[at(chat(), "u5")] in window.messages
    assert scorer.indexed == first + 6


def test_the_readme_scorer_example_works(ctxwindow_register: Any) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    source = re.findall(r"```python\n(import ctxwindow\n.*?)```", readme, flags=re.S)[0]
    module = types.ModuleType("readme_scorer")
    exec(compile(source, "README.md", "exec"), module.__dict__)
    ctxwindow_register(module, name="readme-scorer")
    messages = chat()
    long_one = at(messages, "a30")
    messages[long_one] = {**messages[long_one], "content": "A long story. " * 12}
    window = SlidingWindow(scorer="longest").select(messages, 200)
    assert decision(window, long_one).reason == "important (rank 1)"


@pytest.mark.parametrize("value", [10**400, -(10**400), float("nan"), float("inf")])
def test_importance_that_is_no_finite_number_is_ignored_with_a_note(value: object) -> None:
    messages = [{"role": "system", "content": "Be brief."}]
    for turn in range(20):
        messages.append({"role": "user", "content": f"question {turn} " * 5})
        messages.append({"role": "assistant", "content": f"answer {turn} " * 5})
    messages[3] = {**messages[3], "metadata": {"importance": value}}
    window = ctxwindow.select(messages, budget=150, strategy="sliding")
    assert any("is not a number; ignored" in note for note in window.record.notes)


def booking_agent() -> list[dict[str, Any]]:
    """An agent's history: an early profile lookup holds the ids a late step needs; the
    chatter after it has none; the question shares no word with the lookup."""
    profile = (
        '{"user_id": "mia_li_3668", "payment_methods": ["certificate_7504069", '
        '"credit_card_4421486"], "reservations": ["ZFA04Y", "XEWRD9"]}'
    )
    call = {"id": "p", "type": "function", "function": {"name": "profile", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": "Hi, I need help with a trip."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "p", "content": profile},
    ]
    for turn in range(12):
        messages.append({"role": "user", "content": f"Let me think about it, part {turn}."})
        messages.append({"role": "assistant", "content": f"Sure, take your time ({turn})."})
    messages.append({"role": "user", "content": "Please go ahead with the change now."})
    return messages


def test_in_an_agent_history_an_older_unit_counts_for_the_identifiers_it_adds() -> None:
    messages = booking_agent()
    window = SlidingWindow().select(messages, 150)
    assert messages[3] in window.messages  # the profile: the ids the next step needs
    kept = decision(window, 3)
    assert kept.reason.startswith("important") and "adds" in kept.reason
    plain = SlidingWindow(identifier_weight=0).select(messages, 150)
    assert messages[3] not in plain.messages  # on keywords alone it matches nothing
    # a chat (no tool calls) is scored as before: identifiers play no part
    chat_only = [m for m in messages if m["role"] != "tool" and not m.get("tool_calls")]
    assert SlidingWindow().select(chat_only, 150).messages == (
        SlidingWindow(identifier_weight=0).select(chat_only, 150).messages
    )
