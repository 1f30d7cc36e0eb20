"""A counter of one's own: numpy's integers are counts, a class given for an instance
is named at configuration, and the docs say what every counter charges an image."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import InvalidOption, Message

HISTORY = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hello there, how are you"},
]


class WordCounter:
    name = "words"

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_message(self, message: Message) -> int:
        return 3 + len(message.text.split())


class _Typed:
    """Counts words and answers in a type of its choosing (numpy's, say)."""

    def __init__(self, kind: Any) -> None:
        self.kind = kind
        self.name = f"words as {getattr(kind, '__name__', kind)}"

    def count_text(self, text: str) -> Any:
        return self.kind(len(text.split()))

    def count_message(self, message: Message) -> Any:
        return self.kind(3 + len(message.text.split()))


@pytest.mark.parametrize("kind", ["int64", "int32", "uint16", "intp"])
def test_a_numpy_integer_is_a_count(kind: str) -> None:
    numpy = pytest.importorskip("numpy")
    counter = _Typed(getattr(numpy, kind))
    window = ctxwindow.select(HISTORY, 100, "newest", counter=counter)
    assert window.record.tokens_before == (3 + 2) + (3 + 5)
    assert type(window.record.tokens_before) is int  # a record is JSON
    wrapped = ctxwindow.get_counter(counter)
    assert type(wrapped.count_text("a b c")) is int and wrapped.count_text("a b c") == 3


@pytest.mark.parametrize("value", ["bool_", "float64", "negative"])
def test_what_numpy_gives_that_is_no_count_is_refused(value: str) -> None:
    numpy = pytest.importorskip("numpy")
    kind = (lambda n: numpy.int64(-n)) if value == "negative" else getattr(numpy, value)
    with pytest.raises(ctxwindow.CounterFailed, match="not a count"):
        ctxwindow.select(HISTORY, 100, "newest", counter=_Typed(kind))


def test_a_counter_class_is_refused_at_configuration_saying_to_pass_an_instance() -> None:
    said = r"counter WordCounter is a class: pass an instance, counter=WordCounter\(\)"
    with pytest.raises(InvalidOption, match=said):
        ctxwindow.select(HISTORY, 100, "newest", counter=WordCounter)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match=said):
        ctxwindow.get_counter(WordCounter)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match=said):
        ctxwindow.from_config({"strategy": "newest", "budget": 100, "counter": WordCounter})
    assert ctxwindow.select(HISTORY, 100, "newest", counter=WordCounter()).record.counter == "words"


# -- what the docs say an image costs ----------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def _counting_section() -> str:
    concepts = ROOT / "docs" / "concepts.md"
    if not concepts.is_file():
        pytest.skip("needs the repository (not in an sdist)")
    text = concepts.read_text(encoding="utf-8")
    return text.split("## Token counting", 1)[1].split("\n## ", 1)[0]


def test_the_docs_say_every_counter_charges_an_image_85_tokens_whatever_its_detail() -> None:
    section = " ".join(_counting_section().split())
    assert re.search(r"[Ee]very counter[^.]*non-text part[^.]*85 tokens", section)
    assert "high-detail" in section and "1,105" in section
    assert "your own counter" in section


@pytest.mark.parametrize("spec", ["approx", "tiktoken:cl100k_base"])
def test_every_counter_charges_an_image_85_tokens_whatever_its_detail(spec: str) -> None:
    if spec.startswith("tiktoken"):
        pytest.importorskip("tiktoken")
    counter = ctxwindow.get_counter(spec)

    def image(detail: str) -> Message:
        part = {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": detail}}
        return Message.from_dict({"role": "user", "content": [part]})

    bare = Message.from_dict({"role": "user", "content": [{"type": "text", "text": ""}]})
    for detail in ("low", "high", "auto"):
        assert counter.count_message(image(detail)) - counter.count_message(bare) == 85
