"""In an agent's history, the semantic window ranks whole units and their excerpts by
bounds computed in numpy, valuing only the keys that can come first: it keeps exactly
what the kit's ``keep_best`` keeps when it values every key, and a warm turn values a
few hundred keys however long the history. A cheap embedder stands in for the model."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from ctxwindow import Conversation, Window
from ctxwindow.kit import Coverage, keep_best, ranking
from ctxwindow_semantic import SemanticWindow

WORDS = "hotel flight budget morning city price plan trip data call result museum".split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 25)))


def tool_output(rng: random.Random) -> str:
    """A long result, as lines of prose (some holding ids) or as JSON records."""
    if rng.random() < 0.5:
        lines = [sentence(rng) for _ in range(rng.randint(4, 14))]
        for row in rng.sample(range(len(lines)), k=rng.randint(0, 3)):
            lines[row] += f" ref ID{rng.randint(0, 3_000)}"
        return "\n".join(lines)
    records = [
        {"code": f"HX{rng.randint(100, 999)}", "note": sentence(rng), "price": rng.randint(90, 900)}
        for _ in range(rng.randint(2, 8))
    ]
    return json.dumps({"results": records})


def agent_chat(turns: int, seed: int) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    yield {"role": "system", "content": "You are a travel agent."}
    for turn in range(turns):
        yield {"role": "user", "content": sentence(rng) + f" for user_{rng.randint(0, 50)}"}
        if turn % 3 != 1:
            calls = [f"c{turn}_{k}" for k in range(rng.randint(1, 2))]
            yield {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {
                            "name": "find",
                            "arguments": f'{{"q": "{rng.choice(WORDS)}"}}',
                        },
                    }
                    for call in calls
                ],
            }
            for call in calls:
                yield {"role": "tool", "tool_call_id": call, "content": tool_output(rng)}
        yield {"role": "assistant", "content": sentence(rng)}


def kits_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the strategy's keep_best value every older unit and excerpt (the kit's own
    best_first) instead of ranking them by the numpy bounds."""

    def every_key(
        history: Any, selection: Any, candidates: Any, room: int, *args: Any, **options: Any
    ) -> int:
        options.pop("order")
        older = [unit for unit in range(len(history.units)) if unit not in history.must_keep]
        older = [unit for unit in older if unit not in selection.kept]
        return keep_best(history, selection, older, room, *args, **options)

    monkeypatch.setattr(ranking, "keep_best", every_key)


def window_of(strategy: SemanticWindow, history: Any, budget: int) -> tuple[Any, ...]:
    window: Window = strategy.select(history, budget)
    decisions = [(d.unit, d.action, d.reason, d.tokens) for d in window.record.decisions]
    return window.messages, decisions


@pytest.mark.parametrize("seed", range(6))
def test_the_bounded_ranking_keeps_what_valuing_every_key_keeps(
    hashing: str, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setattr(ranking, "VALUE_EVERY_KEY_BELOW", 0)  # however short the history
    history = list(agent_chat(60 + 25 * seed, seed))
    history.append({"role": "user", "content": "which HX flight and ID did we book for user_7?"})
    excerpted = 0
    for budget in (300, 900, 2_500):
        ours = window_of(SemanticWindow(embedder=hashing, cache="memory"), history, budget)
        with monkeypatch.context() as patched:
            kits_order(patched)
            kits = window_of(SemanticWindow(embedder=hashing, cache="memory"), history, budget)
        assert ours == kits, (seed, budget)
        excerpted += sum("excerpt" in (m.get("content") or "")[:40] for m in ours[0])
    if seed == 0:
        assert excerpted  # the histories do make excerpts: the test reaches that path


def test_a_warm_turn_with_excerpts_values_only_the_keys_that_can_make_the_window(
    hashing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    strategy = SemanticWindow(embedder=hashing, cache="memory")
    conversation = Conversation(agent_chat(1_200, seed=11))
    strategy.select(conversation, 1_500)
    valued: list[int] = []
    novelty_of = Coverage.novelty_of

    def counted(self: Coverage, found: frozenset[str], tokens: int, covered: Any = None) -> float:
        valued.append(tokens)
        return novelty_of(self, found, tokens, covered)

    monkeypatch.setattr(Coverage, "novelty_of", counted)
    conversation.append({"role": "user", "content": "which hotel had ID12 again?"})
    window = strategy.select(conversation, 1_500)
    assert window.record.engaged and len(window.record.decisions) > 2_000
    # valuing every key values each older unit and each excerpt (over 2,000 calls)
    assert 0 < len(valued) < 1_000
