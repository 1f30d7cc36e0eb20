"""A process forked from one whose strategy's backend hung (workers abandoned, still
running in the parent) starts with none: fork copies the forking thread alone."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from ctxwindow import _workers


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_process_has_none_of_its_parents_workers() -> None:
    owner = object()
    release = threading.Event()
    futures = [_workers.in_thread(release.wait, "hung", owner) for _ in range(_workers.MAX_RUNNING)]
    try:
        for future in futures:
            _workers.abandon(future)
        assert _workers.saturated(owner)  # the parent gives this owner no new worker
        child = os.fork()
        if child == 0:  # the child: its check, then out (no pytest teardown)
            signal.alarm(30)
            fresh = not _workers.saturated(owner) and not _workers.running()
            done = _workers.in_thread(lambda: 7, "fresh", owner).result(10) == 7
            os._exit(0 if fresh and done else 3)
        _, status = os.waitpid(child, 0)
        assert not os.WIFSIGNALED(status), "the child waited on its parent's workers"
        assert os.WEXITSTATUS(status) == 0, "the child counted its parent's workers"
    finally:
        release.set()
        for future in futures:
            future.result(10)
