"""Recognising a remembered history costs what the visit's list adds, not the number of
histories remembered: a server remembers a thousand chats that open with one system
prompt, and each visit compared with every one of them cost milliseconds.

Every test counts comparisons (calls of ``starts_with`` and ``shared_prefix``, items
keyed), never time, and checks that what is recognised reads as a fresh read would.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

import ctxwindow
import ctxwindow._recent as recent_module
from ctxwindow import Conversation
from ctxwindow._recent import RecentHistories
from ctxwindow.kit import _prefixes
from ctxwindow.kit._prefixes import CHECKED, INDEXED_FROM, TRIED, RecentLists

SYSTEM = {"role": "system", "content": "You are the support bot of ACME. " + "Be kind. " * 50}
COUNTER = ctxwindow.ApproxCounter()
MANY = 1_000


class Held:
    """A remembered list, as the core's entries hold one."""

    def __init__(self, originals: list[Any]) -> None:
        self.originals, self.contents = originals, None


def chat(user: int, turns: int = 20, opening: list[dict[str, Any]] | None = None) -> list[Any]:
    """One user's chat: the shared system prompt (rebuilt, as from JSON), then turns."""
    out: list[Any] = [dict(SYSTEM), *copy.deepcopy(opening or [])]
    for turn in range(turns):
        out.append({"role": "user", "content": f"user {user} asks {turn} " + "word " * 5})
        out.append({"role": "assistant", "content": f"to {user}: answer {turn} " + "so " * 5})
    return out


class Calls:
    """Calls of the recognition's comparisons, counted where _recent calls them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.starts_with = self.shared_prefix = 0
        for name in ("starts_with", "shared_prefix"):
            monkeypatch.setattr(recent_module, name, self._counted(name))

    def _counted(self, name: str) -> Callable[..., Any]:
        real = getattr(recent_module, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            setattr(self, name, getattr(self, name) + 1)
            return real(*args, **kwargs)

        return counted


def keys_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many items each look keys (:func:`_prefixes.item_keys`), appended as it goes."""
    keyed: list[int] = []
    keys = _prefixes.item_keys

    def counted(items: Any) -> Any:
        keyed.append(len(items))
        return keys(items)

    monkeypatch.setattr(_prefixes, "item_keys", counted)
    return keyed


def remembering(histories: list[list[Any]], counter: Any = COUNTER) -> RecentHistories:
    """A process's remembered histories, sized as ``ctxwindow serve`` sizes them, having
    read each of ``histories``."""
    recent = RecentHistories()
    recent.remembered = RecentLists(lists=1_024, items=1_024_000)
    for history in histories:
        seen(recent, history, counter)
    return recent


def seen(recent: RecentHistories, history: list[Any], counter: Any = COUNTER) -> Conversation:
    return recent.view(history, counter, 2_000, None, task_statement=True).conversation


def fresh_portrait(conversation: Conversation, history: list[Any]) -> bool:
    """Whether ``conversation`` reads ``history`` as a fresh Conversation does."""
    mine, want = conversation.view(COUNTER, 2_000), Conversation(history).view(COUNTER, 2_000)
    return (
        list(mine.messages) == list(want.messages)
        and [(u.start, u.stop) for u in mine.units] == [(u.start, u.stop) for u in want.units]
        and mine.total_tokens == want.total_tokens
    )


@pytest.fixture(scope="module")
def many() -> list[list[Any]]:
    return [chat(user) for user in range(MANY)]


def test_a_new_chat_among_a_thousand_sharing_its_system_prompt_is_compared_with_none(
    many: list[list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    recent = remembering(many)
    calls = Calls(monkeypatch)
    for user in range(MANY, MANY + 5):
        new = chat(user)
        conversation = seen(recent, new)
        assert conversation.branched_from is None  # read whole, as it must be
        assert fresh_portrait(conversation, new)
    # each compared with no remembered chat: they share the system prompt alone
    assert (calls.starts_with, calls.shared_prefix) == (0, 0)
    assert len(recent) == MANY + 5


@pytest.mark.parametrize("rebuilt", [False, True], ids=["same objects", "rebuilt"])
def test_a_chat_that_grew_among_a_thousand_is_found_first_and_reads_its_new_messages(
    many: list[list[Any]], monkeypatch: pytest.MonkeyPatch, counting: Any, rebuilt: bool
) -> None:
    recent = remembering(many, counting)
    calls = Calls(monkeypatch)
    for user in (0, 500, MANY - 1):
        grown = [*many[user], {"role": "user", "content": f"user {user} again"}]
        grown = copy.deepcopy(grown) if rebuilt else grown
        read = counting.calls
        conversation = seen(recent, grown, counting)
        assert counting.calls - read == 1  # the new message alone
        assert fresh_portrait(conversation, grown)
    assert (calls.starts_with, calls.shared_prefix) == (3, 0)  # its own history, once
    assert len(recent) == MANY


def test_a_chat_that_parts_near_its_end_among_a_thousand_is_a_branch_of_its_own(
    many: list[list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    recent = remembering(many)
    remembered = {id(seen(recent, history)) for history in many[:3]}
    calls = Calls(monkeypatch)
    for user in range(3):
        history = many[user]
        again = [*history[:-1], {"role": "assistant", "content": f"to {user}: better"}]
        branch = seen(recent, copy.deepcopy(again))
        origin = branch.branched_from
        assert origin is not None and id(origin.parent) in remembered
        assert origin.messages == len(history) - 1
        assert origin.parent.originals[:5] == history[:5]  # this user's, not another's
        assert fresh_portrait(branch, again)
    assert calls.shared_prefix == 3  # one each: the history it parts from
    assert calls.starts_with <= 3


def test_chats_sharing_a_long_opening_are_compared_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forty messages every chat opens with (examples in the prompt): a new chat shares
    them with each remembered one and is read as a branch of one (what it shares is not
    read again), after at most TRIED comparisons however many are remembered."""
    opening = chat(-1, turns=INDEXED_FROM // 2 + 4)[1:]
    recent = remembering([chat(user, turns=5, opening=opening) for user in range(300)])
    calls = Calls(monkeypatch)
    new = chat(300, turns=5, opening=opening)
    branch = seen(recent, new)
    assert branch.branched_from is not None
    assert branch.branched_from.messages >= INDEXED_FROM
    assert fresh_portrait(branch, new)
    assert calls.shared_prefix <= TRIED
    assert calls.starts_with <= TRIED


def test_a_long_chat_that_parts_near_its_end_is_found_among_chats_that_open_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past CHECKED messages, a list is looked up at an anchor deeper in (a power of
    two before its newest CHECKED): chats that share a long opening but part before
    that anchor are not compared with it."""
    opening = chat(-1, turns=20)[1:]  # forty messages every chat opens with
    histories = [chat(user, turns=CHECKED // 2 + 40, opening=opening) for user in range(60)]
    recent = remembering(histories)
    calls = Calls(monkeypatch)
    mine = histories[42]
    again = [*copy.deepcopy(mine[:-3]), {"role": "user", "content": "asked otherwise"}]
    branch = seen(recent, again)
    assert branch.branched_from is not None
    assert branch.branched_from.messages == len(mine) - 3
    assert fresh_portrait(branch, again)
    assert calls.shared_prefix == 1


def test_a_list_that_grew_is_looked_up_at_its_new_items_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The keys read to find a list that grew: none when it holds the remembered list's
    very objects; its opening and its newest items when it was rebuilt."""

    lists: RecentLists[Held] = RecentLists(lists=2_000, items=10**7)
    held = [Held(chat(user)) for user in range(MANY)]
    for entry in held:
        lists.remember(entry)
    keyed = keys_read(monkeypatch)
    mine = held[123].originals
    grown = [*mine, *chat(123, turns=2)[1:]]
    assert next(lists.candidates(grown)) is held[123]
    assert keyed == []
    assert next(lists.candidates(copy.deepcopy(grown))) is held[123]
    assert sum(keyed) <= INDEXED_FROM + 2 * 5
    keyed.clear()
    assert list(lists.candidates(chat(MANY))) == []  # a new one: each of its items once
    assert sum(keyed) <= INDEXED_FROM + len(chat(MANY))


def test_a_list_whose_item_near_its_end_was_stood_in_for_is_keyed_at_none_of_its_items(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A list of the remembered one's very objects but one near its end (a tool result a
    pipeline's clearing stage stood a stub in for, turn after turn), grown by a message:
    the list that ends with its very objects is offered, and once refused no other is
    looked for by value (each item keyed, the whole history a turn); it reads as a
    branch of that list, as a fresh read would."""
    history = chat(MANY + 7, turns=CHECKED)
    recent = remembering([chat(user) for user in range(50)] + [history])
    keyed = keys_read(monkeypatch)
    calls = Calls(monkeypatch)
    stood_in = [*history, {"role": "user", "content": "and now?"}]
    stood_in[-4] = {**history[-3], "content": "[answer cleared]"}
    branch = seen(recent, stood_in)
    assert branch.branched_from is not None
    assert branch.branched_from.messages == len(history) - 3
    assert fresh_portrait(branch, stood_in)
    assert calls.starts_with == 1  # the list that ends with its very objects, refused
    # its opening's and anchors' keys (and the branch's, remembered), not every item's
    assert sum(keyed) <= 2 * INDEXED_FROM + 2 * len(stood_in).bit_length()


def test_a_list_refused_by_another_of_its_objects_and_length_grows_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pipeline's stages handed lists, turn after turn: a stage's input, and a clearing
    stage's window of it (the same objects but a few stand-ins far back, the same first
    and last items), each read by a nested visit. The list of the input's length that
    ends with its very objects may be the window's, remembered last: the input's own,
    of that length too, is tried next and grown, not the input read as a branch of one
    or the other each turn (a copy of the history each). The window's list, refused by
    the input's grown one, is read as a branch of its own last one, as before: a
    shorter list is not offered (read earlier, it may predate an older message edited in
    place, which a list read whole since holds as it is now). Each reads as a fresh read
    would."""
    recent = RecentHistories()
    history = chat(7, turns=MANY)

    def cleared(items: list[Any]) -> list[Any]:
        return [
            {**item, "content": "[cleared]"} if 40 <= at < 60 and at % 2 else item
            for at, item in enumerate(items)
        ]

    def nested(items: list[Any]) -> Conversation:
        view = recent.view(items, COUNTER, 2_000, None, task_statement=True, nested=True)
        return view.conversation

    stage_input, stage_window = nested(history), nested(cleared(history))
    branched: list[Conversation] = []
    branch = Conversation.branch

    def counted(self: Conversation, *args: Any, **kwargs: Any) -> Any:
        branched.append(self)
        return branch(self, *args, **kwargs)

    monkeypatch.setattr(Conversation, "branch", counted)
    for turn in range(5):
        history = [*history, {"role": "user", "content": f"and {turn}?"}]
        assert nested(history) is stage_input
        window = nested(cleared(history))
        assert branched[-1] is stage_window
        stage_window = window
        assert fresh_portrait(stage_input, history)
        assert fresh_portrait(stage_window, cleared(history))
    assert len(branched) == 5


def test_the_index_follows_what_is_remembered_and_forgotten() -> None:
    lists: RecentLists[Held] = RecentLists(lists=50, items=10**6)
    held = [Held(chat(user, turns=user % 20)) for user in range(120)]  # some short
    for entry in held:
        lists.remember(entry)
    for entry in held[-10:]:
        entry.originals.append({"role": "user", "content": "more"})
        lists.remember(entry)
    lists.replace(held[-1], Held(chat(-1)))
    lists.bound(20, 10**6)

    def consistent() -> None:
        assert set(lists._keys) == set(lists._entries)
        assert lists._total == sum(len(e.originals) for e in lists._entries.values())
        indexed = [k for k in lists._keys.values() if k.signature is not None]
        assert sum(map(len, lists._ends.values())) == len(indexed)
        assert sum(map(len, lists._lasts.values())) == len(indexed)
        assert sum(map(len, lists._anchored.values())) == len(indexed)
        assert sum(lists._firsts.values()) == len(indexed)
        assert sum(lists._signatures.values()) == len(indexed)
        assert set(lists._short) == {key for key, k in lists._keys.items() if k.signature is None}

    consistent()
    assert len(lists) == 20
    for entry in held[-9:-1]:
        assert next(lists.candidates([*entry.originals, SYSTEM])) is entry
    lists.clear()
    consistent()
    assert len(lists) == 0 and not lists._ends and not lists._firsts and not lists._signatures


def test_a_new_history_is_looked_up_at_none_of_its_items(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold call's history opens unlike any remembered one: it is looked up by its
    opening's signature alone, not item by item from its end (a pass over 10,000 items
    in Python doubled a cold visit)."""
    lists: RecentLists[Held] = RecentLists(64, 10**7)
    for number in range(20):
        lists.remember(Held(chat(number)))
    looked: list[int] = []
    ending = RecentLists._ending

    def counting(self: Any, length: int, *args: Any) -> Any:
        looked.append(length)
        return ending(self, length, *args)

    monkeypatch.setattr(RecentLists, "_ending", counting)
    new = [{"role": "user", "content": f"a history like no other, {n}"} for n in range(5_000)]
    assert list(lists.candidates(new)) == []
    assert looked == []
