"""The summarizer protocol: older messages in, a shorter text that keeps their facts out.

Strategies that summarize (``summarize``) name a summarizer the way they name a token
counter; plugins register summarizers through ``register_summarizers``. A summarizer
that fails raises SummarizerFailed, and the strategy's fallback chain takes over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ctxwindow.tokens import TokenCounter
from ctxwindow.window import LLMUsage


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
    """Writes the summary of a conversation's older part."""

    #: A stable id of the summarizer and its settings: summaries are cached under it.
    name: str
    #: True when it calls an LLM (and so costs money and can fail).
    requires_llm: bool
    #: The most input, in tokens of the visit's counter, it takes in one call; more is
    #: summarized in stages.
    max_input_tokens: int

    def summarize(self, request: SummaryRequest) -> SummaryResult: ...

    async def asummarize(self, request: SummaryRequest) -> SummaryResult: ...
