"""Waiting on a strategy for at most its time limit: worker threads for the sync
visit (one per visit, tracked while it runs, waited for within a bound when the
interpreter exits) and :func:`within` for the async one.

A visit that runs out of time abandons its worker; a thread cannot be killed. Two
things follow. A worker still inside native code at exit (a model's forward pass) can
abort the whole process ("terminate called without an active exception"), so exit
waits up to :data:`EXIT_WAIT` seconds for running workers; a pure-Python hang is left
to die with the process. And a backend that hangs on every call would leave one thread
per request, so an owner (a strategy) with :data:`MAX_RUNNING` workers still running
*after their visits gave up on them* (:func:`abandon`) gets no new one: its visits run
out of time at once, until one ends. Workers whose visits still wait on them are any
number: a server under load runs many visits at once, each well within its limit.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio
    import concurrent.futures

T = TypeVar("T")

#: Seconds the interpreter's exit waits, in all, for workers still running.
EXIT_WAIT = 30.0
#: Abandoned workers (their visits ran out of time) one owner may have still running;
#: past it, its visits time out at once.
MAX_RUNNING = 8

_lock = threading.Lock()
_running: dict[int, set[threading.Thread]] = {}
#: Of those, the ones whose visit gave up on them, by owner.
_abandoned: dict[int, set[threading.Thread]] = {}
#: The thread behind each future :func:`in_thread` returned, until it ends.
_threads: dict[object, tuple[int, threading.Thread]] = {}


def in_thread(
    call: Callable[[], T], name: str, owner: object | None = None
) -> concurrent.futures.Future[T]:
    """Run ``call`` in a new daemon thread (in a copy of the caller's context) and
    return its future at once. A daemon, so a call that never returns cannot hold the
    process open; its own thread, so it cannot starve any pool. ``owner`` (a strategy)
    is what :func:`saturated` counts by."""
    import concurrent.futures  # here: only a visit under a time limit needs it
    import contextvars

    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    context = contextvars.copy_context()
    key = id(owner)

    def work() -> None:
        try:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = context.run(call)
            except BaseException as error:  # handed to the caller, who raises it
                future.set_exception(error)
            else:
                future.set_result(result)
        finally:
            with _lock:
                _threads.pop(future, None)
                for table in (_running, _abandoned):
                    threads = table.get(key)
                    if threads is not None:
                        threads.discard(thread)
                        if not threads:
                            del table[key]

    thread = threading.Thread(target=work, name=f"ctxwindow-{name}", daemon=True)
    with _lock:
        _running.setdefault(key, set()).add(thread)
        _threads[future] = (key, thread)
    thread.start()
    return future


def abandon(future: concurrent.futures.Future[Any]) -> None:
    """Note that the visit waiting on ``future`` (from :func:`in_thread`) gave up on it
    (it ran out of time): its worker, while it runs, counts towards :func:`saturated`."""
    with _lock:
        found = _threads.get(future)
        if found is not None:
            key, thread = found
            _abandoned.setdefault(key, set()).add(thread)


def saturated(owner: object) -> bool:
    """Whether ``owner`` already has :data:`MAX_RUNNING` abandoned workers still
    running (a backend that hangs), so that a new visit would only add one more."""
    with _lock:
        return len(_abandoned.get(id(owner), ())) >= MAX_RUNNING


def running() -> list[threading.Thread]:
    """The workers still running, of every owner."""
    with _lock:
        return [thread for threads in _running.values() for thread in threads]


def wait_for_running(seconds: float = EXIT_WAIT) -> list[threading.Thread]:
    """Wait up to ``seconds`` in all for the running workers; those still running."""
    deadline = time.monotonic() + seconds
    for thread in running():
        thread.join(max(0.0, deadline - time.monotonic()))
    return [thread for thread in running() if thread.is_alive()]


atexit.register(wait_for_running)


def _forget_parents_workers() -> None:
    """In a forked process: none of the parent's workers is there (fork copies the
    forking thread alone), so none runs, none was abandoned here, and the lock one of
    them may have held at the fork is a new one. Else a child of a process whose
    backend hung would time its visits out at once, or wait on that lock for good."""
    global _lock
    _lock = threading.Lock()
    _running.clear()
    _abandoned.clear()
    _threads.clear()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forget_parents_workers)


async def within(call: Awaitable[T], seconds: float) -> tuple[bool, T | None]:
    """``(True, result)`` if ``call`` finishes within ``seconds``, else ``(False, None)``
    once it is cancelled; its own errors, TimeoutError included, are raised as they are.

    A coroutine that blocks the event loop cannot be interrupted; one that returns
    after the limit that way counts as late too, so the limit holds for the window.
    """
    import asyncio  # here, not at the top: `import ctxwindow` stays free of asyncio (and ssl)

    started = time.perf_counter()
    task = asyncio.ensure_future(call)
    finished: list[float] = []  # when the task ended, not when this waiter woke up
    task.add_done_callback(lambda _: finished.append(time.perf_counter()))
    try:
        done, _ = await asyncio.wait((task,), timeout=seconds)
    finally:
        if not task.done():
            task.cancel()  # not awaited: a strategy that ignores cancelling cannot hang us
            task.add_done_callback(_retrieve)
    if not done or (finished and finished[0] - started > seconds):
        if task.done():
            _retrieve(task)
        return False, None
    return True, task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned task's outcome as seen, so asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()
