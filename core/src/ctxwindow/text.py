"""Text helpers that strategies matching words against a query share.

One tokenizer for the keyword scorers (``sliding``'s ``keywords``, ``semantic``'s BM25),
so that "paintings" meets "paint" the same way in both, and one rendering of a unit as
text for matching or summarizing: who said what, and which tools were called with what.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxwindow.history import History

_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves s t don re ve ll m d""".split()
)


def stem(word: str) -> str:
    """A light suffix strip, so 'paintings', 'painting' and 'paint' meet."""
    for suffix in ("ings", "ing", "edly", "ed", "ies", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def terms(text: str) -> list[str]:
    """The words of ``text`` that carry meaning, lowercased and stemmed."""
    return [stem(word) for word in _WORD.findall(text.lower()) if word not in STOPWORDS]


def unit_text(history: History, unit: int) -> str:
    """What a unit says: each message's speaker (``name``) and text, and for tool calls
    the function names and arguments, one message a line."""
    parts = []
    for position in history.span(unit):
        message = history.messages[position]
        text = message.text
        if message.tool_calls:
            calls = "; ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
            text = f"{text} {calls}".strip()
        parts.append(f"{message.name}: {text}" if message.name else text)
    return "\n".join(parts)
