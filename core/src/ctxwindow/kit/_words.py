"""Words and terms: one tokenizer for the keyword scorers, and a query's distinct
terms read in time linear in what changed since the last query."""

from __future__ import annotations

import re
import sys
import threading
from collections import OrderedDict
from itertools import chain

_ASCII_WORD = re.compile(r"[a-z0-9]+")
#: A word in any script: a run of letters and digits ('_' joins an identifier's parts).
_WORD = re.compile(r"[^\W_]+")
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


def words(lowered: str) -> list[str]:
    """The words of a lowercased text: runs of letters and digits in any script
    ('барсик', 'café', '李'), so that a conversation in another language than English
    is scored too (a script written without spaces runs on as one word). An ASCII text,
    most of them (a flag CPython keeps), by the faster ASCII pattern: the same words."""
    return (_ASCII_WORD if lowered.isascii() else _WORD).findall(lowered)


def terms(text: str) -> list[str]:
    """The words of ``text`` that carry meaning, lowercased and stemmed."""
    return [stem(word) for word in words(text.lower()) if word not in STOPWORDS]


def query_terms(text: str) -> list[str]:
    """The distinct :func:`terms` of ``text`` in the order they first appear, each
    distinct word stemmed once and each line's words read once while the line is held
    (:class:`_LineWords`): a query read on every step of a loop. In an agent's history
    the query is the whole current turn (up to 32,000 characters of calls and results),
    most of it the lines of the last step's query; read word by word, it cost a
    ``sliding`` step 3.7 ms at 300 messages. A query whose lines never recur costs a
    little more than that reading (its lines are held)."""
    distinct = dict.fromkeys(chain.from_iterable(_LINE_WORDS.of_lines(text.split("\n"))))
    return list(dict.fromkeys(stem(word) for word in distinct if word not in STOPWORDS))


#: What holding a line costs beyond its objects' own sizes: its entry, links and count
_ENTRY_BYTES = 224


class _LineWords:
    """The distinct words of a line (:func:`words` of it, lowercased), by the line:
    lines of up to ``most`` characters are held, the least recently read going first
    past ``held`` bytes (the line, its words and their tuple as ``sys.getsizeof``
    counts them, and the entry). A newline is no letter, and lowercasing stops at one,
    so the words of a text are those of its lines, in order."""

    def __init__(self, most: int = 16_000, held: int = 16 * 2**20) -> None:
        self.most, self.held = most, held
        self._words: OrderedDict[str, tuple[tuple[str, ...], int]] = OrderedDict()
        self.bytes = 0
        self._lock = threading.Lock()

    def of_lines(self, lines: list[str]) -> list[tuple[str, ...]]:
        """Each line's distinct words, in order: held ones looked up, others read."""
        out = []
        with self._lock:
            for line in lines:
                held = self._words.get(line)
                if held is not None:
                    self._words.move_to_end(line)
                    out.append(held[0])
                    continue
                found = tuple(dict.fromkeys(words(line.lower())))
                out.append(found)
                if len(line) <= self.most:
                    self._hold(line, found)
        return out

    def _hold(self, line: str, found: tuple[str, ...]) -> None:
        cost = sys.getsizeof(line) + sys.getsizeof(found) + _ENTRY_BYTES
        cost += sum(map(sys.getsizeof, found))
        self._words[line] = (found, cost)
        self.bytes += cost
        while self.bytes > self.held:
            _line, (_found, freed) = self._words.popitem(last=False)
            self.bytes -= freed


#: The lines of recent queries, shared by every scorer of the process.
_LINE_WORDS = _LineWords()
