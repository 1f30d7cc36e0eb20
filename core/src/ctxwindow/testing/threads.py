"""Run one piece of work in several threads at once: for testing that a strategy or a
cache shared by an app's threads stays correct (and does not deadlock)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def run_threads(work: Callable[[int], None], count: int, timeout: float = 120.0) -> None:
    """``work(0) .. work(count - 1)`` at once in threads; a failure in any is raised here,
    and a thread still running after ``timeout`` seconds (a deadlock) raises TimeoutError."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(work, worker) for worker in range(count)]
        for future in futures:
            future.result(timeout=timeout)
