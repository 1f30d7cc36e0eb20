"""One plugin module registering every kind of extension point besides strategies.

Included, section by section, by docs/plugins/extension-points.md, and run by
tests/test_tutorial.py, so the examples there cannot go stale.
"""

from __future__ import annotations

# --8<-- [start:imports]
import argparse
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import ctxwindow
from ctxwindow import History, InvalidOption, Message, SummaryRequest, SummaryResult
from ctxwindow.hookspecs import (
    RegisterEmbedder,
    RegisterImportanceScorer,
    RegisterSummarizer,
    RegisterTokenCounter,
)

# --8<-- [end:imports]


# --8<-- [start:counter]
class WordCounter:
    """One token per word, plus 4 for a message's framing: a TokenCounter."""

    def __init__(self, framing: int = 4) -> None:
        self.framing = framing
        self.name = f"words:{framing}"  # a stable id: counts are cached under it

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_message(self, message: Message) -> int:
        return self.framing + self.count_text(message.text)


def word_counter(argument: str | None) -> WordCounter:
    """``words`` or ``words:<framing tokens>``."""
    if argument is None:
        return WordCounter()
    if not argument.isdigit():
        raise InvalidOption(f"words counter: {argument!r} is not a whole number")
    return WordCounter(int(argument))


@ctxwindow.hookimpl
def register_token_counters(register: RegisterTokenCounter) -> None:
    register("words", word_counter)


# --8<-- [end:counter]


# --8<-- [start:embedder]
class HashingEmbedder:
    """Bag of hashed words, normalized: an Embedder that needs no model download."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.name = f"hashing:{dimension}"

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                # surrogatepass: a str may hold a lone surrogate (JSON's "\ud800")
                digest = hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8)
                vectors[row, int.from_bytes(digest.digest(), "little") % self.dimension] += 1.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        # rows of length 1; a text without words (an image-only message) stays all zeros:
        # similar to nothing
        return vectors / np.where(norms == 0, 1.0, norms)


def hashing_embedder(argument: str | None) -> HashingEmbedder:
    """``hashing`` or ``hashing:<dimension>``."""
    if argument is None:
        return HashingEmbedder(256)
    if not argument.isdigit() or int(argument) == 0:
        raise InvalidOption(f"hashing embedder: {argument!r} is not a whole number > 0")
    return HashingEmbedder(int(argument))


@ctxwindow.hookimpl
def register_embedders(register: RegisterEmbedder) -> None:
    register("hashing", hashing_embedder)


# --8<-- [end:embedder]


# --8<-- [start:summarizer]
class FirstLines:
    """The first line of each text, under the target: a Summarizer calling no LLM."""

    name = "first-lines"
    requires_llm = False
    max_input_tokens = 100_000

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        lines = [request.previous] if request.previous else []
        for text in request.texts:
            first = text.strip().splitlines()[0] if text.strip() else ""
            candidate = [*lines, first]
            if request.counter.count_text("\n".join(candidate)) > request.target_tokens:
                break
            lines = candidate
        return SummaryResult("\n".join(line for line in lines if line))

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize(request)


@ctxwindow.hookimpl
def register_summarizers(register: RegisterSummarizer) -> None:
    register("first-lines", lambda argument: FirstLines())


# --8<-- [end:summarizer]


# --8<-- [start:scorer]
class Questions:
    """Scores a unit 1 when it asks something, else 0: an ImportanceScorer."""

    name = "questions"

    def score(self, history: History) -> Sequence[float]:
        return [float("?" in history.unit_text(unit)) for unit in range(len(history.units))]


@ctxwindow.hookimpl
def register_importance_scorers(register: RegisterImportanceScorer) -> None:
    register("questions", lambda argument: Questions())


# --8<-- [end:scorer]


# --8<-- [start:command]
def count_tokens(args: argparse.Namespace) -> int:
    """``ctxwindow count FILE``: what each message of a file costs, as JSON."""
    counter = ctxwindow.get_counter(args.counter)
    messages = ctxwindow.read_messages_file(args.file)
    costs = [counter.count_message(Message.from_dict(m, i)) for i, m in enumerate(messages)]
    print(json.dumps({"counter": counter.name, "total": sum(costs), "messages": costs}))
    return 0


@ctxwindow.hookimpl
def register_commands(cli: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    count = cli.add_parser("count", help="what each message of a file costs")
    count.add_argument("file", help="messages file: JSON array or JSONL; '-' for stdin")
    count.add_argument("--counter", "-c", default="approx", help="token counter spec")
    count.set_defaults(run=count_tokens)


# --8<-- [end:command]
