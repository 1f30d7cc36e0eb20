"""The extractive summarizer: no LLM, deterministic, keeps the sentences that carry facts.

A sentence is worth keeping for what a later question may need: names, dates and
numbers, and words that are rare in the conversation (the same boilerplate said every
turn carries nothing; a word said once or twice usually names a fact). The previous summary's
sentences come first and are kept before new ones, so facts summarized once are not
lost to newer small talk; new sentences fill the rest of the target, best first, and
everything is written back in its original order.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from ctxwindow import SummaryRequest, SummaryResult

_SENTENCE = re.compile(
    r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bvs\.)(?<!\be\.g\.)"
    r"(?<!\bi\.e\.)(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])|\n+"
)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+|\d[\d,.:/-]*")
_MONTHS = {
    "january", "february", "march", "april", "may", "june", "july", "august",
    "september", "october", "november", "december", "monday", "tuesday", "wednesday",
    "thursday", "friday", "saturday", "sunday", "yesterday", "tomorrow", "today",
}  # fmt: skip
_COMMON = frozenset(
    """the a an and or but if then so to of in on at by for with from as is are was were
    be been am i you he she it we they me him her us them my your his its our their this
    that these those what which who whom when where why how not no yes do does did done
    have has had will would can could should just really very too also oh ok okay yeah
    hey hi hello thanks thank great good nice cool sure lol wow""".split()
)
PREFIX = "Summary of the earlier conversation: "


def sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE.split(text) if part and part.strip()]


def _speaker_sentences(text: str) -> list[str]:
    """Split a unit's text; each sentence keeps its speaker ("Name: ...")."""
    out: list[str] = []
    for line in text.splitlines():
        speaker, sep, said = line.partition(": ")
        if sep and len(speaker) <= 40 and " " not in speaker.strip():
            out.extend(f"{speaker}: {s}" for s in sentences(said))
        else:
            out.extend(sentences(line))
    return out


def salience(sentence: str, rarity: dict[str, float]) -> float:
    """Names, dates, numbers and rare words per square-rooted length."""
    words = _WORD.findall(sentence)
    if not words:
        return 0.0
    score = 0.0
    for index, word in enumerate(words):
        lower = word.lower()
        if (
            word[0].isdigit()
            or lower in _MONTHS
            or (word[0].isupper() and index > 0 and lower not in _COMMON)
        ):
            score += 1.0
        if lower not in _COMMON:
            score += rarity.get(lower, 0.0)
    return score / math.sqrt(len(words))


def rarities(pool: Sequence[str]) -> dict[str, float]:
    """Inverse sentence frequency of each word: log(sentences / sentences with it)."""
    seen: Counter[str] = Counter()
    for sentence in pool:
        seen.update({w.lower() for w in _WORD.findall(sentence)})
    total = max(len(pool), 1)
    return {word: math.log(total / count) for word, count in seen.items()}


class ExtractiveSummarizer:
    """Picks the most salient sentences within the target; no LLM, same input same output."""

    name = "extractive"
    requires_llm = False
    provider = None
    model = None
    max_input_tokens = 1_000_000

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        previous = sentences(request.previous.removeprefix(PREFIX)) if request.previous else []
        fresh = [s for text in request.texts for s in _speaker_sentences(text)]
        budget = request.target_tokens - request.counter.count_text(PREFIX)
        chosen = _pick(previous, fresh, rarities([*previous, *fresh]), budget, request)
        text = PREFIX + " ".join(chosen)
        return SummaryResult(text if chosen else "")

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize(request)


def _pick(
    previous: Sequence[str],
    fresh: Sequence[str],
    rarity: dict[str, float],
    budget: int,
    request: SummaryRequest,
) -> list[str]:
    """The previous summary's sentences first, then the best new ones, in order."""
    ranked = sorted(range(len(previous)), key=lambda i: -salience(previous[i], rarity))
    ranked_fresh = sorted(range(len(fresh)), key=lambda i: -salience(fresh[i], rarity))
    keep_previous: set[int] = set()
    keep_fresh: set[int] = set()
    room = budget
    for pool, ranking, kept in (
        (previous, ranked, keep_previous),
        (fresh, ranked_fresh, keep_fresh),
    ):
        for index in ranking:
            if salience(pool[index], rarity) <= 0:
                continue
            cost = request.counter.count_text(pool[index]) + 1
            if cost <= room:
                kept.add(index)
                room -= cost
    return [previous[i] for i in sorted(keep_previous)] + [fresh[i] for i in sorted(keep_fresh)]
