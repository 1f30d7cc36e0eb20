"""Evidence recall: the share of a question's evidence turns that its window keeps.

Verbatim recall counts a turn only if the window holds that very message, whole: a
copy the window sent cut or replaced (``metadata.stands_in_for``, or ``truncated``) is
not the turn verbatim, whatever of it is left. A summary
is scored separately, by a rule that asks whether it still carries the turn's facts:
an evidence turn named in a summary's ``covers`` counts as recalled by the summary when
the summary's text contains the question's answer, or one sentence of the summary holds
at least half of the turn's key terms (words of four or more letters, and numbers, that
are not stopwords). Per sentence, not over the whole summary: a long summary holds many
words by chance, and a fact is carried by a sentence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwindow_eval.dataset import Question

KEY_TERM_SHARE = 0.5
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_STOPWORDS = frozenset(
    """about after again also been before being between both could does doing down during
    each from further have having here into just more most much only other over same
    should some such than that their them then there these they this those through under
    until very were what when where which while will with would your yours like really
    know think thing things yeah that's it's i'm""".split()
)


@dataclass(frozen=True)
class Score:
    """One question's scores in one window."""

    verbatim: float
    with_summaries: float
    all_kept: bool
    #: Whether the window held a summary (one that covers anything), carrying or not.
    summarized: bool = False


def _normalize(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def key_terms(text: str) -> set[str]:
    return {
        word
        for word in _WORD.findall(text.lower())
        if (len(word) >= 4 or word.isdigit()) and word not in _STOPWORDS
    }


def window_contents(messages: Sequence[Any]) -> tuple[set[str], list[tuple[set[str], str]]]:
    """Ids kept verbatim (sent whole: a cut or made stand-in is not), and each
    summary's covered ids with its text."""
    kept: set[str] = set()
    summaries: list[tuple[set[str], str]] = []
    for message in messages:
        get = message.get if isinstance(message, Mapping) else None
        metadata = (get("metadata") if get else getattr(message, "metadata", None)) or {}
        if metadata.get("synthetic"):
            if "covers" in metadata:  # a summary: it says what it stands for
                text = get("content") if get else getattr(message, "text", "")
                covers = {str(i) for i in metadata.get("covers") or ()}
                summaries.append((covers, str(text or "")))
            continue
        if metadata.get("truncated") or "stands_in_for" in metadata:
            continue  # sent cut: not the turn verbatim
        message_id = get("id") if get else getattr(message, "id", None)
        if message_id is None:
            message_id = metadata.get("id")
        if message_id is not None:
            kept.add(str(message_id))
    return kept, summaries


def score(
    question: Question,
    kept: set[str],
    summaries: Sequence[tuple[set[str], str]],
    texts: Mapping[str, str],
) -> Score:
    evidence = question.evidence
    verbatim = [item in kept for item in evidence]
    carried = list(verbatim)
    if summaries:
        answer = _normalize(question.answer or "")
        for index, item in enumerate(evidence):
            if carried[index]:
                continue
            for covers, text in summaries:
                if item in covers and _summary_carries(text, answer, texts.get(item, "")):
                    carried[index] = True
                    break
    count = len(evidence)
    return Score(sum(verbatim) / count, sum(carried) / count, all(verbatim), bool(summaries))


def _summary_carries(summary: str, answer: str, turn_text: str) -> bool:
    if answer and f" {answer} " in f" {_normalize(summary)} ":
        return True
    terms = key_terms(turn_text)
    if not terms:
        return False
    needed = max(1, math.ceil(len(terms) * KEY_TERM_SHARE))
    return any(len(terms & key_terms(sentence)) >= needed for sentence in _SENTENCE.split(summary))
