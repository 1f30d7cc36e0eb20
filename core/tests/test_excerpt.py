"""Excerpts of tool results and assistant messages (ctxwindow.kit._excerpt): what a
message is cut to, the stand-in message that carries the cut, its memo, and keep_best's
choice between whole units and their excerpts."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxwindow
from ctxwindow import ApproxCounter, Conversation, History, Selection
from ctxwindow.kit import (
    Coverage,
    best_first,
    excerpt_text,
    excerpt_unit,
    identifiers,
    keep_best,
    unit_text,
)
from ctxwindow.kit._excerpt import ASSISTANT_HEADER, HEADER, ID_COLUMN, MAX_LEAF_CHARS

# -- histories ---------------------------------------------------------------------------


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def profile(number: int) -> dict[str, Any]:
    """A tool result with prose, small flags, a map keyed by ids and a list of records."""
    return {
        "user_id": f"user_{number}",
        "name": {"first_name": "Ada", "last_name": "Lovelace"},
        "about": "A long description of the customer, prose that no agent passes on. " * 3,
        "verified": True,
        "visits": 7,
        "payment_methods": {
            f"card_{number}{i}": {"source": "credit_card", "brand": "visa", "limit": 5000}
            for i in range(3)
        },
        "orders": [
            {"order_id": f"ORD{number}{i:03d}", "status": "pending", "note": "at the door"}
            for i in range(4)
        ],
    }


def agent_messages(profiles: int = 4) -> list[dict[str, Any]]:
    """An agent's history: each round calls get_profile, then answers in words.

    Units: 0 system, 1 the task, then per round a call-and-result unit (2, 4, 6, ...)
    and an answer (3, 5, 7, ...), and the newest user message last."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Help me with my orders."},
    ]
    for number in range(profiles):
        messages.append(call(f"c{number}", "get_profile", user_id=f"user_{number}"))
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"c{number}",
                "content": json.dumps(profile(number)),
                "metadata": {"source": "crm"},
            }
        )
        messages.append({"role": "assistant", "content": f"Found profile {number}."})
    messages.append({"role": "user", "content": "And now?"})
    return messages


def view(messages: list[dict[str, Any]], counter: Any = None) -> History:
    return Conversation(messages).view(counter or ApproxCounter(), 100_000)


PROFILE_UNITS = [2, 4, 6, 8]  # call-and-result units of agent_messages(), oldest first


def reason(rank: int, unit: int, added: int) -> str:
    return f"rank {rank}"


def keep(
    history: History,
    candidates: list[int],
    room: int,
    *,
    score: float = 0.0,
    above: float | None = None,
    excerpts: bool = True,
) -> tuple[Selection, int]:
    """keep_best on a fresh selection and coverage; the selection and the room left."""
    selection = history.selection()
    coverage = Coverage(history, selection.kept)
    left = keep_best(
        history,
        selection,
        candidates,
        room,
        lambda unit: score,
        coverage,
        reason,
        excerpts=excerpts,
        above=above,
    )
    return selection, left


def cost(history: History, selection: Selection, units: list[int]) -> int:
    """What ``units`` cost in the selection's window (stand-ins counted as sent)."""
    total = 0
    for unit in units:
        if unit not in selection.kept:
            continue
        for position in history.span(unit):
            stand_in = selection.stand_ins.get(position)
            sent = stand_in if stand_in is not None else history.messages[position]
            total += history.counter.count_message(sent)
    return total


# -- excerpt_text --------------------------------------------------------------------------


def test_a_json_object_keeps_its_coded_leaves_with_their_keys() -> None:
    text = json.dumps(
        {
            "reservation_id": "ZFA04Y",
            "origin": "JFK",
            "status": "active",
            "insurance": "no",
            "paid": True,
            "passengers": 2,
            "total": 1628,
            "created_at": "2024-05-14T09:30:00",
            "comment": "The customer asked about a window seat near the front.",
        }
    )
    assert excerpt_text(text) == (
        "reservation_id: ZFA04Y; origin: JFK; total: 1628; created_at: 2024-05-14T09:30:00"
    )


def test_a_nested_object_is_kept_in_braces_and_an_empty_one_is_left_out() -> None:
    address = {"city": "London", "postcode": "SW1A 1AA", "zip": "10001"}
    text = json.dumps({"address": address, "name": {"first": "Ada"}})
    # a string of digits alone is not kept (a zip, the last four digits of a card)
    assert excerpt_text(text) == "address: {postcode: SW1A 1AA}"


def test_a_list_of_records_is_a_table_with_a_column_per_kept_field() -> None:
    text = json.dumps(
        {
            "flights": [
                {"number": "HAT136", "status": "available", "seats": 5, "price": 214},
                {"number": "HAT039", "status": "delayed", "seats": 0},
                {"number": "HAT207", "status": "available", "price": 1190},
            ]
        }
    )
    assert excerpt_text(text) == "flights: (number price) HAT136 214 | HAT039 - | HAT207 1190"


def test_columns_follow_the_order_the_records_first_name_their_fields() -> None:
    records = [{"a": "x", "b": "B22"}, {"a": "A11", "b": "y"}]
    # "a" is named first, though "b" is the first field kept
    assert excerpt_text(json.dumps(records)) == "(a b) - B22 | A11 -"


def test_a_map_keyed_by_ids_is_a_table_keyed_by_them() -> None:
    text = json.dumps(
        {
            "payment_methods": {
                "card_7": {"id": "card_7", "source": "credit_card", "brand": "visa"},
                "gift_3": {"id": "gift_3", "source": "gift_card", "amount": 150},
            }
        }
    )
    # each record's own id is said once, as the row's key; a missing field reads "-"
    assert excerpt_text(text) == (
        f"payment_methods: ({ID_COLUMN} source amount) card_7 credit_card - | gift_3 gift_card 150"
    )


def test_a_top_level_list_of_values_keeps_the_coded_ones() -> None:
    assert excerpt_text('["NO6JO3", "maybe", 12, 4096, null]') == "[NO6JO3, 4096]"


def test_text_keeps_the_lines_that_hold_identifiers() -> None:
    text = (
        "Search results:\n"
        "  Flight HAT136 leaves at 11:00\n"
        "\n"
        "no other flights that day\n"
        "  Contact support@example.com for help  \n"
    )
    assert excerpt_text(text) == (
        "Flight HAT136 leaves at 11:00\nContact support@example.com for help"
    )


@pytest.mark.parametrize(
    "text",
    [
        "just some words, nothing to pass on",
        "{not json at all",
        '{"note": "prose only", "ok": true, "count": 3}',
        "[]",
        "",
    ],
)
def test_a_result_without_identifiers_has_no_excerpt(text: str) -> None:
    assert excerpt_text(text) is None


def test_text_that_looks_like_json_but_is_not_is_read_as_lines() -> None:
    assert excerpt_text("[ERROR] order ORD123 not found\nretry later") == (
        "[ERROR] order ORD123 not found"
    )


def test_json_nested_past_reading_is_read_as_text_not_raised() -> None:
    deep = "[" * 5000 + '"AB12"' + "]" * 5000
    assert excerpt_text(deep) in (None, deep)
    assert excerpt_text("[" * 200_000) is None


# -- properties ---------------------------------------------------------------------------

KEYS = st.one_of(
    st.sampled_from(["id", "name", "status", "user_id", "card_1", "HAT001", "ABC", "x"]),
    st.text(alphabet="abcXYZ_19-. ", max_size=8),
)
STRINGS = st.one_of(
    st.sampled_from(["economy", "HAT136", "card_1", "2024-05-20", "a b", "ABC", "ok", ""]),
    st.from_regex(r"[A-Za-z]{1,4}[0-9_.@:/-]{0,3}[A-Za-z0-9]{0,5}", fullmatch=True),
    st.text(alphabet="aZ09 _-.:@/+,;|(){}[]é", max_size=50),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-100_000, 10_000_000),
    st.floats(allow_nan=False, allow_infinity=False),
    STRINGS,
)
JSON = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=30,
)
CONTAINERS = st.one_of(st.lists(JSON, max_size=5), st.dictionaries(KEYS, JSON, max_size=5))


def coded_leaves(value: Any) -> list[str]:
    """The leaves an excerpt must keep, as text: short strings holding an identifier
    that is not a bare number, and numbers of three or more digits."""
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in coded_leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in coded_leaves(item)]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [str(value)] if sum(c.isdigit() for c in str(value)) >= 3 else []
    if len(value) <= MAX_LEAF_CHARS and any(not i.isdigit() for i in identifiers(value)):
        return [value]
    return []


@settings(max_examples=120, deadline=None)
@given(CONTAINERS)
def test_every_identifier_of_a_coded_leaf_is_in_the_excerpt(value: Any) -> None:
    excerpt = excerpt_text(json.dumps(value)) or ""
    found = identifiers(excerpt)
    for leaf in coded_leaves(value):
        assert identifiers(leaf) <= found, leaf


@settings(max_examples=120, deadline=None)
@given(CONTAINERS, st.booleans())
def test_an_excerpt_says_nothing_the_result_did_not(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    excerpt = excerpt_text(text) or ""
    for word in re.findall(r"[A-Za-z0-9_]+", excerpt):
        assert word in text or word == ID_COLUMN, word


@settings(max_examples=100, deadline=None)
@given(st.lists(STRINGS, max_size=8))
def test_a_text_excerpt_is_lines_of_the_text(lines: list[str]) -> None:
    text = "\n".join(line.replace("[", "").replace("{", "") for line in lines)
    excerpt = excerpt_text(text)
    if excerpt is not None:
        kept = excerpt.split("\n")
        assert all(line and line in text and identifiers(line) for line in kept)


# -- excerpt_unit ----------------------------------------------------------------------------


def test_a_unit_with_a_large_result_gets_a_marked_stand_in() -> None:
    history = view(agent_messages())
    found = excerpt_unit(history, 2)
    assert found is not None and found.unit == 2
    assert list(found.stand_ins) == [3]
    original = history.messages[3]
    stand_in = found.stand_ins[3]
    kept = history.counter.count_message(stand_in)
    whole = history.tokens(3)
    # the exchange stays valid: role, call id and calls as the original's
    assert (stand_in.role, stand_in.tool_call_id, stand_in.name, stand_in.tool_calls) == (
        original.role,
        original.tool_call_id,
        original.name,
        original.tool_calls,
    )
    assert stand_in.metadata == {
        "source": "crm",
        "synthetic": True,
        "excerpt": {"tool": "get_profile", "tokens": whole, "kept_tokens": kept},
    }
    header, body = stand_in.text.split("\n", 1)
    assert header == HEADER.format(kept=kept, tokens=whole)
    assert body == excerpt_text(original.text)
    assert "user_0" in body and "ORD0003" in body and "card_02" in body
    assert "Lovelace" not in body and "prose" not in body
    assert kept <= 0.75 * whole
    assert found.tokens == history.unit_tokens(2) - whole + kept
    assert "get_profile result" in found.reason and found.reason.startswith("excerpt: ")
    assert "user_0" in found.text  # the call's arguments count for identifiers too


def test_an_excerpts_identifiers_are_what_it_keeps_not_its_markers_token_counts() -> None:
    """The marker names sizes ("39 of 710 tokens"): no later step passes those on, so
    they add nothing to what the excerpt is worth."""
    history = view(agent_messages())
    found = excerpt_unit(history, 2)
    assert found is not None
    marker = found.stand_ins[3].text.split("\n", 1)[0]
    sizes = set(re.findall(r"\d+", marker))
    assert any(len(size) >= 3 for size in sizes)  # identifiers, were they read
    assert not sizes & found.identifiers
    assert found.identifiers <= identifiers(unit_text(history, 2))


def test_a_unit_without_a_tool_result_has_no_excerpt() -> None:
    history = view(agent_messages())
    assert excerpt_unit(history, 1) is None  # the task
    assert excerpt_unit(history, 3) is None  # an answer in words (too small to cut)


OPTIONS = """Here are the direct flights from JFK to SEA on May 20th that I found for you:

1. **Flight HAT069**
   - Departs at 06:00 and arrives at 12:00, in the morning as you asked
   - Economy is the cheaper cabin, and there are plenty of seats left in it
2. **Flight HAT083**
   - Departs at 01:00 and arrives at 07:00, which is rather early
   - Economy is nearly full, so it would be best to book it soon if you like it

Please let me know which of these you would like, or whether I should look further
for connecting flights later in the day, since you said you prefer not to fly early."""


def test_an_assistant_message_is_cut_to_its_lines_with_identifiers() -> None:
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Find me a flight to Seattle."},
        {"role": "assistant", "content": OPTIONS},
        {"role": "user", "content": "The first one."},
    ]
    history = view(messages)
    found = excerpt_unit(history, 2)
    assert found is not None and list(found.stand_ins) == [2]
    stand_in = found.stand_ins[2]
    whole, kept = history.tokens(2), history.counter.count_message(stand_in)
    header, body = stand_in.text.split("\n", 1)
    assert header == ASSISTANT_HEADER.format(kept=kept, tokens=whole)
    assert body.splitlines() == [
        line.strip()
        for line in OPTIONS.splitlines()
        if any(code in line for code in ("JFK", "HAT", ":00"))
    ]
    assert "Economy" not in body and "Please" not in body  # lines in words go
    assert stand_in.role == "assistant" and kept <= 0.75 * whole
    assert stand_in.metadata == {
        "synthetic": True,
        "excerpt": {"tokens": whole, "kept_tokens": kept},
    }
    assert "assistant message" in found.reason and "HAT069" in found.identifiers


def test_an_assistant_messages_tool_calls_stay_whole_in_its_excerpt() -> None:
    messages = [
        {"role": "user", "content": "Find me a flight to Seattle."},
        {**call("c1", "book", flight="HAT069"), "content": OPTIONS},
        {"role": "tool", "tool_call_id": "c1", "content": "booked"},
        {"role": "user", "content": "Thanks."},
    ]
    history = view(messages)
    found = excerpt_unit(history, 1)
    assert found is not None and list(found.stand_ins) == [1]
    assert found.stand_ins[1].tool_calls == history.messages[1].tool_calls
    assert '"flight": "HAT069"' in found.text  # the call's arguments count


def test_an_assistant_message_in_words_or_all_identifiers_is_not_cut() -> None:
    words = "I am sorry to hear that; let me look into it for you right away. " * 8
    codes = "\n".join(f"Reservation AB{n:04d} on HAT{n:03d}" for n in range(12))
    messages = [
        {"role": "user", "content": "Help."},
        {"role": "assistant", "content": words},
        {"role": "user", "content": "Which ones?"},
        {"role": "assistant", "content": codes},
        {"role": "user", "content": "Thanks."},
    ]
    history = view(messages)
    assert min(history.tokens(1), history.tokens(3)) >= 60
    assert excerpt_unit(history, 1) is None  # nothing an agent passes on
    assert excerpt_unit(history, 3) is None  # every line is: nothing to save


def test_a_tiny_result_is_not_excerpted() -> None:
    small = json.dumps({"order_id": "ORD1", "status": "pending", "note": "x" * 40})
    messages = [
        {"role": "user", "content": "Check ORD1."},
        call("c1", "get_order", order_id="ORD1"),
        {"role": "tool", "tool_call_id": "c1", "content": small},
        {"role": "user", "content": "Thanks."},
    ]
    history = view(messages)
    assert excerpt_text(small) == "order_id: ORD1"  # it would cut...
    assert history.tokens(2) < 60
    assert excerpt_unit(history, 1) is None  # ...but the marker would eat the saving


def test_a_result_that_would_not_save_a_quarter_is_not_excerpted() -> None:
    codes = json.dumps([f"AB{n:04d}" for n in range(60)])  # nothing but identifiers
    messages = [
        {"role": "user", "content": "List the codes."},
        call("c1", "list_codes"),
        {"role": "tool", "tool_call_id": "c1", "content": codes},
        {"role": "user", "content": "Thanks."},
    ]
    history = view(messages)
    assert history.tokens(2) >= 60 and excerpt_text(codes) is not None
    assert excerpt_unit(history, 1) is None


def test_the_tool_is_named_from_the_message_or_else_the_call() -> None:
    messages = agent_messages(1)
    messages[3] = {**messages[3], "role": "tool"}
    history = view(messages)
    found = excerpt_unit(history, 2)
    assert found is not None
    assert found.stand_ins[3].metadata["excerpt"]["tool"] == "get_profile"
    assert "get_profile result" in found.reason  # the record names it too


def test_a_units_excerpt_is_made_once_per_conversation_and_counter(
    counting_factory: Any,
) -> None:
    counter = counting_factory()
    conversation = Conversation(agent_messages())
    first = excerpt_unit(conversation.view(counter, 10_000), 4)
    calls = counter.calls
    again = excerpt_unit(conversation.view(counter, 5_000), 4)
    assert again is first and counter.calls == calls  # the same objects, not counted again
    # another counter counts otherwise: its own excerpt, its own numbers
    other = excerpt_unit(conversation.view(ApproxCounter(chars_per_token=2.0), 10_000), 4)
    assert first is not None and other is not None and other is not first
    assert other.tokens > first.tokens
    assert other.stand_ins[6].metadata["excerpt"] != first.stand_ins[6].metadata["excerpt"]


def test_a_unit_holding_a_stand_in_of_the_hosts_is_not_excerpted_from_memory() -> None:
    conversation = Conversation(agent_messages())
    counter = ApproxCounter()
    assert excerpt_unit(conversation.view(counter, 10_000), 2) is not None  # remembered
    history = conversation.view(counter, 10_000)
    shorter = dataclasses.replace(history.messages[3], content="[cut]")
    history._replace(3, shorter)  # as the host does when it cuts a message
    assert excerpt_unit(history, 2) is None
    assert excerpt_unit(history, 4) is not None  # the other units are as they were


# -- keep_best ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def history() -> History:
    return view(agent_messages())


def test_a_whole_unit_is_taken_when_it_fits_and_is_worth_more(history: History) -> None:
    whole = history.unit_tokens(2)
    selection, left = keep(history, [2], whole, score=100.0)
    assert 2 in selection.kept and not selection.stand_ins
    assert selection.reasons[2] == "rank 0"
    assert left == 0


def test_an_excerpt_is_taken_when_the_whole_does_not_fit(history: History) -> None:
    found = excerpt_unit(history, 2)
    assert found is not None
    room = history.unit_tokens(2) - 1
    selection, left = keep(history, [2], room)
    assert 2 in selection.kept and selection.stand_ins == found.stand_ins
    assert selection.actions[2] == "kept"
    assert selection.reasons[2] == f"rank 0; {found.reason}"
    assert left == room - found.tokens == room - cost(history, selection, [2])


def test_no_excerpt_without_coverage_or_with_excerpts_off(history: History) -> None:
    room = history.unit_tokens(2) - 1
    selection, left = keep(history, [2], room, excerpts=False)
    assert not selection.kept - set(history.must_keep) and left == room
    selection = history.selection()
    left = keep_best(history, selection, [2], room, lambda unit: 1.0, None, reason)
    assert not selection.stand_ins and left == room


def test_a_unit_is_never_kept_in_both_forms(history: History) -> None:
    found = excerpt_unit(history, 2)
    assert found is not None
    whole = history.unit_tokens(2)
    room = whole + found.tokens  # room for both forms
    selection, left = keep(history, [2], room)
    assert left == room - whole  # paid for once
    assert not selection.stand_ins and 2 in selection.kept


def test_room_left_over_restores_excerpts_whole_newest_first(history: History) -> None:
    cuts = [excerpt_unit(history, unit) for unit in (2, 4)]
    assert cuts[0] is not None and cuts[1] is not None
    extra = history.unit_tokens(4) - cuts[1].tokens
    room = cuts[0].tokens + cuts[1].tokens + extra + 5  # both excerpts, one restored
    selection, left = keep(history, [4, 2], room)
    assert {2, 4} <= selection.kept
    assert list(selection.stand_ins) == list(cuts[0].stand_ins)  # the older stays cut
    assert selection.reasons[4] == "rank -1; whole, in room left over"
    assert left == 5


def test_nothing_is_taken_at_or_below_above(history: History) -> None:
    room = 10_000
    selection, left = keep(history, PROFILE_UNITS, room, above=1e9)
    assert left == room and not selection.stand_ins
    assert selection.kept == set(history.must_keep)


@settings(max_examples=60, deadline=None)
@given(
    room=st.integers(0, 1200),
    score=st.sampled_from([0.0, 0.5, 3.0, 100.0]),
    candidates=st.lists(st.integers(2, 9), unique=True),
)
def test_the_room_is_respected_exactly(
    history: History, room: int, score: float, candidates: list[int]
) -> None:
    candidates = [unit for unit in candidates if unit not in history.must_keep]
    selection, left = keep(history, candidates, room, score=score)
    assert 0 <= left <= room
    assert room - left == cost(history, selection, candidates)
    assert selection.kept - set(history.must_keep) <= set(candidates)
    for position in selection.stand_ins:
        assert history.unit_of(position) in selection.kept


# -- end to end ------------------------------------------------------------------------------


def test_sliding_keeps_an_older_result_as_an_excerpt_when_the_budget_is_tight() -> None:
    pytest.importorskip("ctxwindow_sliding")
    if "sliding" not in {entry["name"] for entry in ctxwindow.describe_strategies()}:
        pytest.skip("the sliding strategy is not installed")
    messages = agent_messages()
    budget = 420
    window = ctxwindow.select(messages, budget, "sliding")
    assert window.tokens <= budget
    replaced = [d for d in window.record.decisions if d.action == "replaced"]
    assert replaced and all("excerpt" in d.reason for d in replaced)
    stand_ins = [m for m in window.messages if m.get("metadata", {}).get("synthetic")]
    assert stand_ins
    for stand_in in stand_ins:
        assert stand_in["role"] == "tool"
        original = messages[stand_in["metadata"]["stands_in_for"]]
        assert stand_in["tool_call_id"] == original["tool_call_id"]
        assert stand_in["content"].startswith("[excerpt: ")
    assert messages == agent_messages()  # the input is untouched


def test_best_first_never_yields_a_candidate_worth_minus_infinity() -> None:
    history = view(agent_messages(2))
    units = list(range(len(history.units)))
    never = {units[1]}

    def value(unit: int) -> float:
        return -math.inf if unit in never else 1.0

    taken = list(best_first(history, [units[1]], 10**9, value))
    assert taken == []  # alone on the heap, and still not taken
    taken = list(best_first(history, units[:3], 10**9, value))
    assert units[1] not in taken and len(taken) == 2


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # a base score: ties are common
            st.frozensets(st.integers(0, 8), max_size=4),  # the identifiers it adds
            st.integers(1, 40),  # its size
            st.integers(0, 5),  # how far its bound is above its first value
        ),
        max_size=14,
    ),
    st.integers(0, 200),
)
def test_best_first_takes_the_same_in_the_same_order_from_bounds(
    candidates: list[tuple[int, frozenset[int], int, int]], room: int
) -> None:
    """A bound only spares valuations: with values that fall as others are taken
    (identifiers covered), the candidates taken and their order are the same."""
    history = view(agent_messages(2))

    def taken(with_bound: bool) -> list[int]:
        covered: set[int] = set()

        def value(unit: int) -> float:
            score, ids, _size, _slack = candidates[unit]
            return score + len(ids - covered) / 2

        def bound(unit: int) -> float:
            score, ids, _size, slack = candidates[unit]
            return score + len(ids) / 2 + slack

        out = []
        for unit in best_first(
            history,
            range(len(candidates)),
            room,
            value,
            size=lambda unit: candidates[unit][2],
            bound=bound if with_bound else None,
        ):
            out.append(unit)
            covered.update(candidates[unit][1])
        return out

    assert taken(with_bound=True) == taken(with_bound=False)


# -- identifiers, as the excerpts and the coverage read them ----------------------------


def _identifiers_one_token_at_a_time(text: str) -> frozenset[str]:
    """The rule of kit.identifiers spelled out token by token (its former code)."""
    token = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./@:]*[A-Za-z0-9]")
    return frozenset(
        t
        for t in token.findall(text)
        if len(t) >= 3 and (t.isupper() or any(c.isdigit() or c in "_/.@" for c in t))
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "the",
                "flight",
                "HAT001",
                "card_7",
                "a.b",
                "x@y.io",
                "2024-05-01",
                "id",
                "AB",
                "LAX",
                "re-book",
                "10:30",
                "-",
                " ",
                "\n",
                "plan",
                "12",
                "1234",
                "/tmp/f.txt",
            ]
        ),
        max_size=40,
    ).map(" ".join)
)
def test_identifiers_read_each_distinct_token_as_the_rule_says(text: str) -> None:
    from ctxwindow.kit._coverage import has_identifier

    expected = _identifiers_one_token_at_a_time(text)
    assert identifiers(text) == expected
    assert has_identifier(text) == bool(expected)
