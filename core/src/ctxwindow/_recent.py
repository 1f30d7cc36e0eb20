"""Histories read by earlier visits, recognised by content, so that a visit on a plain
list (``ctxwindow.select`` again and again as a chat grows, or a Windower given the
list each turn) pays for the new messages only, as a :class:`~ctxwindow.Conversation`
does.

A list that starts with a remembered history (see :mod:`ctxwindow.kit._prefixes`: equal
messages, and the same ``content`` in the newest messages, the system, developer and
pinned ones and the task statement) grows that history's Conversation by what it adds. A
list that parts from a remembered history only among its newest messages (a tool result
a pipeline's stage cleared, a reply taken back, a message edited) is read into a
:meth:`~ctxwindow.Conversation.branch` of it: what the two share is not read again, and
strategies' per-conversation state starts from the history's. Anything else is read
whole, and remembered in turn. An older message's dict edited in place is not seen:
replace it with a new dict instead, as with a Conversation. Bounded and thread-safe as
RecentLists is; the growth and the view hold the Conversation's own lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxwindow._history import Conversation, History, _content_of, _contents, _dict_contents
from ctxwindow._messages import check_message_list
from ctxwindow._tokens import TokenCounter
from ctxwindow.errors import InvalidOption
from ctxwindow.kit._prefixes import (
    ITEMS_KEPT,
    LISTS_KEPT,
    REMEMBER_FROM,
    RecentLists,
    shared_prefix,
    starts_with,
)


class _Entry:
    """A remembered history: its Conversation, whose list of each message's ``content``
    as read is what a caller's list is compared with (None when every message is a
    ctxwindow Message, which cannot change in place), and whether a nested visit read
    it (a pipeline stage's input)."""

    __slots__ = ("conversation", "nested")

    def __init__(self, conversation: Conversation, nested: bool = False) -> None:
        self.conversation = conversation
        self.nested = nested

    @property
    def originals(self) -> Sequence[Any]:
        return self.conversation._originals

    @property
    def contents(self) -> list[Any] | None:
        conversation = self.conversation
        return None if conversation.all_messages else conversation._contents


class RecentHistories:
    """The histories visits on plain lists have read (see the module docstring)."""

    def __init__(self) -> None:
        self.remembered: RecentLists[_Entry] = RecentLists()

    def view(
        self,
        messages: object,
        counter: TokenCounter,
        budget: int,
        query: str | None,
        *,
        task_statement: bool,
        nested: bool = False,
    ) -> History:
        """The visit's view of ``messages``: of a remembered history grown by what is new,
        else of the whole list read now. The view's originals are the objects passed.

        ``nested``: a visit nested in another's (a pipeline stage's), whose list parts
        near its end from the caller's (a result the host cut anew on each request) as
        much as from the stage's last list: it is read as a branch of a list a nested
        visit read first, and the branch is remembered beside the caller's list, not in
        its place (each would otherwise be read as a branch of the other on every turn,
        and the strategies' states kept for either would never be found)."""
        entries = check_message_list(messages)
        given: list[Any] = entries if isinstance(entries, list) else list(entries)
        remember = len(given) >= REMEMBER_FROM
        for entry in self.remembered.candidates(given) if remember else ():
            conversation = entry.conversation
            with conversation._lock:  # held until the view: no other visit grows it past
                checked = conversation.checked_always
                if not starts_with(
                    given, entry, _content_of, checked, contents_of=_contents, raw_of=_dict_contents
                ):
                    continue
                self._grow(entry, given[len(conversation) :])
                history = conversation.view(
                    counter, budget, query, task_statement=task_statement, originals=given
                )
                # under the lock: no other visit's comparison grows it for the moment,
                # so its keys are read at its length (see RecentLists.remember)
                self.remembered.remember(entry)
            return history
        near = self._branch(given, nested) if remember else None
        conversation = Conversation(given) if near is None else near[1]
        # the view first, then the history is published: once other callers can find
        # it, one may grow it (under its lock) before this visit would take its view
        history = conversation.view(
            counter, budget, query, task_statement=task_statement, originals=given
        )
        if near is not None and near[0].nested == nested:
            self.remembered.replace(near[0], _Entry(conversation, nested))
        elif remember:
            self.remembered.remember(_Entry(conversation, nested))
        return history

    def _branch(self, given: list[Any], nested: bool) -> tuple[_Entry, Conversation] | None:
        """``given`` read into a branch of the remembered history it shares all but
        the newest messages with, and that history's entry (for the caller to remember
        the branch in its place), or None if there is none. Those read by visits
        nested as this one is (or not) are tried first."""
        near = self.remembered.near(given)
        near.sort(key=lambda entry: entry.nested != nested)  # stable: longest first still
        for entry in near:
            conversation = entry.conversation
            with conversation._lock:
                checked = conversation.checked_always
                cut = shared_prefix(given, entry, _content_of, checked, contents_of=_contents)
                if cut < REMEMBER_FROM:
                    continue
                # the caller's objects in place of the equal ones read before (a list
                # that shares a prefix by value, rebuilt from JSON, or an older list's):
                # the next visit compares this list with the branch by identity
                branch = conversation.branch(cut, originals=given)
            branch.extend(given[len(branch) :])
            return entry, branch
        return None

    @staticmethod
    def _grow(entry: _Entry, new: list[Any]) -> None:
        """Read what the caller's list adds to the entry's history (all of it, or none if
        a message is invalid, which raises InvalidMessage naming its position)."""
        if new:  # the entry's contents are the conversation's: grown too
            entry.conversation.extend(new)

    def clear(self) -> None:
        """Forget every remembered history."""
        self.remembered.clear()

    def __len__(self) -> int:
        return len(self.remembered)


#: The process's remembered histories, used by every visit on a plain list.
RECENT = RecentHistories()


def remember_histories(lists: int = LISTS_KEPT, items: int = ITEMS_KEPT) -> tuple[int, int]:
    """Bound the histories this process remembers for visits on plain lists (and gives
    back the bounds it had): at most ``lists`` histories holding ``items`` messages in
    all, the least recently used forgotten first. The defaults suit an app holding a
    few conversations; a server windowing many users' chats at once (``ctxwindow
    serve``) wants one list per live conversation (and one more per stage of a
    ``pipeline`` handed a list), or each request past the bound is read whole again.
    Memory: the remembered messages stay alive (references, no copies)."""
    for name, value in (("lists", lists), ("items", items)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidOption(
                f"remember_histories: {name} must be a whole number >= 0, got {value!r}"
            )
    before = RECENT.remembered.bounds
    RECENT.remembered.bound(lists, items)
    return before


def remembered_histories() -> tuple[int, int]:
    """The bounds :func:`remember_histories` set last, as ``(lists, items)``: what a
    plugin that remembers histories of its own (an adapter's conversions) bounds itself
    by, so that one call sizes every cache of a server."""
    return RECENT.remembered.bounds
