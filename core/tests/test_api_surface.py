"""The public objects behave as Python objects are expected to: strategies, windowers
and conversations pickle and copy, option values are a strategy's own, a plain
strategy's common options are checked, and a conversation's branch and repr say what
they should."""

from __future__ import annotations

import copy
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from typing import Any, ClassVar

import pytest

import ctxwindow
from ctxwindow import (
    BaseStrategy,
    Conversation,
    History,
    InvalidOption,
    Message,
    Option,
    Selection,
    Windower,
)
from ctxwindow.testing.strategies import Newest

CHAT = [
    {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 30}
    for i in range(21)
]


class Listed(BaseStrategy):
    """Newest, with options whose values are lists (as summarize's fallback is)."""

    name = "listed"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option("order", list, ["a", "b"], "A list option."),
        Option("tables", (list, tuple), [{"x": 1}], "A list of tables."),
    )

    def choose(self, history: History) -> Selection:
        return Newest().choose(history)


# -- pickling and copying ---------------------------------------------------------------
def test_a_strategy_pickles_and_deep_copies_as_its_class_and_options() -> None:
    strategy = Newest(orphans="drop", time_limit=5)
    for twin in (pickle.loads(pickle.dumps(strategy)), copy.deepcopy(strategy)):
        assert type(twin) is Newest and twin is not strategy
        assert dict(twin.options) == dict(strategy.options)
        assert twin.options["orphans"] == "drop" and twin.options["time_limit"] == 5.0
        assert twin.select(CHAT, 300).messages == strategy.select(CHAT, 300).messages


def test_a_shallow_copy_of_a_strategy_shares_its_state() -> None:
    strategy = Listed()
    twin = copy.copy(strategy)
    assert twin is not strategy and twin.options is strategy.options


def test_a_windower_pickles_and_deep_copies_as_its_configuration() -> None:
    windower = Windower(Newest(), 300, "approx", time_limit=4, on_timeout="recent")
    expected = windower.select(CHAT).messages
    for twin in (pickle.loads(pickle.dumps(windower)), copy.deepcopy(windower)):
        assert twin is not windower and twin.strategy is not windower.strategy
        assert repr(twin) == repr(windower)
        assert twin.common_option("time_limit") == 4.0
        assert twin.common_option("on_timeout") == "recent"
        assert twin.select(CHAT).messages == expected


def test_a_shallow_copy_of_a_windower_shares_its_strategy() -> None:
    """What cached_windower hands out: the strategy (and its state) is select's."""
    windower = Windower(Newest(), 300)
    twin = copy.copy(windower)
    assert twin.strategy is windower.strategy and twin.counter is windower.counter
    twin.budget = 100
    assert windower.budget == 300


def _window_pickles() -> bool:
    try:
        pickle.dumps(Windower(Newest(), 300).select(CHAT))
    except Exception:
        return False
    return True


@pytest.mark.slow  # two processes that import ctxwindow: about 4 s
def test_windower_select_runs_in_worker_processes() -> None:
    """pool.map(windower.select, ...): the windower goes to each worker pickled (spawned:
    nothing inherited), and the windows come back."""
    windower = Windower(Newest(), 300)
    histories = [CHAT[:11], CHAT]
    expected = [windower.select(history).messages for history in histories]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert list(pool.map(repr, [windower, windower])) == [repr(windower)] * 2
        if not _window_pickles():  # pragma: no cover - Window's own part of the fix
            pytest.xfail("a Window does not pickle yet (_window.py)")
        windows = list(pool.map(windower.select, histories))
    assert [window.messages for window in windows] == expected


def test_a_conversation_pickles_as_an_independent_one() -> None:
    conversation = Conversation(CHAT[:5])
    for twin in (pickle.loads(pickle.dumps(conversation)), copy.deepcopy(conversation)):
        assert twin.originals == conversation.originals
        twin.append({"role": "assistant", "content": "only in the copy"})
        assert len(twin) == 6 and len(conversation) == 5


def test_a_shallow_copy_of_a_conversation_does_not_append_to_the_original() -> None:
    """It used to share the original's lists: appending to the copy appended to both."""
    conversation = Conversation(CHAT[:5])
    twin = copy.copy(conversation)
    twin.append({"role": "assistant", "content": "only in the copy"})
    assert len(conversation) == 5 and len(twin) == 6
    assert all(
        a is b for a, b in zip(twin.originals[:5], conversation.originals, strict=True)
    )  # shallow
    assert Windower(Newest(), 10_000).select(conversation).messages == CHAT[:5]


def test_a_conversation_of_messages_pickles() -> None:
    messages = [Message("user", "hi"), Message("assistant", "hello")]
    twin = pickle.loads(pickle.dumps(Conversation(messages)))
    assert twin.originals == messages


# -- option values --------------------------------------------------------------------
def test_a_list_default_is_each_strategys_own() -> None:
    first = Listed()
    first.options["order"].remove("a")
    first.options["tables"][0]["x"] = 2
    second = Listed()
    assert second.options["order"] == ["a", "b"]
    assert second.options["tables"] == [{"x": 1}]


def test_a_described_default_is_a_copy() -> None:
    option = Listed.option_specs[0]
    option.describe()["default"].append("c")
    assert option.default == ["a", "b"]
    assert Listed().options["order"] == ["a", "b"]


def test_a_given_list_is_copied() -> None:
    order = ["b", "a"]
    tables = ({"x": 3},)
    strategy = Listed(order=order, tables=tables)
    order.append("c")
    tables[0]["x"] = 4
    assert strategy.options["order"] == ["b", "a"]
    assert strategy.options["tables"] == ({"x": 3},)


# -- a plain strategy's common options ---------------------------------------------------
class Plain:
    """A strategy written to the protocol, not on BaseStrategy."""

    name = "plain"

    def __init__(self, **options: Any) -> None:
        self.options = options

    def choose(self, history: History) -> Selection:
        return Newest().choose(history)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"time_limit": "soon"}, r"'time_limit' expects float \| None, got str 'soon'"),
        ({"time_limit": -1.0}, r"'time_limit' must be a positive, finite number"),
        ({"time_limit": 1, "on_timeout": "ignore"}, r"'on_timeout' must be one of 'raise', "),
        ({"orphans": "keep"}, r"'orphans' must be one of 'raise', 'drop', got 'keep'"),
        ({"oversize": "shrink"}, r"'oversize' must be one of 'cut', 'truncate', 'raise'"),
        ({"task_statement": "no"}, r"'task_statement' expects bool, got str 'no'"),
    ],
)
def test_a_plain_strategys_common_options_are_checked(options: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidOption, match=r"^strategy 'plain': option " + says):
        Windower(Plain(**options), 100)


def test_a_plain_strategys_good_common_options_work() -> None:
    windower = Windower(Plain(time_limit=2, on_timeout="recent", task_statement=False), 300)
    assert windower.common_option("time_limit") == 2
    assert windower.select(CHAT).messages == Windower(Newest(), 300).select(CHAT).messages
    Windower(Plain(time_limit=None, orphans=None), 300)  # None: the default


# -- Conversation ---------------------------------------------------------------------
def test_branch_counts_a_negative_position_from_the_end() -> None:
    conversation = Conversation(CHAT[:6])
    assert conversation.branch(-1).originals == CHAT[:5]
    assert conversation.branch(-6).originals == []
    assert conversation.branch(99).originals == CHAT[:6]


@pytest.mark.parametrize("position", ["3", None, 2.0, True])
def test_branch_refuses_a_position_that_is_no_int(position: Any) -> None:
    with pytest.raises(TypeError, match=r"a position is a message's index, an int"):
        Conversation(CHAT[:6]).branch(position)


def test_branch_refuses_a_negative_position_before_the_start() -> None:
    with pytest.raises(IndexError, match=r"holds 6 messages, so a negative position is -1 to -6"):
        Conversation(CHAT[:6]).branch(-7)


def test_a_conversations_repr_says_its_size_not_its_contents() -> None:
    secret = [{"role": "user", "content": "my password is hunter2"}]
    assert repr(Conversation(secret)) == "Conversation(1 message, 1 unit)"
    assert repr(Conversation(CHAT[:6])) == "Conversation(6 messages, 6 units)"
    assert repr(Conversation()) == "Conversation(0 messages, 0 units)"


def test_the_literal_types_are_exported() -> None:
    from ctxwindow._messages import Role
    from ctxwindow._window import Action

    assert ctxwindow.Action is Action and ctxwindow.Role is Role
