"""A strategy's per-conversation state is made without holding up other conversations:
a branch's state is read from its parent's under the parent's own lock, which a long
(cold) visit of the parent holds, and the first visit of every other conversation in
the process waited behind it (a server's chats stalled by one slow regenerate)."""

from __future__ import annotations

import threading

from ctxwindow import Conversation
from ctxwindow.kit import PerConversation

HELLO = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()


def test_a_branch_waiting_on_its_parents_state_holds_up_no_other_conversation() -> None:
    parent = Conversation([*HELLO, {"role": "user", "content": "more"}])
    branch = parent.branch(2)
    entered = threading.Event()

    def branched(state: _State, conversation: Conversation, origin: object) -> _State:
        entered.set()
        with state.lock:  # the parent's visit holds it, as a cold visit does
            return _State()

    states: PerConversation[_State] = PerConversation(_State, branched)
    held = states.of(parent)
    made: list[_State] = []
    with held.lock:  # a long visit of the parent
        waiting = threading.Thread(target=lambda: made.append(states.of(branch)))
        waiting.start()
        assert entered.wait(10)
        other = Conversation(HELLO)
        done = threading.Event()
        threading.Thread(target=lambda: (states.of(other), done.set())).start()
        # before the fix it waited on the branch's making, which waits on the parent
        assert done.wait(10), "another conversation's first state waited on the branch"
        assert not made  # the branch still waits on its parent, as it must
    waiting.join(10)
    assert made and made[0] is states.of(branch)  # made once, kept


def test_two_threads_making_one_conversations_state_keep_one() -> None:
    conversation = Conversation(HELLO)
    built: list[_State] = []
    start = threading.Barrier(8)

    def make() -> _State:
        state = _State()
        built.append(state)
        return state

    states: PerConversation[_State] = PerConversation(make)
    got: list[_State] = []

    def visit() -> None:
        start.wait()
        got.append(states.of(conversation))

    threads = [threading.Thread(target=visit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(got) == 8 and all(state is got[0] for state in got)
    assert got[0] is states.of(conversation) and got[0] in built
    assert len(states) == 1
