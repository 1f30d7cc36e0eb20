"""The default scorer, ``keywords``: overlap, neighbours, salience, and its index."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Conversation, get_counter
from ctxwindow_sliding import SlidingWindow
from ctxwindow_sliding.keywords import (
    NUMBER,
    TIME,
    KeywordScorer,
    Settings,
    asks_for,
    facts,
    terms,
)


def filler(count: int) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": f"Filler line number {i}."} for i in range(count)]


def scores(messages: list[Any], query: str | None = None, **settings: Any) -> list[float]:
    history = Conversation(messages).view(get_counter("approx"), 10_000, query)
    scored: list[float] = KeywordScorer(Settings(**settings)).score(history).tolist()
    return scored


def test_terms_drop_stopwords_and_meet_at_a_stem() -> None:
    assert terms("The paintings were painted while painting!") == ["paint", "paint", "paint"]
    assert facts("We met last Tuesday") == TIME
    assert facts("I have 3 turtles") == NUMBER
    assert facts("We met in 2019 and adopted two dogs") == TIME | NUMBER
    assert facts("Lovely to hear from you") == 0
    assert asks_for("When did Ana move?") == TIME
    assert asks_for("How many turtles does Nate have?") == NUMBER
    assert asks_for("What did Ana paint?") == 0


def test_words_of_any_script_are_terms_and_score() -> None:
    """Found by a chat app developer's review: only a-z and 0-9 made words, so a
    Russian or Greek chat scored nothing and sliding fell back to recency silently,
    and an accented word was cut at its accent ('café' -> 'caf')."""
    assert terms("Мой кот Барсик убежал") == ["мой", "кот", "барсик", "убежал"]
    assert terms("Schnurrlöwe café José reservation_id") == [
        "schnurrlöwe", "café", "josé", "reservation", "id",
    ]  # fmt: skip
    said = "Мой кот Барсик убежал вчера вечером."
    messages = [*filler(6), {"role": "user", "content": said}, *filler(6)]
    scored = scores(messages, query="Как зовут кота, Барсик?")
    assert scored.index(max(scored)) == 6 and scored[6] > 0


def test_rare_shared_words_score_and_unrelated_units_do_not() -> None:
    messages = [
        {"role": "user", "content": "The lighthouse keeper lent us a kayak."},
        *filler(12),
        {"role": "user", "content": "Who lent us the kayak?"},
    ]
    result = scores(messages, neighbours=0)
    assert len(result) == len(messages)
    assert result[0] == 1.0  # the best match, scaled to 1
    assert result[1:-1] == [0.0] * 12
    assert result[-1] == 0.0  # the question does not match itself
    # An explicit query is matched against every unit, the newest message included.
    assert scores(messages, query="kayak", neighbours=0)[-1] > 0


def test_neighbours_inherit_a_decaying_share() -> None:
    messages = [*filler(6), {"role": "user", "content": "The cabin code is 4812."}, *filler(6)]
    messages.append({"role": "user", "content": "What is the cabin code?"})
    result = scores(messages, neighbours=0.25, reach=2, salience=0)
    assert result[6] == pytest.approx(1.0)
    assert result[5] == result[7] == pytest.approx(0.25)
    assert result[4] == result[8] == pytest.approx(0.25 * 0.7)
    assert result[3] == result[9] == 0.0
    assert scores(messages, neighbours=0)[5] == 0.0


def test_a_named_speaker_and_the_asked_for_kind_of_fact_raise_a_match() -> None:
    messages = [
        {"role": "user", "name": "Alice", "content": "I adopted a puppy."},
        *filler(8),
        {"role": "assistant", "name": "Bob", "content": "I adopted a puppy too."},
        *filler(8),
        {"role": "user", "content": "What did Bob adopt?"},
    ]
    plain = scores(messages, neighbours=0, speaker=0)
    raised = scores(messages, neighbours=0, speaker=1.5)
    assert raised[0] == plain[0] > 0
    assert raised[9] == pytest.approx(2.5 * plain[9])
    messages = [
        {"role": "user", "content": "We adopted the puppy at the shelter."},
        *filler(8),
        {"role": "user", "content": "We adopted the puppy last March."},
        *filler(8),
        {"role": "user", "content": "When did we adopt the puppy?"},
    ]
    plain = scores(messages, neighbours=0, salience=0)
    raised = scores(messages, neighbours=0, salience=1)
    assert raised[0] == plain[0]
    assert raised[9] == pytest.approx(2 * plain[9]) and raised[9] > raised[0]


def test_the_index_grows_with_the_conversation_and_skips_a_truncated_message() -> None:
    strategy = SlidingWindow(scorer="keywords:reach=5", oversize="truncate")
    scorer = strategy.scorer
    assert isinstance(scorer, KeywordScorer)
    conversation = Conversation([*filler(5), {"role": "user", "content": "kayak " * 400}])
    window = strategy.select(conversation, 60)
    assert window.messages[-1] is not conversation.originals[-1]  # the host cut it to fit
    assert scorer.indexed == 5  # the cut copy was read for this visit, not indexed
    conversation.append({"role": "assistant", "content": "A kayak it is."})
    later = conversation.view(get_counter("approx"), 10_000, "kayak")
    assert scorer.score(later).tolist() == KeywordScorer(scorer.settings).score(later).tolist()
    assert scorer.indexed == 7


def test_one_scorer_serves_threads_at_once() -> None:
    conversation = Conversation([*filler(300), {"role": "user", "content": "Number 7?"}])
    scorer = KeywordScorer()
    expected = KeywordScorer().score(conversation.view(get_counter("approx"), 1000)).tolist()
    results: list[list[float]] = []

    def work() -> None:
        results.append(scorer.score(conversation.view(get_counter("approx"), 1000)).tolist())

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 8
    assert scorer.indexed == len(conversation)


def test_settings_come_from_the_spec() -> None:
    assert Settings.parse(None) == Settings()
    assert Settings.parse("speaker=0; reach=2") == Settings(speaker=0.0, reach=2)
    scorer = ctxwindow.get_importance_scorer("keywords:salience=0")
    assert scorer.name == "keywords:salience=0" and scorer.settings.salience == 0.0
    with pytest.raises(ctxwindow.InvalidOption, match="reach must be an integer from 0 to 50"):
        Settings.parse("reach=99")
    with pytest.raises(ctxwindow.InvalidOption, match="neighbours must be a number >= 0"):
        Settings.parse("neighbours=nan")


_SCORES_IN_A_PROCESS = """
import json, random
from ctxwindow import Conversation, get_counter
from ctxwindow_sliding import KeywordScorer
rng = random.Random(3)
words = "flight price hotel budget date plan city morning call result data trip".split()
history = [
    {"role": ("user", "assistant")[i % 2], "content": " ".join(rng.choices(words, k=40))}
    for i in range(300)
]
history.append({"role": "user", "content": " ".join(words)})
view = Conversation(history).view(get_counter("approx"), 1_000)
print(json.dumps([value.hex() for value in KeywordScorer().score(view).tolist()]))
"""


def test_scores_are_the_same_to_the_bit_whatever_the_hash_seed() -> None:
    """A unit's BM25 sums its terms' parts in the query's order: summed in a set's
    order, which the hash seed decides, scores differed in the last bit between
    processes, and so could a window between two runs of the same program."""
    import os
    import subprocess
    import sys

    runs = {
        subprocess.run(
            [sys.executable, "-c", _SCORES_IN_A_PROCESS],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (1, 2, 3, 4)
    }
    assert len(runs) == 1
