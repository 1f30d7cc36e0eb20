"""What sliding keeps per conversation: a chat loop gets the windows a fresh strategy
gives, a visit touches only the units that can matter, and the state goes with its
conversation."""

from __future__ import annotations

import gc
import random
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Conversation, History, get_counter
from ctxwindow.kit import Coverage
from ctxwindow_sliding import KeywordScorer, SlidingWindow
from ctxwindow_sliding.keywords import DECAY, spread

WORDS = "the plan trip hotel flight price city budget call result data".split()


def agent_turns(count: int, seed: int = 1) -> list[list[dict[str, Any]]]:
    """Chat and tool exchanges, as blocks that may be appended one at a time; some
    results carry ids, some messages an importance or a pin."""
    rng = random.Random(seed)
    blocks: list[list[dict[str, Any]]] = [[{"role": "system", "content": "You are an agent."}]]
    for index in range(count):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30)))
        if rng.random() < 0.2:
            code = f"RES{rng.randint(0, 40):03d}" if rng.random() < 0.5 else "none"
            function = {"name": "find", "arguments": f'{{"q": "{text[:20]}"}}'}
            call = {"id": f"c{index}", "type": "function", "function": function}
            blocks.append(
                [
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"c{index}", "content": f"{text} {code}"},
                ]
            )
            continue
        message: dict[str, Any] = {"role": rng.choice(["user", "assistant"]), "content": text}
        if rng.random() < 0.05:
            message["metadata"] = {"importance": rng.choice([2, -1, 0.5])}
        elif rng.random() < 0.02:
            message["metadata"] = {"pinned": True}
        blocks.append([message])
    return blocks


def agent_history(count: int, seed: int = 1) -> list[dict[str, Any]]:
    return [message for block in agent_turns(count, seed) for message in block]


def outcome(window: ctxwindow.Window[Any], messages: list[Any]) -> Any:
    where = {id(m): i for i, m in enumerate(messages)}
    decisions = [d.to_dict() for d in window.record.decisions]
    return [where[id(m)] for m in window.messages], decisions, window.record.notes


@pytest.mark.parametrize("budget", [150, 400, 1200])
def test_a_chat_loop_gets_the_windows_a_fresh_strategy_gives(budget: int) -> None:
    blocks = agent_turns(240)
    strategy = SlidingWindow()
    conversation = Conversation([m for block in blocks[:180] for m in block])
    for index in range(180, 240, 3):
        for block in blocks[index : index + 3]:
            conversation.extend(block)
        conversation.append({"role": "user", "content": f"the hotel for RES{index % 40:03d}?"})
        window = strategy.select(conversation, budget)
        # a new Conversation: nothing of it is indexed (the scorer is shared)
        fresh = SlidingWindow().select(Conversation(conversation.originals), budget)
        assert outcome(window, conversation.originals) == outcome(fresh, conversation.originals)
    # A view taken before the conversation grew is windowed on its own units.
    messages = agent_history(240)
    cut = next(i for i in range(120, 130) if messages[i]["role"] != "tool")
    old = Conversation(messages[:cut])
    view = old.view(get_counter("approx"), budget)
    old.extend(messages[cut:])
    strategy.select(old, budget)  # the state now holds more units than the view
    chosen = strategy.choose(view)  # type: ignore[attr-defined]
    fresh = Conversation(messages[:cut]).view(get_counter("approx"), budget)
    again = SlidingWindow().choose(fresh)  # type: ignore[attr-defined]
    assert chosen.actions == again.actions and chosen.scores == again.scores


def test_a_visit_values_only_the_units_that_can_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's history whose older units hold no identifier and share no word with
    the request: a later turn values a handful of units, not every one."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for turn in range(600):
        messages.append({"role": "user", "content": f"more about the {WORDS[turn % 11]} please"})
        messages.append({"role": "assistant", "content": "noted, the plan holds"})
    messages[2:2] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "find", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "nothing"},
    ]
    conversation = Conversation(messages)
    strategy = SlidingWindow()
    strategy.select(conversation, 300)
    valued: list[int] = []
    novelty = Coverage.novelty

    def counted(self: Coverage, unit: int) -> float:
        valued.append(unit)
        return novelty(self, unit)

    monkeypatch.setattr(Coverage, "novelty", counted)
    conversation.append({"role": "assistant", "content": "noted"})
    conversation.append({"role": "user", "content": "what was the zebra code?"})
    window = strategy.select(conversation, 300)
    assert window.record.engaged
    assert len(valued) < 20  # every older unit (1,200) before


def test_spread_sums_as_a_pass_over_the_full_list_does() -> None:
    """The neighbours' shares, summed over the stretches near a scoring unit only, are
    the floats a pass over every unit gives (which skipped units cannot change)."""

    def full_pass(scores: list[float], strength: float, reach: int) -> list[float]:
        size, out, weight = len(scores), list(scores), strength
        for step in range(1, min(reach, size - 1) + 1):
            out[step:] = [o + weight * s for o, s in zip(out[step:], scores, strict=False)]
            out[: size - step] = [o + weight * s for o, s in zip(out, scores[step:], strict=False)]
            weight *= DECAY
        return out

    rng = random.Random(7)
    for _ in range(3_000):
        size = rng.randint(1, 60)
        dense = [0.0] * size
        for _ in range(rng.randint(0, 6)):
            dense[rng.randrange(size)] = rng.choice([1.0, rng.random(), 3.7])
        strength, reach = rng.choice([0.25, 0.0, 0.9]), rng.choice([0, 1, 4, 9])
        sparse = spread({u: v for u, v in enumerate(dense) if v}, size, strength, reach)
        expected = full_pass(dense, strength, reach) if strength and reach else dense
        assert sparse == {u: v for u, v in enumerate(expected) if v}


def test_the_scorer_names_its_nonzero_scores() -> None:
    messages = [*agent_history(150), {"role": "user", "content": "the hotel budget?"}]
    history = Conversation(messages).view(get_counter("approx"), 1000)
    scorer = KeywordScorer()
    nonzero = scorer.nonzero_scores(history)
    assert nonzero and all(nonzero.values())
    assert scorer.score(history) == [nonzero.get(u, 0.0) for u in range(len(history.units))]


def test_the_state_goes_with_its_conversation() -> None:
    strategy = SlidingWindow()
    conversation = Conversation(agent_history(100))
    strategy.select(conversation, 300)
    assert len(strategy._states) == 1
    del conversation
    gc.collect()
    assert len(strategy._states) == 0


class Sparse:
    """A third party's scorer that names its nonzero scores itself."""

    name = "sparse"

    def __init__(self, scores: Any) -> None:
        self.scores = scores

    def score(self, history: History) -> list[float]:
        raise AssertionError("a scorer with nonzero_scores is never asked for every score")

    def nonzero_scores(self, history: History) -> Any:
        return self.scores(len(history.units))


@pytest.fixture
def sparse_scorers(ctxwindow_register: Any) -> None:
    import types

    module = types.ModuleType("sparse_plugin")

    @ctxwindow.hookimpl
    def register_importance_scorers(register: Any) -> None:
        register("second", lambda argument: Sparse(lambda n: {2: 5.0}))
        register("outside", lambda argument: Sparse(lambda n: {n: 1.0}))
        register("inf", lambda argument: Sparse(lambda n: {1: float("inf")}))
        register("words", lambda argument: Sparse(lambda n: {1: "high"}))

    module.register_importance_scorers = register_importance_scorers  # type: ignore[attr-defined]
    ctxwindow_register(module, name="sparse-plugin")


def test_a_scorer_may_name_only_its_nonzero_scores(sparse_scorers: None) -> None:
    messages = [{"role": "system", "content": "Be brief."}]
    for turn in range(30):
        messages.append({"role": ("user", "assistant")[turn % 2], "content": f"turn {turn} " * 4})
    window = SlidingWindow(scorer="second", task_statement=False).select(messages, 80)
    assert messages[2] in window.messages
    assert window.record.decisions[2].score == 1.0  # scaled to 1
    for name, says in [
        ("outside", "not one of the 31 units"),
        ("inf", "not finite"),
        ("words", "not numbers"),
    ]:
        with pytest.raises(ctxwindow.PluginError, match=says):
            SlidingWindow(scorer=name).select(messages, 80)
