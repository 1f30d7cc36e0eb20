"""Recent units verbatim, and one synthetic summary message standing for everything older
(two when the current turn outgrew the budget: one each side of the newest user message)."""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import inspect
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice, takewhile
from typing import Any, ClassVar

from ctxwindow import (
    BaseStrategy,
    History,
    LLMUsage,
    Message,
    Option,
    Selection,
    Summarizer,
    SummaryRequest,
    SummaryResult,
    TokenCounter,
    get_summarizer,
)
from ctxwindow.kit import keep_run, stretches
from ctxwindow_stores import cache_options
from ctxwindow_summarize.errors import SummarizerFailed
from ctxwindow_summarize.extractive import ExtractiveSummarizer
from ctxwindow_summarize.ledger import Candidates, Ledgers, exact_counter
from ctxwindow_summarize.llm import OpenAISummarizer, looks_like_error
from ctxwindow_summarize.rolling import (
    SIZES,
    Entry,
    Summary,
    SummaryCache,
    boundary,
    checkpoints,
    later_checkpoints,
    nearest_rung,
    rung,
)

DROP = "drop"
#: A summary shorter than this says nothing; below it the older units are dropped instead.
MIN_SUMMARY_TOKENS = 12
#: Checkpoints whose summaries are asked for at once when the boundary's is not held (the
#: previous summary is nearly always the newest checkpoint's); the older ones only when
#: none of these has one.
FIRST_LOOKUPS = 8
#: The summary message but its text: what the framing of one costs.
_FRAMING = Message("system", "")
#: What a summarizer adds to each request around the texts (its instructions, the
#: framing of the previous summary and of the new messages), when it does not say
#: (``prompt_overhead`` or ``count_overhead(counter)``): kept free under its
#: ``max_input_tokens``, at most a quarter of it. The ``openai`` summarizer counts its
#: own prompt.
PROMPT_OVERHEAD = 256
#: Cut-down summaries kept (see SummarizeWindow._fitted): a turn cuts the one it cut
#: the round before.
CUTS_KEPT = 16


def _share(value: float) -> str | None:
    return None if 0.0 < value < 1.0 else "must be between 0 and 1 (exclusive)"


def _chain(value: list[Any]) -> str | None:
    if not all(isinstance(item, str) and item for item in value):
        return "must be a list of summarizer names, such as ['extractive', 'drop']"
    return None


@dataclass(eq=False)  # each a visit's own: told apart by identity
class Outcome:
    """What summarizing one part produced on a visit, in indexes into the visit's
    candidates: the summary covers those in ``covered``; those in ``dropped`` are dropped."""

    summary: Summary | None
    covered: range
    dropped: range = range(0)
    failures: list[str] = field(default_factory=list)
    usage: _Usage | None = None
    #: Why the units it covers are not verbatim (see :data:`OLDER` and :data:`TURN`).
    why: str = ""
    #: What the record should say of the summary besides failures (a summary cut to fit).
    notes: list[str] = field(default_factory=list)


#: Why the newest units before the boundary are verbatim; and why, when a summary the
#: window sends was written from them too (its covers name them, see :func:`_place`).
VERBATIM = "verbatim, in the room the summary leaves"
WRITTEN_FROM = (
    f"{VERBATIM}; the summary was written from it too (its covers name it), to stand "
    "for it once newer messages take its room"
)


#: Why units are summarized: older than the recent part, or older rounds of a current
#: turn that outgrew the budget (summarized apart, after the newest user message).
OLDER = "older than the recent part; in the summary ({by})"
TURN = (
    "an older round of the current turn, which outgrew the budget; in the turn's own "
    "summary, after the newest user message ({by})"
)


class SummarizeWindow(BaseStrategy):
    """Keeps the recent units verbatim and one rolling summary of everything older; when
    the current turn outgrew the budget, a second one of its older rounds, after the
    newest user message (a summary sits where what it covers was).

    The summary is extended, never rewritten from a cut input: the previous summary plus
    the newly evicted units go to the summarizer together. It is written only when the
    recent part outgrows its room, so an LLM is called rarely; if it fails, the
    fallback chain runs, the previous summary is kept, and the record says what failed.
    """

    name = "summarize"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option(
            "summarizer",
            str,
            "extractive",
            "'extractive' (no LLM), 'openai' (any OpenAI-compatible endpoint), or a "
            "registered summarizer.",
        ),
        Option(
            "fallback",
            list,
            ["extractive", DROP],
            "Tried in order when the summarizer fails; 'drop' drops the evicted units "
            "and says so in the record.",
            check=_chain,
        ),
        Option(
            "on_error",
            str,
            "fallback",
            "'fallback', or 'raise' SummarizerFailed.",
            choices=("fallback", "raise"),
        ),
        Option(
            "summary_share",
            float,
            0.25,
            "Share of the budget for the summary message.",
            check=_share,
        ),
        Option(
            "low_water",
            float,
            0.3,
            "After summarizing, the verbatim part fills at least this share of its room; "
            "lower means rarer summarizer calls.",
            check=_share,
        ),
        *cache_options(
            "a summary",
            None,
            "Where summaries are kept: None / 'memory' (this process only), a SQLite file "
            "path, or a Redis URL ('redis://host:6379/0', shared by app replicas).",
        ),
        Option("llm_model", str, None, "Model name for 'openai'.", nullable=True),
        Option(
            "llm_base_url",
            str,
            None,
            "Endpoint for 'openai' (None: api.openai.com; e.g. http://127.0.0.1:8080/v1).",
            nullable=True,
        ),
        Option(
            "llm_api_key_env",
            str,
            "OPENAI_API_KEY",
            "Name of the environment variable holding the API key (the key itself is "
            "never in config).",
        ),
        Option("llm_timeout", float, 30.0, "Seconds per LLM call.", minimum=0.1),
        Option("llm_retries", int, 2, "Retries per LLM call.", minimum=0, maximum=10),
        Option(
            "llm_max_input",
            int,
            6000,
            "Most input tokens per LLM call; more is summarized in stages.",
            minimum=200,
        ),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.cache = SummaryCache(self.options["cache"], ttl=self.options["cache_ttl"])
        #: Summarizers that failed at a boundary are not called again for it, whatever
        #: the size asked (target 0; the size only for "no room", which depends on it):
        #: a failing LLM is tried once per checkpoint, not once per turn or round.
        self._failed: dict[tuple[str, int, str], str] = {}
        #: Held summaries cut down to a smaller room, by (summary, target, counter).
        self._cuts: OrderedDict[tuple[Summary, int, object], Summary | None] = OrderedDict()
        self._cuts_lock = threading.Lock()
        #: The summarizer calls under way, by attempt, with when their visit began: one
        #: still running a time limit after that belongs to a visit the host gave up on.
        self._running: dict[tuple[str, int, str], float] = {}
        self._running_lock = threading.Lock()
        self._ledgers = Ledgers()

    def check_ready(self) -> None:
        """Build the summarizers now: a missing model or key, or a registered summarizer
        lacking what the protocol needs, fails at configuration. A summarizer named twice
        (``extractive``, the default fallback, as the summarizer too) is tried once: it
        would write the same summary again, or fail again."""
        names = [self.options["summarizer"], *self.options["fallback"]]
        self._summarizers: list[Summarizer] = []
        for name in names:
            if name == DROP:
                continue
            summarizer = self._build(name)
            if all(summarizer.name != chosen.name for chosen in self._summarizers):
                self._summarizers.append(summarizer)
        self.requires_llm = bool(self._summarizers) and self._summarizers[0].requires_llm

    def _build(self, name: str) -> Summarizer:
        """The summarizer ``name`` names: ``extractive``; ``openai`` (or
        ``openai:<model>``) with the strategy's ``llm_*`` options; else a registered one
        (checked against the protocol by :func:`ctxwindow.get_summarizer`)."""
        family, _, argument = name.partition(":")
        if name == "extractive":
            return ExtractiveSummarizer()
        if family == "openai":
            return OpenAISummarizer(
                model=argument or self.options["llm_model"] or "",
                base_url=self.options["llm_base_url"],
                api_key_env=self.options["llm_api_key_env"],
                timeout=self.options["llm_timeout"],
                retries=self.options["llm_retries"],
                max_input_tokens=self.options["llm_max_input"],
            )
        summarizer: Summarizer = get_summarizer(name)
        return summarizer

    @property
    def billing(self) -> dict[str, Any] | None:
        """Who is paid for the summarizer's calls; the host checks it at configuration."""
        if not self.requires_llm:
            return None
        first = self._summarizers[0]
        return {
            "provider": getattr(first, "provider", None),
            "model": getattr(first, "model", None),
        }

    # -- choosing ------------------------------------------------------------------
    def choose(self, history: History) -> Selection:
        plan = self._plan(history, started=time.monotonic())
        try:
            return self._finish(history, plan, self._summarize(history, plan))
        finally:
            plan.candidates.close()

    async def achoose(self, history: History) -> Selection:
        """Summarizing (an LLM call) runs in a worker thread: the event loop keeps serving.
        It calls the summarizers' ``summarize``, as ``choose`` does (``asummarize`` is
        not used: the cache and the fallback chain are synchronous)."""
        return await asyncio.to_thread(self.choose, history)

    def _plan(self, history: History, started: float) -> _Plan:
        """Where the verbatim part starts. Checkpoints are spaced by the budget alone, not
        by the newest message's size, so they stay put as the chat grows."""
        candidates = self._ledgers.candidates(history)
        reserve = int(history.budget * self.options["summary_share"])
        room = max(0, history.budget - history.must_keep_tokens - reserve)
        step = _step(history, reserve, self.options["low_water"])
        start = boundary(candidates, room, step)
        framing = history.counter.count_message(_FRAMING)
        recent = candidates.tokens(len(candidates)) - candidates.tokens(start)
        left = history.budget - history.must_keep_tokens - recent
        split = _turn_split(history, candidates)
        summary_room = min(reserve, left) - framing
        base = rung(reserve - framing, SIZES)
        return _Plan(candidates, start, step, summary_room, framing, split, started, base)

    def _summarize(self, history: History, plan: _Plan) -> list[Outcome]:
        """One summary of the candidates before the boundary; or, when the boundary
        passed the newest user message (the current turn outgrew the budget), one of
        those before it and one of the turn's older rounds after it, so that neither
        stands for messages on both sides of a kept one. The two share the summary's
        room: the history's takes at most half, the turn's the rest."""
        start, split = plan.start, plan.split
        if start == 0:
            return []
        if not 0 < split < start:
            upper = split if split >= start else len(plan.candidates)
            part = range(start)
            return [self._summarize_part(history, plan, part, plan.summary_room, OLDER, upper)]
        room = plan.summary_room - plan.framing  # the second summary's framing
        older = self._summarize_part(history, plan, range(split), room // 2, OLDER)
        used = history.counter.count_text(older.summary.text) if older.summary else 0
        turn = range(split, start)
        last = len(plan.candidates)
        return [older, self._summarize_part(history, plan, turn, room - used, TURN, last)]

    def _summarize_part(
        self, history: History, plan: _Plan, part: range, room: int, why: str, upper: int = 0
    ) -> Outcome:
        """The summary of the candidates in ``part``, in at most ``room`` tokens: one held
        already (of this part, at any size on the ladder, cut down to fit when the room
        shrank: a growing turn's rounds call nothing; or of a later checkpoint up to
        ``upper``, which covers more and leaves the rest room too); else rolled on from
        the newest one held of an earlier checkpoint, or the previous one kept and the
        rest dropped when every summarizer failed."""
        candidates = plan.candidates
        if room < MIN_SUMMARY_TOKENS:
            # which summary: a turn that outgrew the budget has two, each may say this
            which = "the current turn's older rounds" if why == TURN else "the older history"
            said = (
                f"no room for a summary of {which}: the must-keep messages and the recent "
                f"part leave {max(0, room)} tokens for one (it needs {MIN_SUMMARY_TOKENS})"
            )
            return Outcome(None, range(part.start, part.start), part, [said], why=why)
        target = _target(plan.base, room)
        sizes = _sizes(plan.base, target)
        key = _part_key(candidates, part, part.stop)
        primary = self._summarizers[0].name if self._summarizers else DROP
        held = self.cache.get_many(primary, target, [key])  # nearly always, in memory
        found = (part.stop, held[key]) if held else None
        if found is None:
            later = later_checkpoints(candidates, part.stop, upper, plan.step) if upper else []
            found = self._held_at(plan, part, [*later[:FIRST_LOOKUPS], part.stop], sizes, room)
        if found is not None:
            stop, summary = found
            fitted, cut = self._fitted(summary, room, target, history)
            if fitted is not None:
                plan.start = max(plan.start, stop)  # a later checkpoint's: verbatim after it
                failed = self._failed.get((primary, 0, _part_key(candidates, part, stop)))
                if summary.summarizer == primary:  # its own, a late reply's say
                    failed = None
                retried = [f"{failed} (not retried at this boundary)"] if failed else []
                covered = range(part.start, stop)
                return Outcome(fitted, covered, failures=retried, why=why, notes=cut)
        held_before = self._newest_held(sizes, plan, part)
        previous_at, previous = held_before if held_before is not None else (part.start, None)
        request_texts = [candidates.text(index) for index in range(previous_at, part.stop)]
        failures: list[str] = []
        notes: list[str] = []
        usage = _Usage()
        for summarizer in self._summarizers:
            attempt = (summarizer.name, 0, key)
            abandoned = self._abandoned(attempt)
            if abandoned is not None:
                self._remember_failure(attempt, abandoned)
            failed = self._failed.get(attempt) or self._failed.get((summarizer.name, target, key))
            if failed is not None:
                failures.append(f"{failed} (not retried at this boundary)")
                continue
            if summarizer.name != primary:  # a fallback's own summary, written before
                own = self.cache.get(summarizer.name, target, key)
                if own is not None:
                    return Outcome(own, part, failures=failures, usage=usage, why=why)
            try:
                with self._call_under_way(attempt, plan.started):
                    text = _staged(
                        summarizer,
                        previous.text if previous else None,
                        request_texts,
                        target,
                        history,
                        usage,
                        notes,
                    )
            except _NoRoom as error:  # not the summarizer's failure: nothing fits the room
                failures.append(str(error))
                self._remember_failure((summarizer.name, target, key), str(error))
                continue
            except SummarizerFailed as error:
                if self.options["on_error"] == "raise":
                    raise
                failures.append(str(error))
                self._remember_failure(attempt, str(error))
                if isinstance(error.usage, LLMUsage):
                    usage.add(error.usage)
                continue
            # under its own name: a fallback's never stands in for the summarizer's
            # own summary, which a later visit (or a late reply) may still write
            summary = self.cache.put(summarizer.name, target, key, Summary(text, summarizer.name))
            return Outcome(summary, part, failures=failures, usage=usage, why=why, notes=notes)
        # Every summarizer failed: keep the previous summary, drop what it does not cover.
        # It may be held at a bigger size of the ladder than the room left now: cut down
        # to fit, as a held one of this part is, or else none is kept.
        if previous is not None:
            previous, cut = self._fitted(previous, room, target, history)
            notes.extend(cut)
            if previous is None:
                previous_at = part.start
        covered, dropped = range(part.start, previous_at), range(previous_at, part.stop)
        return Outcome(previous, covered, dropped, failures, usage, why, notes=notes)

    def _eligible(self, key: str) -> list[str]:
        """Whose summaries of the prefix ``key`` a visit may send: the summarizer's;
        the fallbacks' too once it failed there (a later visit of a new process asks
        it again, and the fallback's summary never hides the one it writes)."""
        names = [summarizer.name for summarizer in self._summarizers]
        if names and (names[0], 0, key) in self._failed:
            return names
        return names[:1]

    def _held_at(
        self, plan: _Plan, part: range, stops: list[int], sizes: list[int], room: int
    ) -> tuple[int, Summary] | None:
        """A held summary of ``part`` ending at one of ``stops`` (most covering first),
        at any of ``sizes`` (in their order), the summarizer's before a fallback's: the
        first that fits ``room``, else the first (to be cut down), in one round trip."""
        keys = {stop: _part_key(plan.candidates, part, stop) for stop in stops}
        wanted: list[tuple[int, Entry]] = [
            (stop, (name, size, keys[stop]))
            for stop in stops
            for name in self._eligible(keys[stop])
            for size in sizes
        ]
        held = self.cache.get_any([entry for _, entry in wanted])
        found = [(stop, held[entry]) for stop, entry in wanted if entry in held]
        count = plan.candidates.history.counter.count_text
        fitting = [(stop, summary) for stop, summary in found if count(summary.text) <= room]
        return (fitting or found)[0] if found else None

    def _fitted(
        self, summary: Summary, room: int, target: int, history: History
    ) -> tuple[Summary | None, list[str]]:
        """``summary``, cut down extractively to ``target`` when it is longer than the
        ``room`` left for it now (an agent's turn grew into the summary's room): the same
        stretch is not summarized again, so a growing turn calls nothing, and the note
        says what was cut. None when the cut leaves nothing."""
        counter = history.counter
        size = counter.count_text(summary.text)
        if size <= room:
            return summary, []
        memo = (summary, target, exact_counter(history))
        with self._cuts_lock:
            cut = self._cuts.get(memo, summary)
        if cut is summary:
            request = SummaryRequest(summary.text, [], target, counter)
            text = ExtractiveSummarizer().summarize(request).text
            cut = Summary(text, summary.summarizer) if text.strip() else None
            with self._cuts_lock:
                self._cuts[memo] = cut
                while len(self._cuts) > CUTS_KEPT:
                    self._cuts.popitem(last=False)
        if cut is None:
            return None, []
        note = (
            f"the summary by {summary.summarizer!r} ({size:,} tokens) was cut down "
            f"extractively to {target:,} tokens to fit the {room:,} left for it now; the "
            f"same messages were not summarized again"
        )
        return cut, [note]

    def _newest_held(
        self, sizes: list[int], plan: _Plan, part: range
    ) -> tuple[int, Summary] | None:
        """The newest checkpoint before ``part``'s end whose summary of ``part`` from its
        start is held, with the summary (any summarizer's, any size of ``sizes``; the
        summarizer's own first): what the next one rolls on from. The newest few
        checkpoints are asked for in one round trip, the rest only when none of those
        has one."""
        candidates = plan.candidates
        inside = takewhile(part.start.__lt__, checkpoints(candidates, part.stop, plan.step))
        names = [summarizer.name for summarizer in self._summarizers]
        for batch in _lookups(inside):
            keys = [_part_key(candidates, part, index) for index in batch]
            wanted = [
                (index, (name, size, key))
                for index, key in zip(batch, keys, strict=True)
                for name in names
                for size in sizes
            ]
            held = self.cache.get_any([entry for _, entry in wanted])
            for index, entry in wanted:
                if entry in held:
                    return index, held[entry]
        return None

    def _remember_failure(self, attempt: tuple[str, int, str], why: str) -> None:
        if len(self._failed) >= 1_024:
            self._failed.clear()
        self._failed[attempt] = why

    def _abandoned(self, attempt: tuple[str, int, str]) -> str | None:
        """Why ``attempt`` counts as failed at this boundary, when an earlier visit's call
        of it is still running past the strategy's time limit: the host gave up on that
        visit (the limit bounds its whole choice), and calling again would add one more
        hung call and stuck thread per turn. A call within the limit belongs to a visit
        still waiting on it, and is left alone."""
        limit = self.options["time_limit"]
        with self._running_lock:
            began = self._running.get(attempt)
        if limit is None or began is None or time.monotonic() - began < limit:
            return None
        return str(
            SummarizerFailed(
                attempt[0],
                f"still writing this boundary's summary for an earlier visit, which ran "
                f"out of its time limit of {limit:g} s",
            )
        )

    @contextmanager
    def _call_under_way(self, attempt: tuple[str, int, str], began: float) -> Iterator[None]:
        """Note ``attempt`` as under way, for a visit that began at ``began``, while it
        runs (see :meth:`_abandoned`)."""
        with self._running_lock:
            if len(self._running) >= 1_024:
                self._running.clear()
            self._running[attempt] = began
        try:
            yield
        finally:
            with self._running_lock:
                if self._running.get(attempt) == began:
                    del self._running[attempt]

    def _finish(self, history: History, plan: _Plan, outcomes: list[Outcome]) -> Selection:
        selection = history.selection()
        candidates = plan.candidates
        usage = _Usage()
        for outcome in outcomes:
            selection.notes.extend(outcome.failures)
            selection.notes.extend(outcome.notes)
            if outcome.usage is not None:
                usage.merge(outcome.usage)
        selection.llm = usage.total()
        selection.notes.extend(usage.notes())
        # The verbatim part fills what the summaries leave, not only its own room: the
        # boundary sits at a checkpoint (a summary is written once per step), so that
        # room is filled from low_water to whole, and the rest would go unused. The
        # newest units a summary was written from are then kept verbatim as well.
        first, sent = _verbatim_from(history, plan, outcomes)
        # the older part first, while the kept set holds the must-keep units alone: each
        # run summarized or dropped is looked for among the units kept so far
        for outcome in outcomes:
            if outcome in sent:
                _place(selection, candidates, outcome, first)
            why = "; ".join(outcome.failures) or "no summary could be written"
            why = f"dropped, not summarized ({why})"
            dropped = range(outcome.dropped.start, min(outcome.dropped.stop, first))
            _decide_all(selection, candidates, dropped, "dropped", why)
        _keep_verbatim(selection, candidates, range(first, plan.start), sent)
        recent = range(plan.start, len(candidates))
        keep_run(selection, _units_of(candidates, recent), "recent, verbatim")
        return selection


def _lookups(checkpoints: Iterator[int]) -> Iterator[list[int]]:
    """The prefixes whose summaries :meth:`SummarizeWindow._newest_held` asks for, in
    batches: the newest FIRST_LOOKUPS checkpoints', the rest."""
    yield list(islice(checkpoints, FIRST_LOOKUPS))
    yield list(checkpoints)


def _target(base: int, room: int) -> int:
    """The size a summary is asked for in ``room`` tokens: ``base`` (the summary's
    whole room, on the ladder of :data:`SIZES`) or the size below ``room`` if that is
    less, so that the size (part of the cache key) changes only when the room crosses
    a rung; the room itself when that is too small to say anything."""
    target = min(base, rung(room, SIZES))
    return target if target >= MIN_SUMMARY_TOKENS else room


def _sizes(base: int, target: int) -> list[int]:
    """The sizes a summary of ``target`` may have been written at before: ``target``;
    then those of a larger room, from the size above ``base`` (a budget a little larger
    on another turn) down; then the size below ``target`` (one a little smaller)."""
    # found by bisection: the ladder has hundreds of sizes, and a visit asks once
    at = bisect.bisect_right(SIZES, base)  # the first size above base
    over = bisect.bisect_right(SIZES, target)  # the first size above target
    under = bisect.bisect_left(SIZES, target)  # the first size at or above target
    larger = SIZES[over:at] if over < at else ()
    return [target, *SIZES[at : at + 1], *larger[::-1], *SIZES[max(0, under - 1) : under]]


def _first_fitting(
    history: History, candidates: Candidates, summaries: Iterable[Summary | None]
) -> int:
    """The first candidate from which the rest fits beside the must-keep messages and
    the summaries (their text: the messages the window sends, whatever they cover)."""
    count = history.counter.count_message
    used = sum(count(summary.counted) for summary in summaries if summary and summary.text)
    room = history.budget - history.must_keep_tokens - used
    total = candidates.tokens(len(candidates))
    return 0 if total <= room else candidates.first_reaching(total - room)


def _verbatim_from(
    history: History, plan: _Plan, outcomes: list[Outcome]
) -> tuple[int, list[Outcome]]:
    """The first verbatim candidate, and the outcomes whose summaries the window sends.
    A summary all of whose units fit verbatim beside the others is not sent (the
    turn's, when what the turn's outgrowing left fits after all), and its room goes to
    the verbatim part."""
    if not any(outcome.summary is not None or outcome.dropped for outcome in outcomes):
        return plan.start, []
    sent = [outcome for outcome in outcomes if outcome.summary is not None]
    while True:
        fitting = _first_fitting(history, plan.candidates, (o.summary for o in sent))
        first = min(plan.start, fitting)
        needed = [outcome for outcome in sent if outcome.covered.start < first]
        if len(needed) == len(sent):
            return first, sent
        sent = needed


def _keep_verbatim(
    selection: Selection, candidates: Candidates, verbatim: range, sent: list[Outcome]
) -> None:
    """Keep the candidates in ``verbatim``, saying of those a sent summary was written
    from that it was: its covers name them and its text may hold their words (written
    once per checkpoint, it stands for them on the later turns that have no room for
    them), so the record and the summary message say the same of them."""
    written = (
        range(max(o.covered.start, verbatim.start), min(o.covered.stop, verbatim.stop))
        for o in sent
    )
    at = verbatim.start
    for run in sorted((run for run in written if run), key=lambda run: run.start):
        keep_run(selection, _units_of(candidates, range(at, run.start)), VERBATIM)
        keep_run(selection, _units_of(candidates, run), WRITTEN_FROM)
        at = run.stop
    keep_run(selection, _units_of(candidates, range(at, verbatim.stop)), VERBATIM)


def _place(selection: Selection, candidates: Candidates, outcome: Outcome, first: int) -> None:
    """Record the units only ``outcome``'s summary holds (those before ``first``) as
    summarized, and put the summary right after the last of them: where what it
    covers was. Its covers name every unit it was written from, the same tuple on
    every visit until the next checkpoint, though the newest of those may be verbatim
    (the record says so of them: see :func:`_keep_verbatim`)."""
    summarized = range(outcome.covered.start, min(outcome.covered.stop, first))
    if outcome.summary is None or not summarized:
        return
    why = outcome.why.format(by=outcome.summary.summarizer)
    _decide_all(selection, candidates, summarized, "summarized", why)
    message = outcome.summary.sent(candidates.refs_of(outcome.covered))
    selection.add_synthetic(message, before_unit=candidates.unit(summarized.stop - 1) + 1)


def _turn_split(history: History, candidates: Candidates) -> int:
    """How many candidates come before the newest user message (all of them when there
    is none): a summary never stands for messages on both sides of it, which the
    window always keeps."""
    if history.newest_user is None:
        return len(candidates)
    return candidates.before(history.current_turn.start)


def _part_key(candidates: Candidates, part: range, index: int) -> str:
    """The cache key of a summary of the candidates from ``part``'s start to ``index``:
    the prefix's key for a part that starts at the first (a rolling summary of the
    history); else a hash of both ends' prefix keys, so that a summary of the current
    turn's rounds alone is never taken for one of everything before them."""
    if not part.start:
        return candidates.key(index)
    both = f"from:{candidates.key(part.start)}:to:{candidates.key(index)}"
    return hashlib.sha256(both.encode("ascii")).hexdigest()


@dataclass
class _Plan:
    candidates: Candidates
    start: int
    step: int
    summary_room: int
    #: What the framing of a summary message costs.
    framing: int
    #: The candidates before the newest user message (see :func:`_turn_split`).
    split: int
    #: When the visit began choosing (``time.monotonic()``): see ``_abandoned``.
    started: float
    #: The summary's whole room on the ladder: the size it is asked for (see _target).
    base: int


class _Usage:
    """What a visit's calls spent, by (provider, model) in the order first called: a
    fallback model's spend is never put under the summarizer's model."""

    def __init__(self) -> None:
        self.by: dict[tuple[str | None, str | None], list[int]] = {}

    def add(self, usage: LLMUsage) -> None:
        spent = self.by.setdefault((usage.provider, usage.model), [0, 0, 0])
        spent[0] += usage.calls
        spent[1] += usage.prompt_tokens
        spent[2] += usage.completion_tokens

    def merge(self, other: _Usage) -> None:
        for (provider, model), (calls, prompt, completion) in other.by.items():
            self.add(LLMUsage(provider, model, calls, prompt, completion))

    def total(self) -> LLMUsage | None:
        """All of it in one LLMUsage, which names one provider and model: two models'
        names joined by ``+`` (as a pipeline joins its stages'), and :meth:`notes`
        says what each spent."""
        calls = sum(spent[0] for spent in self.by.values())
        if not calls:
            return None
        providers = list(dict.fromkeys(p for p, _ in self.by if p))
        models = list(dict.fromkeys(m for _, m in self.by if m))
        return LLMUsage(
            "+".join(providers) or None,
            "+".join(models) or None,
            calls,
            sum(spent[1] for spent in self.by.values()),
            sum(spent[2] for spent in self.by.values()),
        )

    def notes(self) -> list[str]:
        """What each model spent, when more than one was called."""
        if len([spent for spent in self.by.values() if spent[0]]) < 2:
            return []
        each = "; ".join(
            f"{model or '?'} ({provider or '?'}): {calls} call{'s' * (calls != 1)}, "
            f"{prompt:,} prompt and {completion:,} completion tokens"
            for (provider, model), (calls, prompt, completion) in self.by.items()
            if calls
        )
        return [f"LLM usage by model: {each}"]


def _step(history: History, reserve: int, low_water: float) -> int:
    """The tokens between checkpoints: ``1 - low_water`` of the verbatim part's room,
    halved as often as the room the must-keep messages leave now needs. The newest user
    message changes every turn, and an agent's current turn (must-keep) grows round by
    round: checkpoints spaced by the room they leave would move on every round, and no
    summary written at one would be found again (the summarizer, an LLM call, called
    on each). The room the messages that stay (:func:`_stays`) leave sets the largest
    step; it is halved only when the room left now is smaller than a step (a bigger step
    summarizes more than must go, and the summary, no bigger, holds less of each fact),
    so the checkpoints stay put from round to round. The largest step is on the ladder
    (:func:`nearest_rung`), and the others its halvings: a system prompt or budget a few
    percent longer or shorter from turn to turn moves no checkpoint, and a halved
    step's grid holds the coarser one's checkpoints."""
    share = 1 - low_water
    largest = max(1, nearest_rung(int(_room_left(history, reserve, _stays) * share)))
    now = _room_left(history, reserve, lambda h, unit: h.must_keep[unit] != NEWEST_USER)
    step = largest
    while step > 1 and step > now:
        step //= 2
    return step


def _room_left(history: History, reserve: int, counts: Callable[[History, int], bool]) -> int:
    """The budget less the summary's reserve and the must-keep units ``counts``."""
    always = sum(history.unit_tokens(unit) for unit in history.must_keep if counts(history, unit))
    return max(1, history.budget - reserve - always)


#: The reason the core gives the newest user message: it changes every turn.
NEWEST_USER = "newest user message"


def _stays(history: History, unit: int) -> bool:
    """Whether a must-keep unit stays so from round to round: the task statement, or a
    unit holding an instruction (a system or developer message the caller wrote) or a
    pinned message."""
    if unit == history.task_unit:
        return True
    for position in history.span(unit):
        message = history.messages[position]
        if message.pinned or (message.role in INSTRUCTIONS and not message.synthetic):
            return True
    return False


#: The roles whose messages are the caller's standing instructions.
INSTRUCTIONS = ("system", "developer")


def _decide_all(
    selection: Selection, candidates: Candidates, run: range, action: str, reason: str
) -> None:
    """``selection.summarize`` (or ``drop``) of each candidate in ``run``, a range of
    units at a time: a summary stands for nearly the whole history, and a call per unit
    would cost a turn a pass over it. The candidates of a run are every unit between its
    first and last but the must-keep ones, so the ranges are the gaps between those."""
    if not run:
        return
    decide = selection.summarize if action == "summarized" else selection.drop
    for part in stretches(selection.history, _units_of(candidates, run)):
        decide(part, reason)


def _units_of(candidates: Candidates, run: range) -> range:
    """The units from the first candidate of ``run`` to its last: the candidates, and
    the must-keep units between them."""
    if not run:
        return range(0)
    return range(candidates.unit(run.start), candidates.unit(run.stop - 1) + 1)


def _staged(
    summarizer: Summarizer,
    previous: str | None,
    texts: list[str],
    target: int,
    history: History,
    usage: _Usage,
    notes: list[str] | None = None,
) -> str:
    """Summarize, in stages when the input exceeds the summarizer's limit: chunks first,
    then the previous summary with the chunk summaries. The limit holds for the whole
    request: the summarizer's own framing (:func:`_overhead`) is counted, and a single
    text longer than the limit is cut (its head and tail kept, the cut marked). The
    previous summary is never cut; one that leaves no room under the limit for the new
    messages is a failure (the fallback chain runs)."""
    counter = history.counter
    overhead = _overhead(summarizer, counter)
    limit = summarizer.max_input_tokens - overhead
    used = counter.count_text(previous or "")
    room = limit - used
    if room < MIN_SUMMARY_TOKENS:
        raise SummarizerFailed(
            summarizer.name,
            f"the previous summary ({used:,} tokens) leaves no room for the new messages "
            f"under its input limit of {summarizer.max_input_tokens:,} tokens (less "
            f"{overhead:,} for its instructions); raise its max_input_tokens "
            f"(llm_max_input for 'openai') or lower summary_share",
        )
    texts = [_cut_to(text, limit - 1, counter) for text in texts]  # each fits a call alone
    sizes = _sized(texts, counter)
    if len(texts) > 1 and sum(sizes) > room:
        texts = _reduced(summarizer, texts, sizes, room, target, history, usage, limit)
    if len(texts) == 1:  # the one left must fit beside the previous summary
        texts = [_cut_to(texts[0], room - 1, counter)]
    request = SummaryRequest(previous, texts, target, counter)
    return _summarize_once(summarizer, request, usage, notes)


def _overhead(summarizer: Summarizer, counter: TokenCounter) -> int:
    """What ``summarizer`` adds to a request's texts, as this visit's ``counter`` counts
    it when the summarizer can say (``count_overhead(counter)``, as the ``openai`` one
    does from its own prompt); else its ``prompt_overhead``; else PROMPT_OVERHEAD, at
    most a quarter of its limit."""
    count = getattr(summarizer, "count_overhead", None)
    said = count(counter) if callable(count) else getattr(summarizer, "prompt_overhead", None)
    if isinstance(said, int) and not isinstance(said, bool) and said >= 0:
        return said
    return min(PROMPT_OVERHEAD, summarizer.max_input_tokens // 4)


#: Marks where a text too long for the summarizer's input limit was cut.
CUT_MARK = "\n[... {tokens:,} tokens cut here: too long for the summarizer's input ...]\n"


def _cut_to(text: str, limit: int, counter: TokenCounter) -> str:
    """``text`` if it fits ``limit`` tokens, else its head and tail with the cut marked
    between them: what a single message longer than a call's input (a file an agent
    read) can send."""
    size = counter.count_text(text)
    if size <= limit:
        return text
    keep = max(0, limit - counter.count_text(CUT_MARK.format(tokens=size)) - 2)
    chars = int(len(text) * keep / size / 2)
    while True:
        cut = text[:chars] + CUT_MARK.format(tokens=size - keep) + text[len(text) - chars :]
        if counter.count_text(cut) <= limit or chars == 0:
            return cut if counter.count_text(cut) <= limit else text[: max(0, limit)]
        chars = chars * 9 // 10


def _reduced(
    summarizer: Summarizer,
    texts: list[str],
    sizes: list[int],
    room: int,
    target: int,
    history: History,
    usage: _Usage,
    limit: int,
) -> list[str]:
    """``texts`` summarized chunk by chunk, stage after stage, until they fit in ``room``
    (or one is left). Chunks hold at most ``limit`` tokens (the summarizer's input limit
    less its framing). Chunk summaries are written to at most a third of that (a
    summary cut down to its target may come out a token or two over it), so that the
    next stage packs two or more into each call and at least halves their number: the
    stages, and so the calls, are bounded by the input (about twice its texts at most).
    They are also small enough that, when they can be, they all fit in ``room`` at once.
    A stage that does not shrink the texts is a failure, not a loop."""
    counter = history.counter
    longest = max(1, min(target, limit // 3))
    for _ in range(len(texts).bit_length() + 2):
        chunks = _chunks(texts, sizes, limit)
        piece = min(longest, max(room // len(chunks), min(room, longest // 4)))
        shorter: list[str] = []
        for chunk in chunks:
            if len(chunk) == 1 and counter.count_text(chunk[0]) <= piece:
                shorter.append(chunk[0])  # already as short as its summary would be
                continue
            request = SummaryRequest(None, chunk, max(1, piece), counter)
            shorter.append(_summarize_once(summarizer, request, usage))
        shorter_sizes = _sized(shorter, counter)
        if len(shorter) == 1 or sum(shorter_sizes) <= room:
            return shorter
        if len(shorter) == len(texts) and sum(shorter_sizes) >= sum(sizes):
            break
        texts, sizes = shorter, shorter_sizes
    raise SummarizerFailed(
        summarizer.name,
        f"its summaries of the chunks did not shrink to fit its input limit of "
        f"{summarizer.max_input_tokens:,} tokens beside the previous summary",
    )


def _sized(texts: list[str], counter: TokenCounter) -> list[int]:
    """What each text costs in a request: its tokens and the line break after it."""
    return [counter.count_text(text) + 1 for text in texts]


def _chunks(texts: list[str], sizes: list[int], limit: int) -> list[list[str]]:
    """``texts`` in order, in runs of at most ``limit`` tokens (a longer text alone)."""
    chunks: list[list[str]] = [[]]
    size = 0
    for text, cost in zip(texts, sizes, strict=True):
        if chunks[-1] and size + cost > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(text)
        size += cost
    return chunks


class _NoRoom(Exception):
    """The room left for a summary holds nothing the extractive summarizer would keep:
    the record says there was no room, not that a summarizer failed."""


def _summarize_once(
    summarizer: Summarizer,
    request: SummaryRequest,
    usage: _Usage,
    notes: list[str] | None = None,
) -> str:
    """One call of ``summarizer``, its reply checked. Whatever goes wrong (an exception
    it raises, a reply that is not a SummaryResult, error text, an empty summary) is a
    SummarizerFailed naming it and what was wrong, so the fallback chain runs whichever
    summarizer it is; an interrupt (KeyboardInterrupt, SystemExit) is not caught. The
    call's usage is counted once: here when the reply is a summary, else by the caller
    from the SummarizerFailed. A reply too long for its target is cut down
    extractively, and ``notes`` (the final call's) say so."""
    name = summarizer.name
    try:
        result = summarizer.summarize(request)
    except SummarizerFailed:
        raise
    except Exception as error:
        raise SummarizerFailed(name, _raised(error)) from error
    problem = _malformed(result)
    if problem is not None:
        raise SummarizerFailed(name, problem)
    text = result.text.strip()
    target, counter = request.target_tokens, request.counter
    if not text and isinstance(summarizer, ExtractiveSummarizer):
        raise _NoRoom(
            f"no room for a summary: the {target} tokens left for one hold nothing the "
            f"extractive summarizer would keep"
        )
    if looks_like_error(text):
        said = f"returned no summary: {text[:80]!r}" if text else "returned an empty summary"
        raise SummarizerFailed(name, said, result.usage)
    if result.usage is not None:
        usage.add(result.usage)
    size = counter.count_text(text)
    if size > target:  # an LLM that ignored max_tokens: cut it down
        text = ExtractiveSummarizer().summarize(SummaryRequest(text, [], target, counter)).text
        if not text.strip():
            raise SummarizerFailed(
                name, "wrote a summary too long to fit, with nothing worth keeping"
            )
        if notes is not None:
            notes.append(
                f"summarizer {name!r} wrote {size:,} tokens for a summary of at most "
                f"{target:,}: cut down extractively to fit"
            )
    return text


def _raised(error: Exception) -> str:
    """A summarizer's own exception in a line: its type and message (cut short)."""
    said = f"raised {type(error).__name__}"
    message = " ".join(str(error).split())
    if message:
        said += f": {message[:200]}"
    if isinstance(error, NotImplementedError):
        said += (
            " (the summarize strategy calls summarize(), under aselect too, in a worker "
            "thread; asummarize() is optional and not called)"
        )
    return said


def _malformed(result: object) -> str | None:
    """What makes ``result`` not a well-formed SummaryResult, if anything."""
    if not isinstance(result, SummaryResult):
        if inspect.iscoroutine(result):
            result.close()  # never awaited: closed, so Python does not warn of it
            return "returned a coroutine, not a SummaryResult: summarize() must not be async"
        return f"returned {type(result).__name__}, not a ctxwindow.SummaryResult"
    if not isinstance(result.text, str):
        return f"returned a SummaryResult whose text is {type(result.text).__name__}, not str"
    if result.usage is not None and not isinstance(result.usage, LLMUsage):
        return (
            f"returned a SummaryResult whose usage is {type(result.usage).__name__}, not "
            f"ctxwindow.LLMUsage (or None)"
        )
    return None
