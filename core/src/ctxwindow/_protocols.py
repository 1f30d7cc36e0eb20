"""The protocols of the things plugins register besides strategies: embedders,
summarizers and importance scorers. Strategies name them by spec the way they name a
token counter; the core defines only the protocols, so it needs neither numpy nor a
model nor an LLM client.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ctxwindow._tokens import TokenCounter
from ctxwindow._window import LLMUsage

if TYPE_CHECKING:
    from ctxwindow._history import History


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors: their dot product is their cosine
    similarity (for ``semantic``, through ``register_embedders``)."""

    #: A stable id of the model and its settings: embeddings are cached under it, so
    #: two embedders with the same name must give the same vectors.
    name: str

    def embed(self, texts: Sequence[str]) -> Any:
        """A float32 array of shape (len(texts), dimension), each row of length 1."""
        ...


@runtime_checkable
class ImportanceScorer(Protocol):
    """Scores every unit of a history, higher meaning more worth keeping (for strategies
    that keep the important units besides the recent ones, such as ``sliding``)."""

    name: str

    def score(self, history: History) -> Sequence[float]:
        """One finite score per unit of ``history`` (``len(history.units)`` of them)."""
        ...


@dataclass(frozen=True)
class SummaryRequest:
    """What to summarize: the previous summary (never cut) and the newly evicted texts."""

    previous: str | None
    texts: Sequence[str]
    target_tokens: int
    counter: TokenCounter


@dataclass(frozen=True)
class SummaryResult:
    text: str
    usage: LLMUsage | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Writes the summary of a conversation's older part: older messages in, a shorter
    text that keeps their facts out. One that fails raises SummarizerFailed, and the
    strategy's fallback chain takes over."""

    #: A stable id of the summarizer and its settings: summaries are cached under it.
    name: str
    #: True when it calls an LLM (and so costs money and can fail).
    requires_llm: bool
    #: The most input, in tokens of the visit's counter, it takes in one call; more is
    #: summarized in stages.
    max_input_tokens: int

    def summarize(self, request: SummaryRequest) -> SummaryResult: ...

    async def asummarize(self, request: SummaryRequest) -> SummaryResult: ...
