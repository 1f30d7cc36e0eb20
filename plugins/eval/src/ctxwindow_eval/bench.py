"""Speed and memory of strategies on agent-shaped histories, like for like.

For each strategy and history length, through every entry point a user has:

- **cold**: a history this process has never seen (a new seed: nothing of it is
  remembered or cached), through a ``Windower``, the one-call ``ctxwindow.select`` and
  the LangChain adapter (on ``BaseMessage`` objects, what a LangChain app holds);
- **warm**: the same history grown by one message, a chat or agent loop's next turn:
  through ``Windower`` + ``Conversation``, through ``ctxwindow.select`` on the grown
  list, and through the adapter on the grown list.

Anchors, measured in the same run on the same history and counted the same way
(characters / 4 plus 3 per message, every piece of text ctxwindow's approx counter
counts: a tool result's call id too): a tight loop that only counts each dict's text
(the least a cold visit can cost); LangChain's ``trim_messages`` on ``BaseMessage``
objects, cold (a per-message counter) and warm (the counter cached per message, as an
app would); and, for a strategy with an embedder, the model encoding what a cold visit
embeds (one text per unit of an unseen history of the cold runs' size: the cold limit)
and the new message alone (the per-turn limit). Each ``trim_messages`` window is
checked to hold the same number of tokens as ours within 5%; a row says when it does
not. Medians of repeated runs: the machine is shared.

Cold against cold, warm against warm: a cold run is a new process's first visit, with
the strategy built and its model, if any, loaded (untimed, before any cold run). Before
each cold run, untimed, what the process remembers of histories read before is emptied
(the runner's memory of the lists it read and the LangChain adapter's of its
conversions: every bench history opens with the same system message, so a remembered
one would be compared with), and a full collection empties the CPU caches, as a
process's first visit finds them (the anchors of cold runs follow a full collection
too). Warm turns run back to back with the collector paused, as :mod:`timeit` runs
them; the ``Windower`` + ``Conversation`` turn and its per-turn anchors (the cached
``trim_messages``, the model encoding the new message) run by turns, in blocks of
:data:`WARM_BLOCK` turns of each, so that a slow spell of the shared machine falls on
both sides of their ratios. The warm turn and the cached ``trim_messages`` are also
timed after a full collection (``*_cold_caches_ms``), for a loop whose turns follow
other work of the app's.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeVar

import ctxwindow
from ctxwindow import (
    ApproxCounter,
    Conversation,
    cached_windower,
    describe_strategies,
    from_config,
    get_embedder,
    remember_histories,
)
from ctxwindow.errors import CtxWindowError
from ctxwindow.kit import unit_text
from ctxwindow_eval.runner import StrategySpec

SIZES = (1_000, 10_000, 100_000)
#: The shortest history the bench times (a system prompt alone).
MIN_SIZE = 1
BUDGET = 4_000
#: The anchors' windows must hold this close to our window's tokens to compare.
LIKE_FOR_LIKE = 0.05
#: Turns each job runs in a row when a warm turn is timed beside its anchors: within a
#: block its caches stay warm (a loop's turns), and a slow spell of the shared machine
#: falls on every job (see :func:`alternated_ms`).
WARM_BLOCK = 5
#: Fresh interpreters timed for the cost of ``import ctxwindow``.
IMPORT_RUNS = 11
#: Variables dropped from the probes' environment: with this one set, every import
#: compiles its modules afresh, which no installed app pays.
IMPORT_ENV_DROPPED = ("PYTHONDONTWRITEBYTECODE",)
#: Above this many messages, a strategy with a model times cold through the Windower only.
MODEL_COLD_ENTRY_POINTS_UP_TO = 1_000
#: The words the synthetic messages are made of.
WORDS = "the of plan trip hotel flight price city morning budget call result data".split()


def synthetic_history(
    size: int, seed: int = 7, tool_words: tuple[int, int] = (8, 120)
) -> list[dict[str, Any]]:
    """An agent's history of ``size`` messages: a system prompt, user and assistant
    turns of varied length, a parallel tool call every tenth turn whose results run to
    ``tool_words`` words, and one pinned message (the task statement). It ends on a
    user message: the request the next window is for."""
    rng = random.Random(seed)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."}]
    call = 0
    while len(history) < size:
        turn = len(history)
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 120)))
        if turn % 10 == 5 and size - len(history) >= 3:
            ids = [f"call_{call}", f"call_{call + 1}"]
            call += 2
            history.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {"name": "lookup", "arguments": f'{{"q": "{text[:30]}"}}'},
                        }
                        for i in ids
                    ],
                }
            )
            for i in ids:
                words = rng.randint(*tool_words)
                output = " ".join(rng.choice(WORDS) for _ in range(words))
                history.append({"role": "tool", "tool_call_id": i, "content": output})
            continue
        role = "user" if turn % 2 or len(history) == size - 1 else "assistant"
        message: dict[str, Any] = {"role": role, "content": text}
        if turn == 3:  # one pinned message: the task statement
            message["metadata"] = {"pinned": True}
        history.append(message)
    return history


def agent_history(size: int, seed: int = 7) -> list[dict[str, Any]]:
    """The bench's history: :func:`synthetic_history` with large tool outputs (60 to
    600 words, as search results and file reads are)."""
    return synthetic_history(size, seed, tool_words=(60, 600))


@dataclass
class BenchRow:
    """One strategy at one history length: medians in milliseconds (None: not measured,
    see ``notes``)."""

    strategy: str
    messages: int
    history_tokens: int
    count_ms: float
    cold_ms: float | None
    warm_ms: float
    select_cold_ms: float | None
    select_warm_ms: float
    adapter_cold_ms: float | None = None
    adapter_warm_ms: float | None = None
    trim_ms: float | None = None
    trim_cached_ms: float | None = None
    trim_tokens_ratio: float | None = None
    encode_all_ms: float | None = None
    encode_new_ms: float | None = None
    #: The same texts through the model's PyTorch path, when the strategy runs another
    #: (ONNX): what the faster path saves on a cold visit.
    encode_all_torch_ms: float | None = None
    window_tokens: int = 0
    notes: list[str] = field(default_factory=list)
    #: The warm turn and the cached ``trim_messages`` timed after a full collection, CPU
    #: caches cold (as a loop's turn may run after the app's other work): for reference
    #: beside the warm figures, which are timed back to back.
    warm_cold_caches_ms: float | None = None
    trim_cached_cold_caches_ms: float | None = None

    def ratios(self) -> dict[str, float | None]:
        """The comparisons the bars are stated in (None when a side is missing)."""

        def over(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None or b == 0 else significant(a / b)

        return {
            "cold_over_count": over(self.cold_ms, self.count_ms),
            "cold_over_trim": over(self.cold_ms, self.trim_ms),
            "trim_cached_over_warm": over(self.trim_cached_ms, self.warm_ms),
            "trim_cached_over_warm_cold_caches": over(
                self.trim_cached_cold_caches_ms, self.warm_cold_caches_ms
            ),
            "select_cold_over_warm": over(self.select_cold_ms, self.select_warm_ms),
            "select_warm_over_conversation": over(self.select_warm_ms, self.warm_ms),
            "adapter_cold_over_warm": over(self.adapter_cold_ms, self.adapter_warm_ms),
            "adapter_warm_over_conversation": over(self.adapter_warm_ms, self.warm_ms),
            "warm_over_encode_new": over(self.warm_ms, self.encode_new_ms),
            "encode_all_torch_over_encode_all": over(self.encode_all_torch_ms, self.encode_all_ms),
        }

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, float):
                out[key] = round(value, 4)
        out.update(self.ratios())
        return out


def significant(value: float, figures: int = 3) -> float:
    """``value`` to two decimals, and more below 1 to keep ``figures`` significant
    ones: a ratio of 0.0038 is 0.0038, not 0.0."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(2, figures - 1 - math.floor(math.log10(abs(value)))))


def median_ms(work: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``work()`` with a full collection before each run: a cold
    figure, each run starting as a process's first visit would, its CPU caches emptied
    by the collector's pass over every object (the anchors of cold runs are timed so)."""
    times = []
    for _ in range(repeats):
        gc.collect()
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def warm_median_ms(work: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``work()`` run back to back, the collector paused during the
    series (:mod:`timeit`'s convention): a loop's next turn. Timed after a full
    collection instead (:func:`median_ms`), a turn of a fraction of a millisecond
    measures mostly the refilling of the caches the collection emptied."""
    (times,) = _series((work,), repeats)
    return statistics.median(times) * 1000


def alternated_ms(jobs: Sequence[Callable[[], Any]], repeats: int, block: int = 1) -> list[float]:
    """Median wall times of each of ``jobs``, run by turns (``block`` runs of one, then
    of the next) as :func:`warm_median_ms` runs one, so that a ratio of two compares
    runs made under the same load of a shared machine: a slow spell falls on both.
    Within a block each job runs back to back, its caches warm, as a loop's turns."""
    return [statistics.median(times) * 1000 for times in _series(jobs, repeats, block)]


def _series(jobs: Sequence[Callable[[], Any]], repeats: int, block: int = 1) -> list[list[float]]:
    """Each job's wall times, ``repeats`` of them, in rounds of ``block`` runs of each
    job in turn, back to back."""
    times: list[list[float]] = [[] for _ in jobs]
    with collector_paused():
        for done in range(0, repeats, block):
            for job, into in zip(jobs, times, strict=True):
                for _ in range(min(block, repeats - done)):
                    started = time.perf_counter()
                    job()
                    into.append(time.perf_counter() - started)
    return times


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The collector run once, then paused until the block ends (restored as it was)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def forget_histories() -> None:
    """Empty what this process remembers of the histories it read: the runner's memory
    of the plain lists visits read (:func:`ctxwindow.remember_histories`: bounds of
    nothing forget them all; the bounds are then put back) and the LangChain adapter's
    remembered conversions. A cold run must find neither: every bench history opens
    with the same system message, so each remembered one would be compared with it."""
    lists, items = remember_histories(0, 0)
    remember_histories(lists, items)
    adapter = sys.modules.get("ctxwindow_adapters.langchain")  # not imported: it holds none
    if adapter is not None:
        # no public way to empty it (it is bounded as the runner's is): our own bench
        # reaches into the adapter's memory, as a new process would find it, empty
        adapter._READS.remembered.clear()


def median_each_ms(
    work: Callable[[Any], Any],
    inputs: Sequence[Any],
    before: Callable[[], None] = forget_histories,
) -> float:
    """Median wall time of ``work(x)`` for each prepared input (made untimed), each
    after ``before()`` (by default :func:`forget_histories`) and a full collection, both
    untimed: cold, as a new process's first visit, and as :func:`median_ms`."""
    times = []
    for item in inputs:
        before()
        gc.collect()
        started = time.perf_counter()
        work(item)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _repeats(size: int) -> int:
    return max(3, min(15, 150_000 // size))


_TURN_NUMBERS = itertools.count(1)


def _turns() -> Iterator[dict[str, Any]]:
    """New user messages for warm runs, each unlike any before in this process: a text
    another row already sent (the one-call API keeps its windowers, and their caches,
    from row to row) would be a cache hit, not a turn."""
    for number in _TURN_NUMBERS:
        yield {"role": "user", "content": f"and one more question, number {number}?"}


# -- anchors ---------------------------------------------------------------------
def tight_count(history: Sequence[dict[str, Any]], counter: ApproxCounter) -> int:
    """The least a cold visit can do: count each dict's text once, nothing else. The
    text is what ctxwindow's approx counter counts of the bench's messages (string
    content, a name, each tool call's name and arguments, a tool result's call id): the
    lengths of a message's pieces summed (no string is built), over
    ``chars_per_token``, rounded up once."""
    overhead, per = counter.message_overhead, counter.chars_per_token
    total = 0
    for message in history:
        content = message.get("content")
        chars = len(content) if isinstance(content, str) else 0
        name = message.get("name")
        if name:
            chars += len(name)
        for call in message.get("tool_calls") or ():
            function = call["function"]
            chars += len(function["name"]) + len(function["arguments"])
        call_id = message.get("tool_call_id")
        if call_id:
            chars += len(call_id)
        total += overhead + math.ceil(chars / per)
    return total


class _LangChain:
    """LangChain's side: the same histories as BaseMessages, ``trim_messages`` with the
    same counting, and our adapter. None of it when langchain-core or the adapter is
    missing."""

    def __init__(self) -> None:
        from langchain_core.messages import convert_to_messages, trim_messages

        from ctxwindow_adapters import langchain as adapter  # the adapter under test

        self.convert = convert_to_messages
        self.trim = trim_messages
        self.adapter = adapter
        self.counter = ApproxCounter()

    @classmethod
    def load(cls) -> _LangChain | None:
        loaded = cls.load_or_why()
        return loaded if isinstance(loaded, _LangChain) else None

    @classmethod
    def load_or_why(cls) -> _LangChain | str:
        """The LangChain side, else what is missing (the note on the bench's row)."""
        try:
            return cls()
        except ImportError as error:
            return _missing(error)

    def messages(self, history: Sequence[dict[str, Any]]) -> list[Any]:
        plain = [{k: v for k, v in m.items() if k != "metadata"} for m in history]
        return list(self.convert(plain))

    def count(self, message: Any) -> int:
        """Characters / 4 plus 3, as ctxwindow's approx counter counts the same message:
        its text, name, tool calls (name and arguments) and a tool result's call id."""
        chars = len(message.content) if isinstance(message.content, str) else 0
        if isinstance(message.name, str):
            chars += len(message.name)
        for call in getattr(message, "tool_calls", None) or ():
            chars += len(call["name"]) + len(json.dumps(call["args"]))
        call_id = getattr(message, "tool_call_id", None)
        if isinstance(call_id, str):
            chars += len(call_id)
        counter = self.counter
        return counter.message_overhead + math.ceil(chars / counter.chars_per_token)

    def trim_window(
        self, messages: list[Any], budget: int, count: Callable[[Any], int]
    ) -> list[Any]:
        """``trim_messages`` keeping the newest messages that fit, from a human message
        on, the system message kept (as LangChain's docs advise for chat models)."""
        return list(
            self.trim(
                messages,
                max_tokens=budget,
                strategy="last",
                token_counter=lambda batch: sum(map(count, batch)),
                include_system=True,
                start_on="human",
            )
        )


#: What brings the LangChain side: langchain-core and the adapter under test. No square
#: brackets: ``ctxwindow bench`` prints notes as rich markup, which takes ``[langchain]``
#: for a style and drops it.
LANGCHAIN_EXTRA = (
    "ctxwindow-eval's langchain extra brings langchain-core 0.3.46 or later and ctxwindow-adapters"
)


def _missing(error: ImportError) -> str:
    """What the ImportError says is missing, and the command that brings it."""
    found = error if error.name else error.__cause__
    name = (getattr(found, "name", None) or "").split(".")[0]
    if name in ("langchain_core", "ctxwindow_adapters") and isinstance(found, ModuleNotFoundError):
        what = f"{name.replace('_', '-')} is not installed"
    else:  # installed, but does not import (a langchain-core too old for the adapter)
        what = f"the LangChain side does not import: {error}" + (
            f" ({error.__cause__})" if error.__cause__ is not None else ""
        )
    return f"{what}: no adapter or trim_messages figures ({LANGCHAIN_EXTRA})"


# -- one row ---------------------------------------------------------------------
#: The seeds of cold runs' histories: never the base history's (7), never one twice.
_UNSEEN_SEEDS = itertools.count(1_000)


def bench_strategy(
    name: str,
    size: int,
    budget: int = BUDGET,
    repeats: int | None = None,
    history: Callable[[int, int], list[dict[str, Any]]] = agent_history,
) -> BenchRow:
    """One row; ``name`` is a strategy spec (``NAME`` or ``NAME:key=value,...``)."""
    spec = StrategySpec.parse(name)
    options = spec.run_options
    repeats = repeats or _repeats(size)
    counter = ApproxCounter()
    config = {"strategy": spec.name, "budget": budget, "counter": "approx", **options}
    windower = from_config(config)
    embedder = getattr(windower.strategy, "embedder", None)
    # the one-call API and the adapter share this configuration's Windower: built now,
    # as a process serving requests has built it, not in the first cold run
    shared = cached_windower(spec.name, budget, counter="approx", **options)
    for model in _models(windower, shared):
        load_model(model)  # a cold run is a process's first visit, its model loaded
    # a cold run with a model embeds the whole history, and one at 100,000 messages takes
    # seconds: once per entry point is plenty (and the noise is small beside it)
    cold_runs = 1 if embedder is not None or size >= 100_000 else repeats
    base = history(size, 7)

    def unseen() -> list[list[dict[str, Any]]]:
        """Histories this process has not seen: one per cold run of one entry point. Each
        seed is used once per process, as a history read before (by another strategy's
        row, through the runner's memory of the lists it read) would not be cold."""
        return [history(size, next(_UNSEEN_SEEDS)) for _ in range(cold_runs)]

    notes: list[str] = []
    # With a model, every cold entry point embeds the whole history: the model's time
    # (encode_all_ms), the same three times over. Beyond the smallest size only the
    # Windower's cold run is timed; the others would add an hour to a 10k row.
    each_cold = embedder is None or size <= MODEL_COLD_ENTRY_POINTS_UP_TO
    if not each_cold:
        notes.append(
            "cold through `select` and the adapter not timed: each embeds the whole "
            "history, as the Windower's cold run and the encoding anchor do"
        )
    count_ms = median_ms(lambda: tight_count(base, counter), repeats)
    cold_ms = median_each_ms(windower.select, unseen())

    conversation = Conversation(base)
    window = windower.select(conversation)
    turns = _turns()
    anchor_turns = (f"{turn['content']} (anchor)" for turn in _turns())

    def grow_conversation() -> None:
        conversation.append(next(turns))
        windower.select(conversation)

    # the per-turn anchors (the cached trim_messages, the model encoding the new message)
    # timed by turns beside our warm turn, as the machine is then
    langchain = _LangChain.load_or_why()
    trim_turn = None
    if not isinstance(langchain, str):  # the warm series and the one with caches cold
        trim_turn = _cached_trim_turn(langchain, base, budget, repeats * 6)
    jobs = [grow_conversation]
    if embedder is not None:
        jobs.append(lambda: embedder.embed([next(anchor_turns)]))
    if trim_turn is not None:
        jobs.append(trim_turn)
    timed = alternated_ms(jobs, repeats * 3, WARM_BLOCK)
    warm_ms = timed[0]
    encode_new_ms = timed[1] if embedder is not None else None
    warm_cold_caches_ms = median_ms(grow_conversation, repeats * 3)

    def one_call(messages: list[dict[str, Any]]) -> None:
        ctxwindow.select(messages, budget, spec.name, counter="approx", **options)

    select_cold_ms = median_each_ms(one_call, unseen()) if each_cold else None
    grown = list(base)
    one_call(grown)

    def grow_list() -> None:
        grown.append(next(turns))
        one_call(grown)

    select_warm_ms = warm_median_ms(grow_list, repeats * 3)

    row = BenchRow(
        name,
        size,
        window.record.tokens_before,
        count_ms,
        cold_ms,
        warm_ms,
        select_cold_ms,
        select_warm_ms,
        window_tokens=window.tokens,
        notes=notes,
        warm_cold_caches_ms=warm_cold_caches_ms,
    )
    if isinstance(langchain, str) or trim_turn is None:
        row.notes.append(str(langchain))
    else:
        row.trim_cached_ms = timed[-1]
        row.trim_cached_cold_caches_ms = median_ms(trim_turn, repeats * 3)
        cold = unseen() if each_cold else []
        _langchain_rows(row, langchain, spec.name, options, base, cold, budget, repeats)
    if embedder is not None:
        row.encode_new_ms = encode_new_ms
        # what a cold run embeds, of a history as long as the cold runs' and never seen
        texts = cold_texts(history(size, next(_UNSEEN_SEEDS)))
        row.encode_all_ms = encode_all_ms(embedder, texts)
        torch = _torch_twin(embedder) if each_cold else None
        if torch is not None:  # the very same texts
            torch.embed(["the model loaded before the clock starts, as the other's was"])
            row.encode_all_torch_ms = encode_all_ms(torch, texts)
    return row


#: Numbers for the texts that load a model: each embedded once, never again.
_LOADS = itertools.count(1)


def load_model(embedder: Any) -> None:
    """Load ``embedder``'s model now, untimed: with its ``preload()`` when it has one,
    else by embedding one text no run embeds again."""
    preload = getattr(embedder, "preload", None)
    if callable(preload):
        preload()
    else:
        embedder.embed([f"the model loaded before the clock starts, load {next(_LOADS)}"])


def _models(*windowers: Any) -> list[Any]:
    """The embedders of the windowers' strategies (each once)."""
    found = (getattr(w.strategy, "embedder", None) for w in windowers)
    return list({id(e): e for e in found if e is not None}.values())


def _langchain_rows(
    row: BenchRow,
    langchain: _LangChain,
    name: str,
    options: dict[str, Any],
    base: list[dict[str, Any]],
    unseen: list[list[dict[str, Any]]],
    budget: int,
    repeats: int,
) -> None:
    """The adapter's cold and warm figures and the cold trim_messages anchor, on the row."""
    new_for_adapter = _made_turns(langchain, repeats * 3)

    def adapter(messages: list[Any]) -> Any:
        return langchain.adapter.select(messages, budget, name, counter="approx", **options)

    if unseen:
        row.adapter_cold_ms = median_each_ms(adapter, [langchain.messages(h) for h in unseen])
    grown = langchain.messages(base)
    adapter(grown)

    def grow_adapter() -> None:
        grown.append(next(new_for_adapter))
        adapter(grown)

    row.adapter_warm_ms = warm_median_ms(grow_adapter, repeats * 3)

    messages = langchain.messages(base)
    row.trim_ms = median_ms(
        lambda: langchain.trim_window(messages, budget, langchain.count), max(3, repeats // 2)
    )
    trimmed = langchain.trim_window(messages, budget, langchain.count)
    where = {id(m): i for i, m in enumerate(messages)}
    ours = Conversation(base).view(ApproxCounter(), budget)
    tokens = sum(ours.tokens(where[id(m)]) for m in trimmed)
    row.trim_tokens_ratio = tokens / row.window_tokens if row.window_tokens else None
    if row.trim_tokens_ratio is not None and abs(row.trim_tokens_ratio - 1) > LIKE_FOR_LIKE:
        row.notes.append(
            f"trim_messages' window holds {row.trim_tokens_ratio:.2f}x our window's tokens: "
            f"not within {LIKE_FOR_LIKE:.0%}, so its times compare less than like for like"
        )


def _made_turns(langchain: _LangChain, count: int) -> Iterator[Any]:
    """New BaseMessages made before the clock starts: an app holds each already."""
    return iter(langchain.messages(list(itertools.islice(_turns(), count))))


def _cached_trim_turn(
    langchain: _LangChain, base: list[dict[str, Any]], budget: int, turns: int
) -> Callable[[], None]:
    """A turn of ``trim_messages`` with a cached per-message counter, on BaseMessages
    of ``base`` growing by one message a turn; the ``turns`` new messages made before
    the clock starts, as an app holds each already."""
    cache: dict[int, int] = {}

    def cached(message: Any) -> int:
        tokens = cache.get(id(message))
        if tokens is None:
            tokens = cache[id(message)] = langchain.count(message)
        return tokens

    growing = langchain.messages(base)
    langchain.trim_window(growing, budget, cached)
    new_messages = _made_turns(langchain, turns)

    def grow_trim() -> None:
        growing.append(next(new_messages))
        langchain.trim_window(growing, budget, cached)

    return grow_trim


#: Numbers for the encoding anchor's texts: no text of one anchor is another's.
_ANCHORS = itertools.count(1)


def cold_texts(history: Sequence[dict[str, Any]]) -> list[str]:
    """What a cold visit of a strategy with a model embeds of ``history`` (one never
    seen): each unit's text (:func:`ctxwindow.kit.unit_text`; a tool exchange is one
    unit) and the query, each text once, as the semantic strategy embeds them through
    its cache. Each ends in a mark of its own: no cache has seen them."""
    view = Conversation(history).view(ApproxCounter(), BUDGET)
    texts = [unit_text(view, unit) for unit in range(len(view.units))]
    query = view.effective_query
    if query.strip():  # without one, the strategy embeds nothing to match it with
        texts.append(query)
    mark = f" (anchor {next(_ANCHORS)})"
    return [text + mark for text in dict.fromkeys(texts)]


def encode_all_ms(embedder: Any, texts: Sequence[str]) -> float:
    """The model's own cold cost: encoding ``texts`` (:func:`cold_texts`) in one call."""
    started = time.perf_counter()
    embedder.embed(list(texts))
    return (time.perf_counter() - started) * 1000


def _torch_twin(embedder: Any) -> Any | None:
    """The same sentence-transformers model on its PyTorch path, for an embedder running
    another backend; None for any other embedder (or one already on torch)."""
    backend, model = getattr(embedder, "backend", None), getattr(embedder, "model_name", None)
    if backend in (None, "torch") or not isinstance(model, str):
        return None
    try:
        return get_embedder(f"{model}@torch")
    except CtxWindowError:
        return None


def no_llm_strategies() -> list[str]:
    """Every installed strategy that needs no LLM."""
    return [s["name"] for s in describe_strategies() if not s["requires_llm"]]


def default_strategies(skipped: Callable[[str], None] | None = None) -> list[str]:
    """Every installed strategy that needs no LLM and can be built with its defaults;
    ``skipped`` is told of each other one and why (a ``pipeline`` needs its stages),
    before anything runs rather than minutes into a run."""
    names = []
    for name in no_llm_strategies():
        try:
            from_config({"strategy": name, "budget": BUDGET})
        except CtxWindowError as error:
            if skipped:
                skipped(f"skipped {name}: {error} (name it with -s and its options to run it)")
            continue
        names.append(name)
    return names


def run(
    strategies: Sequence[str] | None = None,
    sizes: Sequence[int] = SIZES,
    progress: Callable[[str], None] | None = None,
    repeats: int | None = None,
    budget: int = BUDGET,
) -> list[BenchRow]:
    rows = []
    for name in strategies or default_strategies():
        for size in sizes:
            if progress:
                progress(f"{name} at {size:,} messages")
            rows.append(bench_strategy(name, size, budget, repeats))
    return rows


def summary(rows: Sequence[BenchRow]) -> dict[str, dict[str, float | None]]:
    """Per strategy, how warm cost grows with the history: warm at the largest length
    over warm at the smallest (1.0 is flat), for each entry point."""
    out: dict[str, dict[str, float | None]] = {}
    for name, small, large in extremes(rows):
        out[name] = {
            "smallest": small.messages,
            "largest": large.messages,
            "warm_growth": _growth(large.warm_ms, small.warm_ms),
            "select_warm_growth": _growth(large.select_warm_ms, small.select_warm_ms),
            "adapter_warm_growth": _growth(large.adapter_warm_ms, small.adapter_warm_ms),
        }
    return out


R = TypeVar("R", bound="Sized")


class Sized(Protocol):
    """A result row of one strategy at one history length."""

    strategy: str
    messages: int


def extremes(rows: Sequence[R]) -> Iterator[tuple[str, R, R]]:
    """Each strategy's rows at the smallest and the largest history length."""
    for name in dict.fromkeys(row.strategy for row in rows):
        mine = sorted((r for r in rows if r.strategy == name), key=lambda r: r.messages)
        yield name, mine[0], mine[-1]


def _growth(large: float | None, small: float | None) -> float | None:
    return None if large is None or not small else round(large / small, 2)


def import_ms(runs: int = IMPORT_RUNS) -> float:
    """Median time of ``import ctxwindow`` in a fresh interpreter (what every process of
    an app pays once; the interpreter's own start is not counted), from compiled
    bytecode as an installed app imports it: one discarded probe first writes any
    stale ``.pyc`` files, and the probes run without ``PYTHONDONTWRITEBYTECODE``."""
    probe = (
        "import time; started = time.perf_counter(); import ctxwindow; "
        "print(time.perf_counter() - started)"
    )
    environment = {
        name: value for name, value in os.environ.items() if name not in IMPORT_ENV_DROPPED
    }

    def timed() -> float:
        return float(
            subprocess.run(
                [sys.executable, "-c", probe],
                capture_output=True,
                text=True,
                check=True,
                env=environment,
            ).stdout
        )

    timed()  # the warm-up: compiles what is stale, and is not counted
    return round(statistics.median(timed() for _ in range(runs)) * 1000, 2)


def to_json(rows: Sequence[BenchRow], budget: int = BUDGET, imports: float | None = None) -> str:
    """The results file; ``imports`` is :func:`import_ms` measured in the same run."""
    return json.dumps(
        {
            "budget": budget,
            "counter": "approx",
            "machine": to_json_machine(),
            "import_ms": imports,
            "rows": [row.to_dict() for row in rows],
            "summary": summary(rows),
        },
        indent=2,
    )


def to_json_machine() -> dict[str, Any]:
    """The machine a run was made on, and what else ran: the 1-minute load average as
    the run ended (None off Unix)."""
    return {
        "python": platform.python_version(),
        "processor": platform.machine(),
        "cpus": _cpus(),
        "load": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def _cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count()
