"""Bodies read in part when their history grew from one read before: always what
``orjson.loads`` gives, in part only when that is sound."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow_serve import bodies
from ctxwindow_serve.bodies import RecentBodies


def _messages(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}: some words"}
        for n in range(start, start + count)
    ]


def _dump(body: dict[str, Any], style: str = "compact") -> bytes:
    if style == "compact":
        return json.dumps(body, separators=(",", ":")).encode()
    if style == "spaced":  # Python's json default: ", " and ": "
        return json.dumps(body).encode()
    return json.dumps(body, indent=2, ensure_ascii=False).encode()


def _read_twice(
    first: bytes, second: bytes, key: str = "messages"
) -> tuple[Any, Any, RecentBodies]:
    recent = RecentBodies(lists=8, size=1 << 24)
    earlier = recent.read(first, key)
    earlier.remember()
    return earlier.body, recent.read(second, key).body, recent


def _in_part(recent: RecentBodies, raw: bytes, key: str = "messages") -> bool:
    """Whether ``raw`` is read in part (a remembered history it grew from)."""
    start = bodies._array_start(raw, key)
    return start is not None and recent._longest_known(raw, key, start) is not None


@pytest.mark.parametrize("style", ["compact", "spaced", "indented"])
def test_a_grown_history_is_read_in_part_as_the_very_objects(style):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"required": ["a"]}}}]
    before = {"model": "m", "messages": _messages(40), "tools": tools, "stream": True}
    after = {**before, "messages": _messages(43)}
    first, second = _dump(before, style), _dump(after, style)
    earlier, later, recent = _read_twice(first, second)
    assert _in_part(recent, second)
    assert later == orjson.loads(second)
    assert list(later) == list(orjson.loads(second))  # the keys in their order
    assert all(a is b for a, b in zip(earlier["messages"], later["messages"][:40], strict=False))


def test_the_history_as_the_first_or_the_last_key():
    for order in (("messages", "model"), ("model", "messages")):
        before = {name: (_messages(40) if name == "messages" else "m") for name in order}
        after = {**before, "messages": _messages(41)}
        _, later, recent = _read_twice(_dump(before), _dump(after))
        assert _in_part(recent, _dump(after))
        assert later == after and list(later) == list(order)


def test_a_request_that_adds_nothing_is_read_in_part_too():
    raw = _dump({"model": "m", "messages": _messages(40)})
    _, later, recent = _read_twice(raw, raw)
    assert _in_part(recent, raw)
    assert later == orjson.loads(raw)


def test_an_edited_old_message_is_read_whole():
    before = {"model": "m", "messages": _messages(40)}
    edited = _messages(41)
    edited[3]["content"] = "changed"
    _, later, recent = _read_twice(_dump(before), _dump({**before, "messages": edited}))
    assert not _in_part(recent, _dump({**before, "messages": edited}))
    assert later["messages"][3]["content"] == "changed"


@pytest.mark.parametrize(
    ("name", "tail"),
    [
        ("a trailing comma", b',],"stream":true}'),
        ("a duplicate history key after it", b'],"messages":[1],"stream":true}'),
        ("the same, spelt with an escape", b'],"\\u006dessages":null,"stream":true}'),
        ("a duplicate of a key before it", b'],"model":"n","stream":true}'),
        ("the sentinel's key in the tail", b'],"stream":true,"\\u0000":1}'),
        ("two values where one goes", b'],"stream":true} {}'),
        ("an unclosed array", b',{"role":"user","content":"x"},"stream":true}'),
        ("no comma between items", b'{"role":"user","content":"x"}],"stream":true}'),
        ("the last item grown in place", b'11],"stream":true}'),
    ],
)
def test_odd_growths_give_what_orjson_gives(name, tail):
    before = _dump({"model": "m", "messages": [*_messages(40), 5], "stream": True})
    second = before[: before.rindex(b"]")] + tail
    recent = RecentBodies(lists=8, size=1 << 24)
    recent.read(before, "messages").remember()
    try:
        expected: Any = orjson.loads(second)
    except orjson.JSONDecodeError:
        with pytest.raises(orjson.JSONDecodeError):
            recent.read(second, "messages")
    else:
        assert recent.read(second, "messages").body == expected


def test_a_nested_history_key_before_the_top_levels_is_not_taken_for_it():
    body = {"metadata": {"messages": [1, 2]}, "messages": _messages(40), "model": "m"}
    grown = {**body, "messages": _messages(42)}
    _, later, _ = _read_twice(_dump(body), _dump(grown))
    assert later == grown


def test_short_histories_and_bounds():
    recent = RecentBodies(lists=2, size=1 << 24)
    short = recent.read(_dump({"messages": _messages(3)}), "messages")
    short.remember()
    assert len(recent) == 0  # too short to be worth it
    for start in range(3):  # three conversations, two kept: the oldest forgotten
        recent.read(_dump({"messages": _messages(40, start * 100)}), "messages").remember()
    assert len(recent) == 2
    first = _dump({"messages": _messages(41, 0)})
    assert not _in_part(recent, first)
    assert _in_part(recent, _dump({"messages": _messages(41, 200)}))
    small = RecentBodies(lists=8, size=len(_dump({"messages": _messages(40)})) + 10)
    for start in range(2):
        small.read(_dump({"messages": _messages(40, start * 100)}), "messages").remember()
    assert len(small) == 1  # by bytes


def test_a_grown_history_replaces_the_one_it_grew_from():
    recent = RecentBodies(lists=8, size=1 << 24)
    for count in (40, 41, 42):
        recent.read(_dump({"model": "m", "messages": _messages(count)}), "messages").remember()
    assert len(recent) == 1


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_KEYS = st.dictionaries(
    st.text(max_size=6).filter(lambda key: key not in ("messages", "\x00")), _VALUES, max_size=3
)


@settings(max_examples=150, deadline=None)
@given(
    head=_KEYS,
    tail=_KEYS,
    old=st.lists(_VALUES, min_size=32, max_size=40),
    new=st.lists(_VALUES, max_size=3),
    style=st.sampled_from(["compact", "spaced", "indented"]),
    later_tail=st.none() | _KEYS,
)
def test_any_grown_body_reads_as_orjson_reads_it(head, tail, old, new, style, later_tail):
    old = [{"role": "user", "content": "padding " * 4, "extra": item} for item in old]
    new = [{"role": "user", "content": "more", "extra": item} for item in new]
    first = _dump({**head, "messages": old, **tail}, style)
    second = _dump({**head, "messages": old + new, **(later_tail or tail)}, style)
    _, later, _ = _read_twice(first, second)
    expected = orjson.loads(second)
    assert later == expected and list(later) == list(expected)


def _unwanted(model: Any) -> bool:
    return False


@pytest.mark.parametrize(
    "body",
    [
        {"messages": _messages(40), "model": "other", "tools": [], "stream": False},
        {"model": "other", "messages": _messages(40), "stop": ["x"]},
        {"messages": _messages(40), "model": "first", "tools": [{"a": ["b"]}], "model ": 1},
        {"model": "first", "messages": _messages(40), "model": "other"},  # noqa: F601
        {"model": "other", "messages": [{"role": "user", "content": "a\nb \\ c"}] * 40},
    ],
)
def test_a_history_not_wanted_is_not_read(body):
    raw = _dump(body)
    seen: list[Any] = []
    reading = RecentBodies(lists=8, size=1 << 24).read(
        raw, "messages", lambda model: bool(seen.append(model))
    )
    assert not reading.whole
    assert reading.body == {"model": orjson.loads(raw)["model"]}
    assert seen == [reading.body["model"]]


_NESTED = [{"role": "model", "content": "x", "input": {"model": "nested"}}] * 40


@pytest.mark.parametrize("body", [{"messages": _NESTED}, {"messages": _NESTED, "model": "m"}])
def test_a_model_only_nested_or_as_a_value_reads_the_body_whole(body):
    raw = _dump(body)
    seen: list[Any] = []
    reading = RecentBodies(lists=8, size=1 << 24).read(
        raw, "messages", lambda model: seen.append(model) is None
    )
    assert reading.whole and reading.body == orjson.loads(raw)
    assert seen == (["m"] if "model" in body else [])  # not asked: the model not found


def test_a_model_spelt_with_escapes_after_the_history_is_the_one_read():
    head = _dump({"model": "other", "messages": _messages(40)})
    raw = head[:-1] + b',"\\u006dodel":"m"}'
    assert orjson.loads(raw)["model"] == "m"
    seen: list[Any] = []
    reading = RecentBodies(lists=8, size=1 << 24).read(
        raw, "messages", lambda model: seen.append(model) is not None
    )
    assert reading.body == {"model": "m"} or reading.body == orjson.loads(raw)
    assert seen in ([], ["m"])


def test_a_history_wanted_is_read_whole():
    raw = _dump({"model": "m", "messages": _messages(40)})
    reading = RecentBodies(lists=8, size=1 << 24).read(raw, "messages", lambda model: True)
    assert reading.whole and reading.body == orjson.loads(raw)


def test_bad_json_is_still_refused_when_its_model_is_wanted():
    with pytest.raises(orjson.JSONDecodeError):
        RecentBodies(lists=8, size=1 << 24).read(b'{"model":"x","messages":[}', "messages")


_PAIRS = st.lists(
    st.tuples(st.sampled_from(["model", "stream", "tools", "x"]), _VALUES), max_size=3
)


def _object(head: list[tuple[str, Any]], history: list[Any], tail: list[tuple[str, Any]]) -> bytes:
    """A body with these keys in this order, duplicates kept (as a client may send)."""
    pairs = [*head, ("messages", history), *tail]
    return b"{" + b",".join(orjson.dumps(k) + b":" + orjson.dumps(v) for k, v in pairs) + b"}"


@settings(max_examples=150, deadline=None)
@given(head=_PAIRS, tail=_PAIRS, history=st.lists(_VALUES, min_size=1, max_size=40))
def test_the_model_found_alone_is_the_one_orjson_reads(head, tail, history):
    raw = _object(head, [{"role": "model", "extra": item} for item in history], tail)
    expected = orjson.loads(raw)
    reading = RecentBodies(lists=8, size=1 << 24).read(raw, "messages", _unwanted)
    if reading.whole:
        assert reading.body == expected
    else:
        assert reading.body == {"model": expected["model"]}
