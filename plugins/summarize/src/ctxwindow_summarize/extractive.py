"""The extractive summarizer: no LLM, deterministic, keeps the sentences that carry facts.

A sentence is worth keeping for what a later question, or an agent's next step, may
need: names, dates and numbers, identifiers (ids, codes, paths), and words that are rare
in the conversation (the same boilerplate said every turn carries nothing; a word said
once or twice usually names a fact).

In an agent's history (the strategy hands over texts with roles, see
``ctxwindow.kit.unit_text``) the pieces are not alike:

- the user's words are the task and its constraints: they are kept first (one too long
  for the room left is cut to fit, when none of its message is in: see :func:`_cut_in`);
- repeated tool calls collapse into one line per function, with the values they were
  called with (``get_reservation_details x3: ZFA04Y, XEWRD9, M05KNL``);
- a tool result is read field by field (one piece per top-level field of a JSON
  result);
- a piece that nearly repeats one already kept (a second identical lookup, a request
  the user made every turn, a constraint pasted many times) is dropped unless it adds
  an identifier, so the room goes to what the summary does not hold yet (in a chat
  too: a sentence said twice is kept once);
- pieces are then taken for the identifiers they add per token, so what later steps
  pass on (a payment id, a flight number) survives where boilerplate does not.

Rolling, the previous summary's sentences are read again with the new pieces. In an
agent's history they come first and are kept before new ones (the task and the values
already summarized stay). In a chat they compete with the new sentences on salience:
kept first, they would fill the summary once and then hold the chat's first part
forever; small talk has no salience, so facts summarized once are not lost to it.
Everything is written back in its original order.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwindow import SummaryRequest, SummaryResult
from ctxwindow.kit import NOVELTY_TOKENS, identifiers

#: The end of a sentence: the cheap look back (a stop) first, so that the abbreviation
#: checks run only after a stop (in that order the split is ~5x faster on long texts).
_SENTENCE = re.compile(
    r"(?<=[.!?])(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bvs\.)"
    r"(?<!\be\.g\.)(?<!\bi\.e\.)\s+(?=[A-Z0-9\"'(\[]|[a-z_][\w.\-]*: )|\n+"
)
#: The stand-in ctxwindow-pipeline's clear_tool_outputs sends for an output it cleared.
_CLEARED = re.compile(r"\[tool output of .* cleared by ctxwindow: [\d,]+ tokens\]")
_CALLS_LINE = re.compile(r"Called (\S+?)(?: x(\d+))?(?:: (.*))?\.", re.DOTALL)
_LIST_MARKER = re.compile(r"\d{1,3}[.)]|[-*\u2022]")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+|\d[\d,.:/-]*")
_CALL = re.compile(r"^(\S+) called ([\w.\-]+)\((.*)\)$", re.DOTALL)
_RESULT = re.compile(r"^([\w.\-]+) result: (.*)$", re.DOTALL)
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
#: Ends a piece cut to fit (see :func:`_head`).
CUT = " [...]"
#: How a collapsed line of tool calls begins, and how one of the user's sentences does.
CALLED = "Called "
USER = "User: "
#: A piece sharing this much of its words with one already kept is dropped (unless it
#: adds an identifier the summary lacks, see :meth:`_Held.repeated`).
NEAR_DUPLICATE = 0.8
#: Values listed per collapsed tool call line, and the shortest listed (a flag or a
#: count says little out of its call).
CALL_VALUES = 12
MIN_VALUE = 3
#: In an agent's history, salience counts this much beside the identifiers a piece adds.
AGENT_SALIENCE = 0.25


def sentences(text: str) -> list[str]:
    out: list[str] = []
    marker = ""
    for split in _SENTENCE.split(text):
        part = split.strip() if split else ""
        if _LIST_MARKER.fullmatch(part):  # "1." before its item: not a sentence of its own
            marker = f"{marker} {part}".strip()
        elif part:
            out.append(f"{marker} {part}" if marker else part)
            marker = ""
    return out


@dataclass
class Piece:
    """A candidate for the summary: its text, where it came from, and its standing."""

    text: str
    order: tuple[int, int]  # (text index, piece index): the original order
    instruction: bool = False  # the user's own words
    observation: bool = False  # from a tool result
    call: bool = False  # a collapsed line of tool calls
    said: str = ""  # the text without its "function:" heading, where identifiers are read

    @property
    def body(self) -> str:
        return self.said or self.text


def spoken(sentence: str) -> str:
    """A sentence without its heading (``Caroline: ``, ``User: ``, ``search: ``): what
    was said. The heading is how the summarizer's input names who spoke, not a fact: a
    nameless message is headed by its role, and in a chat whose speakers have names that
    role word is rare, so scored with the sentence it would rank every nameless line
    (session dates, say) above what people said."""
    speaker, sep, rest = sentence.partition(": ")
    return rest if sep and len(speaker) <= 40 and " " not in speaker.strip() else sentence


class Salience:
    """A sentence's salience: the names, dates, numbers and rare words of what was said
    (the heading aside), per square-rooted length. Each word's worth by the rarity table
    is worked out once: a summary of a long history scores thousands of pieces that
    share their words."""

    def __init__(self, rarity: dict[str, float]) -> None:
        self.rarity = rarity
        self._later = _WordValues(rarity)

    def __call__(self, sentence: str) -> float:
        words = _WORD.findall(spoken(sentence))
        if not words:
            return 0.0
        later = self._later.__getitem__
        score = _word_value(words[0], self.rarity, first=True) + sum(map(later, words[1:]))
        return score / math.sqrt(len(words))


class _WordValues(dict[str, float]):
    """A word's worth anywhere but first in its sentence, worked out when first asked."""

    def __init__(self, rarity: dict[str, float]) -> None:
        super().__init__()
        self.rarity = rarity

    def __missing__(self, word: str) -> float:
        value = self[word] = _word_value(word, self.rarity, first=False)
        return value


def _word_value(word: str, rarity: dict[str, float], first: bool) -> float:
    """A name (capitalised, but not as a sentence's first word), a date or a number
    counts one; a word that is not common adds its rarity."""
    lower = word.lower()
    common = lower in _COMMON
    fact = word[0].isdigit() or lower in _MONTHS or (word[0].isupper() and not first and not common)
    return (1.0 if fact else 0.0) + (0.0 if common else rarity.get(lower, 0.0))


def rarities(pool: Sequence[str]) -> dict[str, float]:
    """Inverse sentence frequency of each word: log(sentences / sentences with it)."""
    seen: Counter[str] = Counter()
    for sentence in pool:
        seen.update({w.lower() for w in _WORD.findall(sentence)})
    total = max(len(pool), 1)
    return {word: math.log(total / count) for word, count in seen.items()}


def pieces(texts: Sequence[str]) -> list[Piece]:
    """The texts cut into candidates: sentences of what people said, one line per
    called function (repeated calls collapsed), fields of tool results."""
    out: list[Piece] = []
    calls: dict[str, tuple[tuple[int, int], list[str], int]] = {}
    for number, text in enumerate(texts):
        for line in _messages(text):
            order = (number, len(out))
            call = _CALL.match(line)
            if call:
                first, arguments, count = calls.get(call.group(2), (order, [], 0))
                arguments.extend(v for v in _values(call.group(3)) if v not in arguments)
                calls[call.group(2)] = (first, arguments, count + 1)
                continue
            result = _RESULT.match(line)
            if result and _CLEARED.fullmatch(result.group(2)):
                continue  # a stand-in for a cleared output says nothing of what it held
            if result:
                for field, values in _fields(result.group(2)):
                    headed = f"{result.group(1)}: {field}"
                    out.append(Piece(headed, order, observation=True, said=values))
                continue
            speaker, sep, said = line.partition(": ")
            if sep and len(speaker) <= 40 and " " not in speaker.strip():
                user = speaker == "user"
                for sentence in sentences(said):
                    text_of = f"{USER}{sentence}" if user else f"{speaker}: {sentence}"
                    out.append(Piece(text_of, order, instruction=user))
            else:
                out.extend(Piece(sentence, order) for sentence in sentences(line))
    for function, (order, arguments, count) in calls.items():
        text = _calls_line(function, count, arguments)
        out.append(Piece(text, order, call=True, said=", ".join(arguments[:CALL_VALUES])))
    return sorted((p for p in out if p.text), key=lambda p: p.order)


def _previous(summary: str | None) -> list[str]:
    """The previous summary's pieces: one a line as this summarizer writes them (a call
    line's values may hold a full stop); an older summary's, by sentence."""
    if not summary:
        return []
    body = summary.removeprefix(PREFIX)
    if "\n" in body:
        return [line.strip() for line in body.split("\n") if line.strip()]
    return sentences(body)


def _messages(text: str) -> list[str]:
    """A unit's text (``unit_text`` with roles) as its messages, one each: a line
    indented by two spaces continues the message before it (a user's list of
    constraints, an indented JSON result), whatever it reads like."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("  ") and out:
            out[-1] += "\n" + line[2:]
        else:
            out.append(line)
    return out


def _values(arguments: str) -> list[str]:
    """The leaf values of a call's JSON arguments (the raw text if not JSON)."""
    try:
        parsed = json.loads(arguments)
    except (json.JSONDecodeError, RecursionError):
        return [arguments.strip()] if arguments.strip() else []
    return [text for text in map(_flat, _leaves(parsed)) if len(text) >= MIN_VALUE]


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [] if value in (None, "") else [value]


def _flat(value: Any, key: object = None) -> str:
    """A JSON value as compact text: ``key value`` pairs, nesting in brackets; an
    entry that only repeats its key (``"id"`` of an object filed under that id) goes."""
    if isinstance(value, dict):
        inner = ", ".join(
            f"{k} {_flat(v, k)}"
            for k, v in value.items()
            if v not in (None, "", [], {}) and str(v) != str(key)
        )
        return f"({inner})"
    if isinstance(value, list):
        return "[" + "; ".join(_flat(item) for item in value) + "]"
    return str(value)


def _fields(result: str) -> list[tuple[str, str]]:
    """A tool result as pieces, each with the text its identifiers are read from (the
    values, not the keys): a JSON object's top-level fields, a JSON list's items, else
    its sentences."""
    try:
        parsed = json.loads(result)
    except (json.JSONDecodeError, RecursionError):
        return [(sentence, sentence) for sentence in sentences(result)]
    if isinstance(parsed, dict):
        return [
            (f"{k} {_flat(v, k)}", " ".join(map(str, _leaves(v))))
            for k, v in parsed.items()
            if v not in (None, "", [], {})
        ]
    if isinstance(parsed, list):
        return [(_flat(item), " ".join(map(str, _leaves(item)))) for item in parsed]
    return [(str(parsed), str(parsed))]


class ExtractiveSummarizer:
    """Picks the most salient pieces within the target; no LLM, same input same output."""

    name = "extractive"
    requires_llm = False
    provider = None
    model = None
    max_input_tokens = 1_000_000
    #: No request framing: its input limit is all the texts' (see strategy._overhead).
    prompt_overhead = 0

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        previous = _previous(request.previous)
        fresh = pieces(request.texts)
        rarity = rarities([*previous, *(p.text for p in fresh)])
        budget = request.target_tokens - request.counter.count_text(PREFIX)
        count = request.counter.count_text
        chosen = _pick(previous, fresh, rarity, budget, request)
        if not chosen and fresh and min(count(p.text) + 1 for p in fresh) > budget:
            chosen = _head(fresh, Salience(rarity), budget, count)
        text = PREFIX + "\n".join(chosen)
        return SummaryResult(text if chosen else "")

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize(request)


def _pick(
    previous: Sequence[str],
    fresh: Sequence[Piece],
    rarity: dict[str, float],
    budget: int,
    request: SummaryRequest,
) -> list[str]:
    """A chat's: the most salient of the previous summary's sentences and the new ones.
    An agent's: the user's words first, then the other pieces for what they add
    (salience, and identifiers not yet in the summary), the previous summary's beside
    the new. Written in order."""
    count = request.counter.count_text
    room = budget
    score = Salience(rarity)
    if not _agent(previous, fresh):
        # A chat's summary is chosen afresh each time, the previous one's sentences
        # beside the new ones: kept first, it would fill the target once and then hold
        # the chat's first hours forever, whatever came after.
        pool = [Piece(sentence, (-1, index)) for index, sentence in enumerate(previous)]
        pool.extend(fresh)
        chosen: set[int] = set()
        _fill(pool, chosen, None, score, room, count)
        return [pool[index].text for index in sorted(chosen)]
    # An agent's: the user's words first (the previous summary's and the new ones
    # alike, so a constraint said mid-run gets in once the summary is full), then
    # everything else for what it adds; calls to one function on one line, the
    # previous summary's count and values merged with the new calls'.
    pool = _merged_calls(
        [Piece(sentence, (-1, index), instruction=sentence.startswith(USER))
         for index, sentence in enumerate(previous)],
        fresh,
    )  # fmt: skip
    kept: set[int] = set()
    covered: set[str] = set()
    users = {index for index, piece in enumerate(pool) if piece.instruction}
    room = _fill(pool, kept, covered, score, room, count, among=users)
    room = _cut_in(pool, kept, covered, score, room, count, among=users)
    _fill(pool, kept, covered, score, room, count)
    return [pool[index].text for index in sorted(kept, key=lambda i: pool[i].order)]


def _merged_calls(previous: list[Piece], fresh: Sequence[Piece]) -> list[Piece]:
    """The previous summary's sentences and the new pieces, a new line of calls to a
    function the summary already lists merged into its line (``x3`` and ``x2`` make
    ``x5``, the values of both): the line says what the whole run called."""
    lines = {}
    for piece in previous:
        found = _CALLS_LINE.fullmatch(piece.text)
        if found:
            lines[found.group(1)] = piece
            piece.call = True
    out = list(previous)
    said = {piece.text for piece in previous}
    for piece in fresh:
        if piece.text in said and not piece.call:  # said already (a request repeated)
            continue
        found = _CALLS_LINE.fullmatch(piece.text) if piece.call else None
        older = lines.get(found.group(1)) if found else None
        if found is None or older is None:
            out.append(piece)
            continue
        before = _CALLS_LINE.fullmatch(older.text)
        assert before is not None
        times = int(before.group(2) or 1) + int(found.group(2) or 1)
        shown = before.group(3) or ""  # values are compared with what the line shows:
        values = _listed(shown)  # one may hold ", " ("Paris, France"), read as two
        values += [value for value in _listed(found.group(3)) if value not in shown]
        older.text = _calls_line(found.group(1), times, values)
        older.said = ", ".join(values)
    return out


def _listed(shown: str | None) -> list[str]:
    return [v for v in (shown or "").removesuffix(", ...").split(", ") if v and v != "..."]


def _calls_line(function: str, times: int, values: list[str]) -> str:
    shown = ", ".join(values[:CALL_VALUES]) + (", ..." if len(values) > CALL_VALUES else "")
    return (
        f"{CALLED}{function}"
        + (f" x{times}" if times > 1 else "")
        + (f": {shown}." if shown else ".")
    )


def _head(
    fresh: Sequence[Piece], score: Salience, budget: int, count: Callable[[str], int]
) -> list[str]:
    """When no piece fits whole (one long sentence: a task pasted as a single paragraph),
    the start of the user's first words (else of the most salient piece), cut at a word
    to fit and marked as cut: a summary that opens the task beats none at all. (Only
    then: pieces that fit but are worth nothing make no summary.)"""
    said = [p for p in fresh if p.instruction] or sorted(fresh, key=lambda p: -score(p.text))
    cut = _cut(said[0].text, budget, count) if said else None
    return [cut] if cut else []


def _cut_in(
    pool: list[Piece],
    kept: set[int],
    covered: set[str],
    score: Salience,
    room: int,
    count: Callable[[str], int],
    among: Collection[int],
) -> int:
    """The first of the user's sentences (of those ``among``) left out for being too
    long for the room left, none of whose message is in the summary, cut at a word to
    fit and marked as cut (it replaces the whole in ``pool``). A task written as one
    long sentence, or a short one run on into filler, is the user's words too, and in
    an agent's history the small pieces always fit, so :func:`_head` never runs there:
    the summary would stand for the task without a word of it. Gives back the room
    left."""
    held = _Held(pool[index] for index in kept)
    in_summary = {_message_of(pool[index]) for index in kept}
    left_out = sorted((i for i in among if i not in kept), key=lambda i: pool[i].order)
    for index in left_out:
        piece = pool[index]
        worth = score(piece.text) > 0 or identifiers(piece.body)
        if _message_of(piece) in in_summary or not worth or held.repeated(piece):
            continue
        cut = _cut(piece.text, room, count, news_only=True)
        if cut is None:
            return room
        pool[index] = Piece(cut, piece.order, instruction=True)
        kept.add(index)
        covered |= identifiers(cut)
        return room - (count(cut) + 1)
    return room


def _message_of(piece: Piece) -> tuple[int, ...]:
    """What a piece was read from: a new text (its index), or its own line of the
    previous summary."""
    number, index = piece.order
    return (number,) if number >= 0 else (number, index)


def _cut(text: str, room: int, count: Callable[[str], int], news_only: bool = False) -> str | None:
    """The most words from the start of ``text`` that fit ``room`` (with a line break),
    marked with CUT when some are left out; None when not even one word fits.
    ``news_only``: ended at the last word not said before it, so that a run of filler
    ("please please ...") or a sentence that only says its words again takes no room
    that other pieces could use."""
    words = text.split()
    low, high = 0, len(words)  # the most words whose cut text fits
    while low < high:
        middle = (low + high + 1) // 2
        if count(" ".join(words[:middle]) + CUT) + 1 <= room:
            low = middle
        else:
            high = middle - 1
    if news_only:
        low = _last_new_word(words[:low]) + 1
    if not low:
        return None
    return " ".join(words[:low]) + (CUT if low < len(words) else "")


def _last_new_word(words: Sequence[str]) -> int:
    """The index of the last of ``words`` not said before it (case aside); -1 if none."""
    seen: set[str] = set()
    last = -1
    for index, word in enumerate(words):
        if word.lower() not in seen:
            seen.add(word.lower())
            last = index
    return last


def _agent(previous: Sequence[str], fresh: Sequence[Piece]) -> bool:
    """Whether this is an agent's history: tool calls or results among the new pieces,
    or a collapsed call line in the previous summary (a stretch of plain talk in an
    agent's run is still an agent's history)."""
    return any(piece.call or piece.observation for piece in fresh) or any(
        sentence.startswith(CALLED) for sentence in previous
    )


def _fill(
    fresh: Sequence[Piece],
    kept: set[int],
    covered: set[str] | None,
    score: Salience,
    room: int,
    count: Callable[[str], int],
    among: Collection[int] | None = None,
) -> int:
    """Take the other pieces (of those ``among``, if given) by value: salience, plus
    (``covered`` given, in an agent's history) the identifiers a piece adds per token,
    lazily re-valued as they get covered; a piece worth nothing (thanks, "Sure!") is
    not taken, nor one that nearly repeats a piece already kept (:class:`_Held`): a
    copy scores what its original did, and copies would fill the summary. Gives back
    the room left."""
    costs = {
        i: count(p.text) + 1
        for i, p in enumerate(fresh)
        if i not in kept and (among is None or i in among)
    }
    agent = covered is not None
    found = {i: identifiers(fresh[i].body) if covered is not None else frozenset() for i in costs}
    covered = set() if covered is None else covered
    base = {i: score(fresh[i].text) for i in costs}
    held = _Held(fresh[i] for i in kept)

    # in an agent's history, identifiers lead and salience (rare words: chatter scores
    # high there too) only breaks ties between pieces that add as much
    weight = AGENT_SALIENCE if agent else 1.0

    def value(index: int) -> float:
        novelty = len(found[index] - covered) * NOVELTY_TOKENS / costs[index]
        return weight * base[index] + novelty

    heap = [(-value(i), i) for i in costs if base[i] > 0 or found[i]]
    heapq.heapify(heap)
    while heap:
        _, index = heapq.heappop(heap)
        if costs[index] > room:
            continue
        fresh_value = value(index)
        if heap and fresh_value < -heap[0][0]:
            heapq.heappush(heap, (-fresh_value, index))
            continue
        if fresh_value <= 0:
            break
        if held.repeated(fresh[index]):
            continue
        kept.add(index)
        room -= costs[index]
        covered |= found[index]
        held.add(fresh[index])
    return room


class _Held:
    """What the summary holds so far, to tell a repeat from news: each kept piece's
    words, and the identifiers among them."""

    def __init__(self, kept: Iterable[Piece]) -> None:
        self.words: list[set[str]] = []
        self.identifiers: set[str] = set()
        for piece in kept:
            self.add(piece)

    def add(self, piece: Piece) -> None:
        self.words.append(_words(piece))
        self.identifiers |= identifiers(piece.body)

    def repeated(self, piece: Piece) -> bool:
        """Whether ``piece`` says again what a kept piece says (a request made every
        turn, a constraint pasted twice, a lookup made twice): the two share
        NEAR_DUPLICATE of their words, whatever the case and spacing, and it adds no
        identifier (an amount, an id, a path) the summary lacks, as a restated
        constraint with a new value does. One rule for every kind of piece."""
        words = _words(piece)
        if not any(_overlap(words, other) >= NEAR_DUPLICATE for other in self.words):
            return False
        return identifiers(piece.body) <= self.identifiers


def _words(piece: Piece) -> set[str]:
    """The words a piece is compared by: its text's, lower-cased."""
    return set(_WORD.findall(piece.text.lower()))


def _overlap(one: set[str], other: set[str]) -> float:
    """Jaccard similarity of two word sets."""
    union = one | other
    return len(one & other) / len(union) if union else 1.0
