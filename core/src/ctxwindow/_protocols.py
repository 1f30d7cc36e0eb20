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

    @property
    def name(self) -> str:
        """A stable id of the model and its settings: embeddings are cached under it, so
        two embedders with the same name must give the same vectors. Read only: an
        attribute, a property or a class constant all do."""
        ...

    def embed(self, texts: Sequence[str]) -> Any:
        """A float32 array of shape (len(texts), dimension), each row of length 1."""
        ...


@runtime_checkable
class ImportanceScorer(Protocol):
    """Scores every unit of a history, higher meaning more worth keeping (for strategies
    that keep the important units besides the recent ones, such as ``sliding``)."""

    @property
    def name(self) -> str:
        """A stable id of the scorer and its settings (read only)."""
        ...

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
    strategy's fallback chain takes over (the ``summarize`` strategy takes any other
    exception, and a reply that is not a SummaryResult with a str text, for the same).

    ``summarize`` is required, a plain method: summarizing strategies call it, under
    ``aselect`` too (in a worker thread). ``asummarize`` is optional, for callers that
    summarize in async code (:class:`AsyncSummarizer` is a summarizer with it); the
    ``summarize`` strategy does not call it. One with ``requires_llm`` True also has
    ``provider`` (who is paid, such as ``"openai"``) and ``model`` attributes, non-empty
    strings: the strategy declares them as its billing. :func:`ctxwindow.get_summarizer`
    checks these when it makes one. The attributes are read only: a plain attribute, a
    property or a class constant all do.
    """

    @property
    def name(self) -> str:
        """A stable id of the summarizer and its settings: summaries are cached under it."""
        ...

    @property
    def requires_llm(self) -> bool:
        """True when it calls an LLM (and so costs money and can fail); then it also has
        ``provider`` and ``model`` (who is billed), which this protocol does not list so
        that a summarizer calling no LLM need not have them."""
        ...

    @property
    def max_input_tokens(self) -> int:
        """The most input, in tokens of the visit's counter, it takes in one call (a
        positive int); more is summarized in stages."""
        ...

    def summarize(self, request: SummaryRequest) -> SummaryResult: ...


@runtime_checkable
class AsyncSummarizer(Summarizer, Protocol):
    """A :class:`Summarizer` that also summarizes in async code: a protocol of its own,
    as ``asummarize`` is optional (summarizing strategies call ``summarize`` only)."""

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        """The same as ``summarize``, for async callers."""
        ...
