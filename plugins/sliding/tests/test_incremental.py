"""What sliding keeps per conversation: a chat loop gets the windows a fresh strategy
gives, a visit touches only the units that can matter, and the state goes with its
conversation."""

from __future__ import annotations

import gc
import json
import math
import random
from typing import Any

import numpy as np
import pytest

import ctxwindow
from ctxwindow import Conversation, History, get_counter
from ctxwindow.kit import Coverage, terms
from ctxwindow_sliding import KeywordScorer, SlidingWindow, keywords
from ctxwindow_sliding.keywords import DECAY, K1, B, Settings, UnitTerms, spread

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


def record_history(
    lookups: int, seed: int = 5, notes: int = 0
) -> tuple[list[dict[str, Any]], list[str]]:
    """An agent's lookups: each tool result a record with identifiers that many records
    share (a field name, one of 28 dates) beside its own (a reservation, a flight), and
    ``notes`` words of prose (enough, and its result is cut to an excerpt)."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    reservations = []
    for number in range(lookups):
        reservation = f"R{rng.randrange(100_000):05d}"
        reservations.append(reservation)
        record = {
            "reservation_id": reservation,
            "flight": f"HAT{rng.randrange(1_000):03d}",
            "date": f"2024-05-{rng.randint(1, 28):02d}",
            "price": rng.randint(50, 2_000),
        }
        if notes:
            record["notes"] = " ".join(rng.choice(WORDS) for _ in range(notes))
        call = {
            "id": f"c{number}",
            "type": "function",
            "function": {"name": "lookup", "arguments": f'{{"reservation_id": "{reservation}"}}'},
        }
        messages.append({"role": "user", "content": "look up the next reservation"})
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        result = json.dumps(record)
        messages.append({"role": "tool", "tool_call_id": f"c{number}", "content": result})
    return messages, reservations


@pytest.mark.parametrize("lookups", [300, 1_500])
def test_an_agent_step_values_about_the_units_it_keeps_however_many_hold_ids(
    monkeypatch: pytest.MonkeyPatch, lookups: int
) -> None:
    """Every older unit holds identifiers, many of them shared (and hundreds of units
    are worth exactly as much): the bounds fall as the window covers identifiers, so a
    step values about the keys it keeps, at 900 messages and at 4,500 alike (it valued
    most units before), and keeps what a fresh strategy keeps."""
    messages, reservations = record_history(lookups)
    conversation = Conversation(messages)
    strategy = SlidingWindow()
    strategy.select(conversation, 3_000)
    valued: list[int] = []
    novelty_of = Coverage.novelty_of

    def counted(self: Coverage, found: frozenset[str], tokens: int, covered: Any = None) -> float:
        valued.append(tokens)
        return novelty_of(self, found, tokens, covered)

    monkeypatch.setattr(Coverage, "novelty_of", counted)
    asked = {"role": "user", "content": f"the flight and price of {reservations[17]}?"}
    conversation.append(asked)
    window = strategy.select(conversation, 3_000)
    assert window.record.engaged and len(window.record.decisions) > 2 * lookups
    kept = sum(d.reason.startswith("important") for d in window.record.decisions)
    assert kept > 50
    assert 0 < len(valued) < 4 * kept  # about the keys it keeps, at either length
    monkeypatch.undo()
    fresh = SlidingWindow().select(Conversation(conversation.originals), 3_000)
    assert outcome(window, conversation.originals) == outcome(fresh, conversation.originals)


def every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make keep_ranked value every older unit and excerpt (the kit's own best_first)
    instead of ranking them by numpy bounds."""
    from ctxwindow.kit import keep_best, ranking

    def valued_all(history: Any, selection: Any, _: Any, room: int, *args: Any, **kw: Any) -> int:
        kw.pop("order", None)  # absent when a few candidates are ranked by keep_best
        older = [u for u in range(len(history.units)) if u not in history.must_keep]
        older = sorted((u for u in older if u not in selection.kept), reverse=True)
        return keep_best(history, selection, older, room, *args, **kw)

    monkeypatch.setattr(ranking, "keep_best", valued_all)


def shown(window: ctxwindow.Window[Any]) -> Any:
    """A window's messages (stand-ins for excerpts among them) and its decisions."""
    decisions = [(d.unit, d.action, d.reason, d.tokens, d.score) for d in window.record.decisions]
    return window.messages, decisions, window.record.notes


@pytest.mark.parametrize("seed", range(4))
def test_the_bounded_ranking_keeps_what_valuing_every_key_keeps(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Whole units and excerpts, identifiers shared and spoken, ties by the hundred:
    valued only when they can come first (in chunks of 4 here), bounds falling as the
    window covers identifiers, the keys taken and their order are those of valuing every
    one."""
    from ctxwindow.kit import ranking

    monkeypatch.setattr(ranking, "FIRST_CHUNK", 4)
    monkeypatch.setattr(ranking, "VALUE_EVERY_KEY_BELOW", 0)  # however short the history
    records, reservations = record_history(120 + 60 * seed, seed)
    bulky, _ = record_history(100 + 40 * seed, seed, notes=80)
    asked = {"role": "user", "content": f"the flight of {reservations[seed]} and RES00{seed}?"}
    excerpted = 0
    for messages in ([*records, asked], [*bulky, asked], [*agent_history(200, seed), asked]):
        for budget in (400, 1_500, 4_000):
            ours = SlidingWindow().select(messages, budget)
            with monkeypatch.context() as patched:
                every_key(patched)
                theirs = SlidingWindow().select(messages, budget)
            assert shown(ours) == shown(theirs), budget
            excerpted += sum(d.action == "replaced" for d in ours.record.decisions)
    assert excerpted  # excerpts were offered, and some taken


def test_spread_sums_as_a_python_pass_over_the_list_does() -> None:
    """The neighbours' shares, summed in numpy, are the floats a Python pass over every
    unit gives, to the last bit (the windows do not change with the arithmetic)."""

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
        summed = spread(np.array(dense), strength, reach).tolist()
        expected = full_pass(dense, strength, reach) if strength and reach else dense
        assert summed == expected
        # the scoring units named by the caller, and some that score 0 among them
        named = sorted({u for u, v in enumerate(dense) if v} | {rng.randrange(size)})
        given = spread(np.array(dense), strength, reach, np.array(named, np.int64))
        assert given.tolist() == expected


def test_the_scorer_scores_every_unit_as_textbook_bm25_does() -> None:
    """With neighbours, speakers and kinds of fact off, a unit's score is its BM25 for
    the query's terms (the postings read in numpy), scaled so the best is 1."""
    messages = [*agent_history(150), {"role": "user", "content": "the hotel budget for RES007?"}]
    history = Conversation(messages).view(get_counter("approx"), 1000)
    scores = KeywordScorer(Settings(neighbours=0, speaker=0, salience=0)).score(history)
    assert scores.dtype == np.float64 and len(scores) == len(history.units)
    reads = [UnitTerms.of(history, unit) for unit in range(len(history.units))]
    average = sum(read.length for read in reads) / len(reads)
    query = set(terms(history.effective_query))
    own = history.unit_of(history.newest_user)
    expected = []
    for unit, read in enumerate(reads):
        total = 0.0
        for term in query:
            holding = sum(term in other.counts for other in reads)
            count = read.counts.get(term, 0)
            if count and unit != own:
                idf = math.log(1 + (len(reads) - holding + 0.5) / (holding + 0.5))
                norm = K1 * (1 - B + B * read.length / average)
                total += idf * count * (K1 + 1) / (count + norm)
        expected.append(total)
    assert max(expected) > 0 and expected[own] == 0
    assert np.allclose(scores, np.array(expected) / max(expected), rtol=1e-12, atol=0)


@pytest.mark.parametrize("asked", ["the hotel budget for RES007?", "zebra", "quartz"])
@pytest.mark.parametrize("agent", [True, False])
def test_the_units_said_to_score_hold_every_unit_that_does(asked: str, agent: bool) -> None:
    """The scorer's support (the units sharing a query term and their neighbours'
    reach) holds every unit its scores are not 0 for; the strategy's, the metadata
    importance and the task statement's too: a visit lists the scoring units from it
    alone, and the record's scores are those a pass over every unit finds. A word
    in many units (the first) is not listed: every unit is looked at."""
    rng = random.Random(5)
    said = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(400)]
    chat = [{"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(said)]
    older = agent_history(400, seed=3) if agent else chat
    for position in (40, 41, 150, 300, 380):  # a rare word, in a few messages
        if older[position]["role"] in ("user", "assistant") and older[position]["content"]:
            older[position] = {**older[position], "content": older[position]["content"] + " zebra"}
    messages = [*older, {"role": "user", "content": asked}]
    history = Conversation(messages).view(get_counter("approx"), 1000)
    scores, support = KeywordScorer(Settings()).score_with_support(history)
    assert (support is None) == (asked not in {"zebra", "quartz"})
    strategy = SlidingWindow()
    importance = strategy.importance(history)
    if support is not None:
        assert np.all(np.diff(support) > 0)
        assert set(np.flatnonzero(scores).tolist()) <= set(support.tolist())
    if asked == "zebra":  # the rare word's units and their neighbours score
        assert np.count_nonzero(scores) > 5
    chosen = strategy.choose(history)  # type: ignore[attr-defined]

    def recorded(unit: int) -> float | None:
        """The unit's score as the record reads it: its own, else its ``unit_scores``
        entry (NaN: none)."""
        own = chosen.scores.get(unit)
        if own is not None or chosen.unit_scores is None:
            return own
        entry = float(chosen.unit_scores[unit])
        return None if math.isnan(entry) else entry

    # the scores of a few scoring units go by unit, without an array of every unit's
    assert (chosen.unit_scores is None) == (support is not None)
    scored = {unit: float(importance[unit]) for unit in np.flatnonzero(importance).tolist()}
    assert scored and {unit: recorded(unit) for unit in scored} == scored
    # a unit of importance 0 has no score, unless kept with one (for its identifiers)
    unscored = [u for u in range(len(history.units)) if u not in scored and u not in chosen.scores]
    assert all(recorded(unit) is None for unit in unscored)
    assert unscored or support is None  # a rare word: most units score 0


def test_a_question_for_a_kind_of_fact_raises_the_few_units_as_a_pass_over_all_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """'When ...?' raises the units that state a time: on the few path, those among
    the support alone, read from the index up to the first stand-in and from this
    visit's reading after it (here a tool result the host cut), as a pass over every
    unit raises them."""
    rng = random.Random(7)
    said = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(400)]
    chat = [{"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(said)]
    for position in (40, 150, 300):  # the rare word, with a date or without
        chat[position] = {**chat[position], "content": f"{said[position]} zebra on 3 May 2024"}
    chat[200] = {**chat[200], "content": f"{said[200]} zebra"}
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    messages = [
        *chat,
        {"role": "user", "content": "When does the zebra come?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "The zebra comes on 14 March 2025."},
    ]
    history = Conversation(messages).view(get_counter("approx"), 1000)
    cut = ctxwindow.Message("tool", "The zebra comes on 14 March 2025. [cut]", tool_call_id="c1")
    history._replace(len(messages) - 1, cut)  # as the host cuts an oversized result
    few, support = KeywordScorer(Settings()).score_with_support(history)
    plain, _ = KeywordScorer(Settings(salience=0)).score_with_support(history)
    monkeypatch.setattr(keywords, "FEW_SHARE", 10**9)  # a pass over every unit
    every, none = KeywordScorer(Settings()).score_with_support(history)
    assert support is not None and none is None
    assert np.array_equal(few, every)
    answer = history.unit_of(len(messages) - 1)  # holds a stand-in: read on this visit
    for unit in (answer, history.unit_of(40), history.unit_of(150)):
        assert few[unit] > plain[unit] > 0  # states a time: raised
    assert few[history.unit_of(200)] == plain[history.unit_of(200)] > 0  # states none


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


def _edited(history: list[dict[str, Any]], rng: random.Random, step: int) -> list[dict[str, Any]]:
    """``history`` as an app or a pipeline's stage sends it next: grown, its newest
    messages edited or taken back, a result near the end cleared."""
    edit = rng.choice(["grow", "edit", "take back", "clear"])
    out = list(history)
    if edit == "take back":
        out = out[: -rng.randint(1, 3)]
    elif edit == "edit":
        where = len(out) - rng.randint(1, 6)
        if out[where]["role"] != "tool":
            out[where] = {**out[where], "content": f"edited {step} RES{step % 40:03d} plan"}
    elif edit == "clear":
        results = [i for i in range(max(0, len(out) - 12), len(out)) if out[i]["role"] == "tool"]
        if results:
            where = rng.choice(results)
            out[where] = {**out[where], "content": f"[cleared output {step}]"}
    out.append({"role": "user", "content": f"the {rng.choice(WORDS)} for RES{step % 40:03d}?"})
    return out


@pytest.mark.parametrize("budget", [150, 400, 1200])
def test_a_legacy_function_call_windowed_before_its_result_came(budget: int) -> None:
    """A legacy function call windowed alone (its result not come yet), then with its
    result, which joins the call's unit: the unit is read again, not kept as the call
    alone in what the conversation remembers, and the window is a fresh strategy's."""
    strategy = SlidingWindow()
    conversation = Conversation(agent_history(120))
    for turn in range(4):
        call = {"name": "lookup", "arguments": f'{{"code": "RES{turn:03d}"}}'}
        conversation.append({"role": "assistant", "content": None, "function_call": call})
        strategy.select(conversation, budget)
        found = f"RES{turn:03d}: the hotel price is in budget " * (3 + 9 * turn)
        conversation.append({"role": "function", "name": "lookup", "content": found})
        conversation.append({"role": "user", "content": f"and the flight for RES{turn:03d}?"})
        window = strategy.select(conversation, budget)
        fresh = SlidingWindow().select(Conversation(conversation.originals), budget)
        assert outcome(window, conversation.originals) == outcome(fresh, conversation.originals)


@pytest.mark.parametrize("budget", [400, 1200])
def test_a_list_edited_near_its_end_gets_the_windows_a_fresh_strategy_gives(budget: int) -> None:
    """Each visit's list parts from the last near its end: it is read as a branch of
    the last one's conversation, and the scorer's index and the ranking figures start
    from that conversation's, reading only what the two do not share."""
    rng = random.Random(budget)
    history = agent_history(400, seed=3)
    strategy = SlidingWindow()
    scorer = strategy.scorer
    strategy.select(history, budget)
    for step in range(30):
        history = _edited(history, rng, step)
        before = scorer.indexed  # type: ignore[attr-defined]
        window = strategy.select(history, budget)
        assert scorer.indexed - before <= 12  # type: ignore[attr-defined]
        fresh = SlidingWindow().select(Conversation(history), budget)
        assert outcome(window, history) == outcome(fresh, history)


def test_a_conversation_and_its_branch_each_get_their_own_windows() -> None:
    """The figures a branch starts from stay the parent's too: both grow apart."""
    blocks = agent_turns(300, seed=4)
    messages = [m for block in blocks[:250] for m in block]
    strategy = SlidingWindow()
    parent = Conversation(messages)
    strategy.select(parent, 400)
    child = parent.branch(len(messages) - 7)
    for index in range(250, 300, 5):
        for conversation, shift in ((parent, 0), (child, 1)):
            for block in blocks[index + shift : index + shift + 4]:
                conversation.extend(block)
            conversation.append({"role": "user", "content": f"RES{index % 40:03d} price?"})
            window = strategy.select(conversation, 400)
            fresh = SlidingWindow().select(Conversation(conversation.originals), 400)
            originals = conversation.originals
            assert outcome(window, originals) == outcome(fresh, originals)


def index_of(scorer: KeywordScorer, conversation: Conversation) -> Any:
    """What the scorer's index of ``conversation`` holds, brought up to date."""
    index = scorer.index(conversation.view(get_counter("approx"), 10_000))
    size = len(index)
    postings = {}
    for term, posting in index.postings.items():
        units, counts = posting.before(size)
        if len(units):
            postings[term] = (units.tolist(), counts.tolist())
    speakers = {term: rows.view.tolist() for term, rows in index.speakers.items()}
    time = index.time
    when = (time.anchors, time.spans, time.by_anchor) if time is not None else None
    return (
        postings,
        index.lengths.view.tolist(),
        index.length_sums,
        index.facts.view.tolist(),
        speakers,
        when,
    )


@pytest.mark.parametrize("time", [0.0, 1.0])
@pytest.mark.parametrize("back", [1, 5, 40, 2_000])
def test_a_branch_and_its_parent_keep_the_index_a_fresh_read_gives(time: float, back: int) -> None:
    """A branch's index starts from its parent's (postings shared until either adds to
    one): both hold what an index of their own messages holds, as they grow apart."""
    scorer = KeywordScorer(Settings(time=time))
    messages = agent_history(1_500, seed=8)
    for message in messages[::50]:  # speakers and days, for their indexes too
        if message["role"] in ("user", "assistant") and message["content"]:
            message["name"] = "bob"
            message["content"] += " on 4 May 2023, yesterday"
    parent = Conversation(messages)
    index_of(scorer, parent)
    child = parent.branch(len(messages) - back)
    assert child.branched_from is not None
    grow = agent_history(1_600, seed=9)[len(messages) :]
    for step in range(0, 60, 6):
        parent.extend(grow[step : step + 6])
        child.extend(grow[step + 30 : step + 36])
        for conversation in (child, parent):
            fresh = Conversation(conversation.originals)
            assert index_of(scorer, conversation) == index_of(KeywordScorer(scorer.settings), fresh)


def rare_question_histories(seed: int) -> list[list[dict[str, Any]]]:
    """Chats and agent loops in which a rare word and a few ids sit in a handful of
    units, ending on a question about them: the few units worth anything are found from
    the keyword match and the units holding ids, without a pass over every unit."""
    rng = random.Random(seed)
    histories = []
    for agent in (False, True):
        size = rng.randint(350, 900)
        if agent:
            messages = agent_history(size // 3, seed)  # ids in its results, a few pins
        else:
            messages = [
                {"role": ("user", "assistant")[i % 2], "content": " ".join(rng.choices(WORDS, k=9))}
                for i in range(size)
            ]
        for position in rng.sample(range(1, len(messages) - 1), 6):
            message = messages[position]
            if message["role"] in ("user", "assistant") and message.get("content"):
                extra = rng.choice([" zebra", " zebra RES-77", " quartz 4411"])
                messages[position] = {**message, "content": message["content"] + extra}
        question = rng.choice(["zebra?", "what about the zebra and RES-77?", "quartz"])
        histories.append([*messages, {"role": "user", "content": question}])
    return histories


@pytest.mark.parametrize("seed", range(5))
def test_a_rare_question_ranks_its_few_units_as_a_pass_over_every_unit_does(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """When few units can be worth anything, the ranking reads them from the keyword
    match's support and the units holding ids (no pass over every unit), and keeps
    exactly what the pass over every unit keeps, with the same record, and what valuing
    every key keeps."""
    from ctxwindow.kit import ranking

    few = ranking._Keys._few_candidates
    found: list[int] = []

    def counted(self: Any, *args: Any) -> Any:
        candidates = few(self, *args)
        if candidates is not None:
            found.append(len(candidates))
        return candidates

    monkeypatch.setattr(ranking, "VALUE_EVERY_KEY_BELOW", 0)  # however short the history
    for messages in rare_question_histories(seed):
        for budget in (300, 1_200, 4_000):
            with monkeypatch.context() as patched:
                patched.setattr(ranking._Keys, "_few_candidates", counted)
                patched.setattr(ranking, "FEW_CANDIDATES", -1)  # ranked by the numpy bounds
                ours = SlidingWindow().select(messages, budget)
            with monkeypatch.context() as patched:  # a pass over every unit
                patched.setattr(ranking._Keys, "_few_candidates", lambda *_: None)
                patched.setattr(ranking, "_few_worth_ranking", lambda *_: None)
                dense = SlidingWindow().select(messages, budget)
            with monkeypatch.context() as patched:
                every_key(patched)
                theirs = SlidingWindow().select(messages, budget)
            assert shown(ours) == shown(dense) == shown(theirs), budget
    assert found  # the few units were found where they are


def test_a_few_matches_score_as_a_pass_over_every_unit_scores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Summed where they are (few postings) or by a pass over every unit, the keyword
    scores are the same floats, to the last bit; the support holds every scoring unit."""
    from ctxwindow_sliding import keywords

    few = 0
    for seed in range(5):
        for messages in rare_question_histories(seed):
            history = Conversation(messages).view(get_counter("approx"), 2_000)
            scores, support = KeywordScorer(Settings()).score_with_support(history)
            with monkeypatch.context() as patched:
                patched.setattr(keywords, "FEW_SHARE", 10**9)  # every unit looked at
                dense, none = KeywordScorer(Settings()).score_with_support(history)
            assert none is None
            assert scores.tolist() == dense.tolist()
            if support is not None:
                few += 1
                assert set(np.flatnonzero(dense).tolist()) <= set(support.tolist())
    assert few  # some questions matched few units
