"""The pool of per-conversation indexes under threads: a conversation's first (cold)
embedding, and a branch of it waiting for it, never hold up another conversation's
visit. The waits are on events (a hang guard only), never on timings."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ctxwindow import Conversation
from ctxwindow.testing import assistant, user
from ctxwindow.testing.threads import HANG_GUARD
from ctxwindow_semantic import SemanticWindow
from ctxwindow_semantic.index import IndexPool, UnitIndex


class GatedEmbedder:
    """Hash vectors; the first call that embeds a text of ``held`` waits for
    :attr:`release` (a cold embedding of that conversation that takes as long as the
    test wants), saying so on :attr:`entered`."""

    name = "gated-test-8"

    def __init__(self, held: str) -> None:
        self.held = held
        self.entered = threading.Event()
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not self.entered.is_set() and any(self.held in text for text in texts):
            self.entered.set()
            self.release.wait(HANG_GUARD)
        out = np.zeros((len(texts), 8), dtype=np.float32)
        for row, text in enumerate(texts):
            digest = hashlib.sha256(text.encode()).digest()[:8]
            out[row] = np.frombuffer(digest, dtype=np.uint8).astype(np.float32) + 1
        unit: np.ndarray = out / np.linalg.norm(out, axis=1, keepdims=True)
        return unit


class SignallingLock:
    """A lock that says when a thread starts to wait for it: :attr:`wanted` is set, and
    :attr:`asked` released once a thread."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self.wanted = threading.Event()
        self.asked = threading.Semaphore(0)

    def __enter__(self) -> bool:
        self.wanted.set()
        self.asked.release()
        return bool(self._lock.acquire())

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def chat(tag: str, turns: int) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": f"Assistant {tag}."}]
    for turn in range(turns):
        messages.append(user(f"{tag} question {turn} about topic {turn % 7}"))
        messages.append(assistant(f"{tag} answer {turn}: " + "words " * 8))
    messages.append(user(f"{tag}: what did we say about topic 3?"))
    return messages


def started(call: Callable[[], Any], into: dict[str, Any], name: str) -> threading.Thread:
    """``call()`` in a daemon thread, its value put in ``into[name]``."""
    thread = threading.Thread(target=lambda: into.__setitem__(name, call()), daemon=True)
    thread.start()
    return thread


def test_a_branch_waiting_for_its_cold_parent_does_not_hold_up_other_conversations() -> None:
    """P's first visit holds P's index while it embeds; a visit of P's branch waits for
    it (its index starts from P's). A visit of an unrelated Q must still finish: the
    branch's wait held the pool-wide lock, and Q waited for P's embedding."""
    gate = GatedEmbedder(held="P question")
    strategy = SemanticWindow(embedder=gate, cache="memory")
    parent = Conversation(chat("P", 40))
    branch = parent.branch(-1)
    edit = [assistant("P answer edited"), user("P: and topic 5?")]
    branch.extend(edit)
    other = Conversation(chat("Q", 30))
    got: dict[str, Any] = {}
    threads = [started(lambda: strategy.select(parent, 300).messages, got, "P")]
    try:
        assert gate.entered.wait(HANG_GUARD), "P's visit never reached its embedding"
        index: UnitIndex = strategy.indexes.get(parent, gate.name)
        watched = SignallingLock(index.lock)
        index.lock = watched  # type: ignore[assignment]  # P's visit releases the real one
        threads.append(started(lambda: strategy.select(branch, 300).messages, got, "branch"))
        assert watched.wanted.wait(HANG_GUARD), "the branch's visit never asked for P's index"
        threads.append(started(lambda: strategy.select(other, 300).messages, got, "Q"))
        threads[-1].join(HANG_GUARD)
        assert "Q" in got, "Q's visit waited for P's cold embedding"
        assert len(strategy.indexes.get(other, gate.name)) > 0  # Q's visit ranked by its index
        assert threads[0].is_alive() and "branch" not in got  # P still embedding: no race
    finally:
        gate.release.set()
        for thread in threads:
            thread.join(HANG_GUARD)
    fresh = SemanticWindow(embedder=GatedEmbedder(held="none"), cache="memory")
    assert got["P"] == fresh.select(Conversation(chat("P", 40)), 300).messages
    assert got["Q"] == fresh.select(Conversation(chat("Q", 30)), 300).messages
    alone = Conversation([*chat("P", 40)[:-1], *edit])
    assert got["branch"] == fresh.select(alone, 300).messages


def test_two_threads_making_one_branch_index_at_once_share_the_first_made() -> None:
    """A branch's index is made outside the pool's lock, so two first visits of one
    branch may both make one: each must get the index the pool keeps, or their units
    would go to an index no later visit reads."""
    pool = IndexPool()
    parent = Conversation(chat("P", 4))
    held = pool.get(parent, "e")
    watched = SignallingLock(held.lock)
    held.lock = watched  # type: ignore[assignment]
    branch = parent.branch(-1)
    got: dict[str, Any] = {}
    with watched._lock:  # the parent's visit, embedding
        threads = [started(lambda: pool.get(branch, "e"), got, name) for name in ("a", "b")]
        for _thread in threads:
            assert watched.asked.acquire(timeout=HANG_GUARD), "a visit never asked for P's"
    for thread in threads:
        thread.join(HANG_GUARD)
    assert got["a"] is got["b"] is pool.get(branch, "e")
    assert len(pool) == 2


def test_a_branch_of_a_branch_made_before_its_visit_starts_from_the_grandparents_index() -> None:
    """A branch branched again (by another caller's edit) before its own first visit
    has no index: its branch's index starts from the grandparent's, as the core's
    per-conversation states do (``Conversation.origins``), not from scratch (which
    asked for every unit's vector again, 121 texts here, not 2)."""
    strategy = SemanticWindow(embedder=GatedEmbedder(held="\0never"), cache="memory")
    asked: list[int] = []
    embed = strategy.embed
    strategy.embed = lambda texts: (asked.append(len(texts)), embed(texts))[1]  # type: ignore[method-assign]
    first = Conversation(chat("P", 60))
    strategy.select(first, 300)
    second = first.branch(-1)
    third = second.branch(-1)  # before the second's first visit
    third.append(user("P: and topic 5?"))
    asked.clear()
    window = strategy.select(third, 300)
    assert sum(asked) <= 3, f"{sum(asked)} texts asked for, the shared units' again"
    fresh = SemanticWindow(embedder=GatedEmbedder(held="\0never"), cache="memory")
    assert window.messages == fresh.select(Conversation(third.originals), 300).messages
