"""The README's figures of the 200-turn chat loop are that loop's, run here: the calls it
quotes are counted, never typed by hand."""

from __future__ import annotations

import importlib.util
import itertools
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from ctxwindow import Conversation
from ctxwindow_summarize import SummarizeWindow

HERE = Path(__file__).resolve().parents[1]
README = " ".join((HERE / "README.md").read_text(encoding="utf-8").split())
#: The README's sentence on the loop, its line breaks folded into spaces.
LOOP = re.compile(
    r"chat loop at (?P<budget>\d+) tokens \(`tests/test_summarize\.py`\), (?P<calls>\d+) "
    r"calls in all: at turns (?P<first>\d+) and (?P<second>\d+), then one every "
    r"(?P<step>\d+) turns \((?P<steady>\d+) in turns (?P<start>\d+)-(?P<end>\d+)\)"
)


def _loop_module() -> ModuleType:
    """tests/test_summarize.py, whose history and turns the README's loop is made of."""
    spec = importlib.util.spec_from_file_location(
        "_summarize_loop", Path(__file__).with_name("test_summarize.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_chat_loop_calls_the_summarizer_when_the_readme_says(
    counted: Callable[[SummarizeWindow], list[int]],
) -> None:
    """The README quotes the calls of test_summarize.py's 200-turn loop: run it again
    and compare every figure the sentence gives."""
    shown = LOOP.search(README)
    assert shown is not None, "the README's sentence on the 200-turn loop has changed"
    figures = {name: int(value) for name, value in shown.groupdict().items()}
    loop = _loop_module()
    strategy = SummarizeWindow()
    calls = counted(strategy)
    conversation = Conversation(loop.history(0))
    at: list[int] = []
    for index in range(200):
        conversation.append(loop.turn(index)[0])
        before = calls[0]
        strategy.select(conversation, figures["budget"])
        at += [index] * (calls[0] - before)
        conversation.append(loop.turn(index)[1])
    assert len(at) == figures["calls"], at
    assert at[:2] == [figures["first"], figures["second"]], at
    steps = {later - earlier for earlier, later in itertools.pairwise(at[1:])}
    assert steps == {figures["step"]}, at
    steady = [index for index in at if figures["start"] <= index <= figures["end"]]
    assert len(steady) == figures["steady"], at
