"""What the recency-decay window keeps, beyond the contract."""

from __future__ import annotations

from typing import Any

import pytest

import ctxwindow
from ctxwindow_recency_decay import RecencyDecay


def chat(turns: int) -> list[dict[str, Any]]:
    out = [{"role": "system", "content": "You are the billing assistant."}]
    for turn in range(turns):
        out.append({"role": "user", "content": f"Question {turn:02}: how is the weather?"})
        out.append({"role": "assistant", "content": f"Answer {turn:02}: sunny, mild, dry."})
    return out


def with_invoice() -> list[dict[str, Any]]:
    messages = chat(12)
    messages[3] = {"role": "user", "content": "Was my invoice INV-4471 charged twice?"}
    return messages


def test_without_keywords_it_keeps_the_newest_units() -> None:
    messages = chat(12)
    window = RecencyDecay().select(messages, 120)
    kept = [messages.index(m) for m in window.messages]
    assert kept[:2] == [0, 1]  # the system message and the task statement (first user message)
    assert kept[2:] == list(range(kept[2], len(messages)))  # then a recent run, no gap
    assert kept[2] > 2


def test_a_keyword_keeps_an_old_unit_the_recent_ones_would_push_out() -> None:
    messages = with_invoice()
    plain = RecencyDecay().select(messages, 120)
    boosted = RecencyDecay(keywords=["Invoice"]).select(messages, 120)  # any case
    assert messages[3] not in plain.messages
    assert messages[3] in boosted.messages
    decision = next(d for d in boosted.record.decisions if 3 in d.positions)
    assert decision.action == "kept" and decision.reason == "among the highest scores that fit"


def test_a_task_statement_too_big_for_the_core_to_keep_is_ranked_first() -> None:
    """Over a quarter of the budget the core does not keep the task statement outright;
    the strategy ranks it first among the units it scores, unless the option is off."""
    messages = chat(12)
    messages[1] = {"role": "user", "content": "Audit invoice INV-4471 for duplicates. " * 8}
    budget = 300
    assert RecencyDecay().select(messages, budget).record.tokens_after <= budget
    window = RecencyDecay().select(messages, budget)
    decision = next(d for d in window.record.decisions if 1 in d.positions)
    assert decision.action == "kept" and decision.reason == "task statement (ranked first)"
    off = RecencyDecay(task_statement=False).select(messages, budget)
    assert messages[1] not in off.messages


def test_scores_halve_every_half_life_and_are_recorded() -> None:
    window = RecencyDecay(half_life=2).select(chat(12), 120)
    scores = {d.unit: d.score for d in window.record.decisions if d.score is not None}
    newest = max(scores)
    assert scores[newest - 2] == pytest.approx(scores[newest] / 2)
    assert scores[newest - 4] == pytest.approx(scores[newest] / 4)


def test_a_long_half_life_lets_a_keyword_reach_further_back() -> None:
    messages = with_invoice()
    short = RecencyDecay(keywords=["invoice"], keyword_boost=1, half_life=1)
    long = RecencyDecay(keywords=["invoice"], keyword_boost=1, half_life=20)
    assert messages[3] not in short.select(messages, 120).messages
    assert messages[3] in long.select(messages, 120).messages


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"half_life": 0}, "half_life"),
        ({"keywords": "invoice"}, "keywords"),
        ({"keywords": ["the"]}, "words to look for"),
        ({"keyword_boost": -1}, "keyword_boost"),
    ],
)
def test_bad_options_are_a_clear_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ctxwindow.InvalidOption, match=message):
        RecencyDecay(**options)


def test_selected_by_name_once_installed() -> None:
    window = ctxwindow.select(
        with_invoice(), budget=120, strategy="recency-decay", keywords=["invoice"]
    )
    assert window.record.strategy == "recency-decay"
