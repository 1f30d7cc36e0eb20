"""CachedCounter's memory bound counts what its keys hold: a message's key holds its
images' data (a part's canonical JSON, the whole base64 data URL), which no count reads
but a long-running app would keep for every image it ever counted."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest

import ctxwindow
from ctxwindow import ApproxCounter, Message
from ctxwindow._tokens import CachedCounter


def _with_image(i: int, size: int) -> Message:
    """A user message with a question and an inline image of ``size`` base64 characters."""
    data = "data:image/png;base64," + f"{i:08d}" + "A" * size
    return Message.from_dict(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f"what is in picture {i}?"},
                {"type": "image_url", "image_url": {"url": data, "detail": "high"}},
            ],
        }
    )


def test_the_character_bound_counts_the_image_data_a_key_holds() -> None:
    counter = CachedCounter(ApproxCounter(), max_chars=1_000_000)
    for i in range(50):
        counter.count_message(_with_image(i, 100_000))
        assert counter.cached_chars <= 1_000_000
    assert len(counter) <= 10  # 100,000 characters each, not the 20 of their text


def test_the_cache_holds_no_more_image_data_than_its_bound() -> None:
    """The review's case: 300 requests with a 1 MB image each grew a process by 300 MB."""
    counter = CachedCounter(ApproxCounter(), max_chars=2_000_000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(40):
            counter.count_message(_with_image(i, 200_000))  # 8 MB in all, then dropped
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 3_000_000, f"{held:,} bytes held for a bound of 2,000,000 characters"


@pytest.mark.parametrize("spec", ["approx", "tiktoken:cl100k_base"])
def test_a_message_with_an_image_is_still_counted_once(spec: str) -> None:
    if spec.startswith("tiktoken"):
        pytest.importorskip("tiktoken")
    counter = CachedCounter(ctxwindow.get_counter(spec).inner)
    message = _with_image(1, 1_000)
    first = counter.count_message(message)
    assert counter.count_message(_with_image(1, 1_000)) == first  # equal content: a hit
    assert counter.misses == 1
    assert counter.count_message(_with_image(2, 1_000)) == first  # other data: a miss
    assert counter.misses == 2
    assert counter.cached_chars >= 2 * 1_000


def test_what_a_key_holds_beside_its_text_is_counted(counting: Any) -> None:
    """Tool call ids and an audio reference are held by the key too."""
    counter = CachedCounter(counting)
    call = {"id": "call_" + "x" * 500, "function": {"name": "f", "arguments": "{}"}}
    counter.count_message(
        Message.from_dict({"role": "assistant", "content": None, "tool_calls": [call]})
    )
    assert counter.cached_chars >= 500
