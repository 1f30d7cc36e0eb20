"""Threads for tests: run work in several threads at once, for testing that a strategy
or a cache shared by an app's threads stays correct; run a call that might hang in a
thread of its own, so that a hang fails the test instead of blocking the run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
#: How long a call may run before :func:`bounded` calls it a hang: a minute, far more
#: than any bounded visit takes on a loaded machine (never a timing assertion).
HANG_GUARD = 60.0


def run_threads(work: Callable[[int], None], count: int, timeout: float = 120.0) -> None:
    """``work(0) .. work(count - 1)`` at once in threads; a failure in any is raised here,
    and a thread still running after ``timeout`` seconds (a deadlock) raises TimeoutError."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(work, worker) for worker in range(count)]
        for future in futures:
            future.result(timeout=timeout)


def bounded(call: Callable[[], T], seconds: float = HANG_GUARD) -> T:
    """``call()``, run in a daemon thread: its value, or the error it raised; a call still
    running after ``seconds`` fails the test (it is a hang) instead of blocking the run."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as error:  # handed to the caller, who raises it
            box["error"] = error

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s: the visit was not bounded (a hang)")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
