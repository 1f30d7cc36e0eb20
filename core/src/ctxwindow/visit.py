"""One visit of a strategy: the host's work before and after the strategy chooses.

Before: check the arguments, read and count the history, apply the orphan policy,
return early when everything fits, apply the oversize policy. After: build the window
in the caller's kind of objects, check the contract, write the record.

With a time limit, the strategy chooses in a worker thread (or, async, a task) that the
host waits on for at most that long. Python cannot kill a thread: a strategy that never
returns keeps its thread (a daemon, so it does not hold the process open) until it
does, but its late answer is discarded and it cannot change the window or record the
host returned, since the host keeps its own copy of everything it reports. Async, the
strategy's task is cancelled; one that chose in ``asyncio.to_thread`` keeps that thread
of the loop's default executor busy until it returns, and ``asyncio.run`` waits for
such threads when it ends (a long-lived loop, a server's, does not end).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from ctxwindow import workers
from ctxwindow.contract import check_window, overhead_problem, stand_in_problems
from ctxwindow.errors import (
    BudgetTooSmall,
    ContractViolation,
    InvalidBudget,
    InvalidQuery,
    InvalidSelection,
    OrphanToolResult,
    VisitTimeout,
)
from ctxwindow.history import Conversation, History, Selection
from ctxwindow.messages import ContentPart, Message
from ctxwindow.window import Decision, Window, WindowRecord, decisions_from

if TYPE_CHECKING:
    from ctxwindow.strategy import BaseStrategy

T = TypeVar("T")

TRUNCATION_MARKER = "\n[... {removed} characters cut by ctxwindow to fit the token budget]"
#: The reason for each unit the host keeps when a strategy ran out of time.
RECENT_REASON = "among the newest units that fit (the strategy ran out of time)"
OLDER_REASON = "outside the newest units that fit (the strategy ran out of time)"


@dataclasses.dataclass(frozen=True)
class TimeLimit:
    """How long a strategy may take to choose, and what the host does past it."""

    seconds: float
    on_timeout: str = "raise"  # or "recent"

    @classmethod
    def of(cls, strategy: object) -> TimeLimit | None:
        """The limit a strategy's own options set (``time_limit``), if any."""
        options = getattr(strategy, "options", None)
        if not isinstance(options, Mapping) or options.get("time_limit") is None:
            return None
        return cls(float(options["time_limit"]), str(options.get("on_timeout", "raise")))

    def note(self, strategy: str) -> str:
        return (
            f"strategy {strategy!r} ran out of its time limit of {self.seconds:g} s; the "
            f"host kept the must-keep messages and the newest units that fit"
        )


def check_budget(budget: object) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise InvalidBudget(
            f"budget must be a positive int (tokens), got {type(budget).__name__} {budget!r}"
        )
    if budget <= 0:
        raise InvalidBudget(f"budget must be a positive int (tokens), got {budget}")
    return budget


def check_query(query: object) -> str | None:
    if query is not None and not isinstance(query, str):
        raise InvalidQuery(f"query must be a string or None, got {type(query).__name__}")
    return query


def strategy_limit(strategy: object, budget: int, distribution: str | None = None) -> int:
    """The budget less the strategy's declared overhead, both checked."""
    overhead = getattr(strategy, "overhead_tokens", 0)
    name = getattr(strategy, "name", type(strategy).__name__)
    problem = overhead_problem(overhead)
    if problem:
        from ctxwindow.plugins import distribution_of

        raise ContractViolation(str(name), distribution or distribution_of(strategy), [problem])
    limit: int = budget - overhead
    if limit <= 0:
        raise InvalidBudget(
            f"budget {budget} leaves nothing once strategy {name!r} takes "
            f"its overhead of {overhead} tokens"
        )
    return limit


@dataclasses.dataclass
class _Chosen:
    """The host's own copy of a strategy's selection, checked: a Selection changed
    after the visit cannot change its window or its record."""

    actions: list[str]
    reasons: list[str | None]
    default_reason: str
    scores: dict[int, float]
    kept: set[int]
    synthetic: list[tuple[int, Message]]
    notes: tuple[str, ...]
    llm: Any
    stand_ins: dict[int, Message] = dataclasses.field(default_factory=dict)
    stages: tuple[WindowRecord, ...] = ()

    def reason(self, unit: int) -> str:
        return self.reasons[unit] or self.default_reason


class _Visit:
    """The state of one visit between preparing and finishing."""

    def __init__(
        self, strategy: BaseStrategy, messages: Any, budget: object, counter: Any, query: object
    ) -> None:
        from ctxwindow.registry import get_counter

        self.started = time.perf_counter()
        self.strategy = strategy
        self.budget = check_budget(budget)
        self.limit = strategy_limit(strategy, self.budget)
        self.counter = get_counter(counter)
        conversation = messages if isinstance(messages, Conversation) else Conversation(messages)
        self.history: History = conversation.view(self.counter, self.limit, check_query(query))
        #: What must stay, copied before the strategy runs: the check trusts this alone.
        self.must_keep: Mapping[int, str] = MappingProxyType(dict(self.history.must_keep))
        #: The host's own stand-ins (a cut newest user message), by position.
        self.replaced: dict[int, Message] = {}
        self.tokens_before = self.history.total_tokens  # before any cut of the newest message
        self.notes: list[str] = []
        self.defect_decisions: list[Decision] = []
        self._apply_orphan_policy()

    # -- before ------------------------------------------------------------------
    def _apply_orphan_policy(self) -> None:
        history = self.history
        for defect in history.defects:
            if self.strategy.options["orphans"] == "raise":
                raise OrphanToolResult(
                    defect.start,
                    f"{defect.problem}; fix the history or pass orphans='drop'",
                )
            positions = tuple(range(defect.start, defect.stop))
            self.notes.append(
                f"dropped messages {defect.start}-{defect.stop - 1}: {defect.problem}"
            )
            reason = defect.problem
            pinned = [p for p in positions if history.messages[p].pinned]
            if pinned:
                listed = ", ".join(map(str, pinned))
                reason += (
                    f"; dropped although pinned (message{'s' if len(pinned) > 1 else ''} "
                    f"{listed}): a broken tool exchange cannot be sent"
                )
            self.defect_decisions.append(
                Decision(
                    unit=-1,
                    positions=positions,
                    ids=tuple(history.message_id(p) for p in positions),
                    action="dropped",
                    reason=reason,
                    tokens=sum(history.tokens(p) for p in positions),
                )
            )

    def fits_untouched(self) -> bool:
        history = self.history
        return (
            not history.defects
            and history.total_tokens <= self.limit
            and not self.strategy.engages_within_budget(history)
        )

    def apply_oversize_policy(self) -> None:
        history = self.history
        needed = history.must_keep_tokens
        if needed <= self.limit:
            return
        newest = history.newest_user
        if self.strategy.options["oversize"] != "truncate" or newest is None:
            raise BudgetTooSmall(needed, self.limit)
        message = history.messages[newest]
        room = history.tokens(newest) - (needed - self.limit)
        # drafts are counted past the cache, so that they do not crowd it
        replacement = _truncate(message, room, self.counter.count_uncached)
        if replacement is None:
            raise BudgetTooSmall(
                needed,
                self.limit,
                "shorten the system or pinned messages: even cut to nothing, the newest "
                "user message leaves them over budget",
            )
        history._replace(newest, replacement)
        self.replaced[newest] = replacement
        self.notes.append(
            f"truncated message {newest} from {len(message.text)} to "
            f"{len(replacement.text)} characters to fit the budget"
        )

    # -- choosing ----------------------------------------------------------------
    @contextlib.contextmanager
    def choosing(self) -> Iterator[None]:
        """Around the strategy's choose(): a bad unit number is its contract violation."""
        try:
            yield
        except InvalidSelection as error:
            raise self._violation([str(error)]) from error

    def _violation(self, problems: Sequence[str]) -> ContractViolation:
        from ctxwindow.plugins import distribution_of

        return ContractViolation(self.strategy.name, distribution_of(self.strategy), problems)

    # -- after -------------------------------------------------------------------
    def finish(self, selection: object) -> Window[Any]:
        history = self.history
        chosen = self._chosen(selection)
        for position in self.replaced:
            unit = history.unit_of(position)
            if unit is not None and unit in chosen.kept:
                chosen.actions[unit] = "truncated"
                chosen.reasons[unit] = f"{chosen.reason(unit)}; text cut to fit the budget"
        for position, message in chosen.stand_ins.items():  # checked: counted from here on
            history._replace(position, message)
            chosen.actions[history.unit_of(position)] = "replaced"  # type: ignore[index]
        positions, synthetic = _layout(history, chosen)
        problems, tokens = check_window(
            history, positions, synthetic, self.limit, self.must_keep, self.counter
        )
        if problems:
            raise self._violation(problems)
        output = _output(history, positions, synthetic, self.replaced, chosen.stand_ins)
        notes = tuple(self.notes) + chosen.notes
        defect_decisions = tuple(self.defect_decisions)

        def decide() -> tuple[Decision, ...]:
            return (
                decisions_from(
                    chosen.actions,
                    [reason or chosen.default_reason for reason in chosen.reasons],
                    chosen.scores,
                    history.span,
                    history.message_id,
                    history.unit_tokens,
                )
                + defect_decisions
            )

        record = self._record(tokens, True, len(output), notes, decide, chosen.llm)
        if chosen.stages:
            record = dataclasses.replace(record, stages=chosen.stages)
        return Window(output, record)

    def timed_out(self, limit: TimeLimit, distribution: str | None = None) -> Window[Any]:
        """What the visit returns when the strategy ran out of time: VisitTimeout, or
        the host's own window of the must-keep units and the newest units that fit."""
        from ctxwindow.plugins import distribution_of

        name = self.strategy.name
        if limit.on_timeout != "recent":
            raise VisitTimeout(name, distribution or distribution_of(self.strategy), limit.seconds)
        selection = recent_selection(self.history)
        selection.notes.append(limit.note(name))
        return self.finish(selection)

    def _chosen(self, selection: object) -> _Chosen:
        """A checked copy of the selection; a record that disagrees is a violation."""
        history = self.history
        if not isinstance(selection, Selection) or selection.history is not history:
            raise self._violation(
                [f"choose() returned {type(selection).__name__}, not a Selection of its history"]
            )
        count = len(history.units)
        chosen = _Chosen(
            actions=list(selection.actions),
            reasons=list(selection.reasons),
            default_reason=str(selection.default_reason),
            scores=dict(selection.scores),
            kept=set(selection.kept),
            synthetic=list(selection.synthetic),
            notes=tuple(map(str, selection.notes)),
            llm=selection.llm,
            stand_ins=dict(getattr(selection, "stand_ins", {})),
            stages=tuple(getattr(selection, "stages", ())),
        )
        problems = []
        if len(chosen.actions) != count or len(chosen.reasons) != count:
            problems.append(f"the selection must hold one action and reason per unit ({count})")
        else:
            problems.extend(_record_problems(chosen, count))
        for entry in chosen.synthetic:
            before, message = entry if isinstance(entry, tuple) and len(entry) == 2 else (-1, None)
            if type(before) is not int or not 0 <= before <= count:
                problems.append(f"a made message is placed before unit {before!r}, not a unit")
            if not isinstance(message, Message):
                problems.append(f"a made message is a {type(message).__name__}, not a Message")
        stand_ins = history._replacements
        if stand_ins.keys() != self.replaced.keys() or any(
            stand_ins[p][0] is not m for p, m in self.replaced.items()
        ):
            problems.append("the strategy replaced messages of its history; only the host may")
        problems.extend(self._stand_in_problems(chosen))
        if not all(isinstance(stage, WindowRecord) for stage in chosen.stages):
            problems.append("selection.stages must hold the WindowRecords of the stages run")
        if problems:
            raise self._violation(problems)
        return chosen

    def _stand_in_problems(self, chosen: _Chosen) -> list[str]:
        """A stand-in goes in a kept unit, for a message that may change, and keeps the
        unit's tool exchange valid."""
        history = self.history
        problems = []
        for position, message in chosen.stand_ins.items():
            unit = history.unit_of(position) if type(position) is int else None
            if unit is None or unit not in chosen.kept:
                problems.append(f"a stand-in for message {position!r}, which is not in the window")
            elif unit in self.must_keep or position in self.replaced:
                why = self.must_keep.get(unit, "cut by the host")
                problems.append(f"message {position} ({why}) cannot be replaced by a strategy")
            else:
                problems.extend(stand_in_problems(position, history.messages[position], message))
        return problems

    def untouched(self) -> Window[Any]:
        history = self.history
        output = history._conversation._originals[: len(history)]

        def decide() -> tuple[Decision, ...]:
            count = len(history.units)
            return decisions_from(
                ["kept"] * count,
                ["everything fits the budget"] * count,
                {},
                history.span,
                history.message_id,
                history.unit_tokens,
            )

        return Window(
            output, self._record(self.tokens_before, False, len(output), (), decide, None)
        )

    def _record(
        self, tokens: int, engaged: bool, size: int, notes: tuple[str, ...], decide: Any, llm: Any
    ) -> WindowRecord:
        return WindowRecord(
            strategy=self.strategy.name,
            budget=self.budget,
            counter=self.counter.name,
            tokens_before=self.tokens_before,
            tokens_after=tokens,
            engaged=engaged,
            elapsed_ms=(time.perf_counter() - self.started) * 1000,
            messages_before=len(self.history),
            messages_after=size,
            llm=llm,
            notes=notes,
            _decide=decide,
        )


def _record_problems(chosen: _Chosen, count: int) -> list[str]:
    """Whether the actions (what the record says) and the kept set (what the window
    holds) agree: the same units kept, and only the strategy's three actions."""
    actions = chosen.actions
    kept = chosen.kept
    for unit in kept:
        if type(unit) is not int or not 0 <= unit < count:
            return [f"the selection keeps {unit!r}, which is not a unit of its history"]
        if actions[unit] != "kept":
            return [
                f"unit {unit} is in the window but its record says {actions[unit]!r}; "
                f"use keep(), drop() and summarize(), not the kept set"
            ]
    # the common case in one fast pass: every other unit dropped (mostly the very
    # "dropped" object a Selection starts with, so the count compares identities)
    if actions.count("dropped") + len(kept) == count:
        return []
    for unit, action in enumerate(actions):
        if action == "kept" and unit not in kept:
            return [
                f"unit {unit} is recorded as kept but is not in the window; "
                f"use keep(), drop() and summarize(), not the kept set"
            ]
        if action not in ("kept", "dropped", "summarized"):
            return [f"the selection holds action {action!r}; use keep(), drop() or summarize()"]
    return []


def _begin(
    strategy: BaseStrategy, messages: Any, budget: object, counter: Any, query: object
) -> _Visit | Window[Any]:
    """A visit ready for the strategy to choose, or the window when it need not."""
    visit = _Visit(strategy, messages, budget, counter, query)
    if visit.fits_untouched():
        return visit.untouched()
    visit.apply_oversize_policy()
    return visit


def run(
    strategy: BaseStrategy,
    messages: Any,
    budget: object,
    counter: Any,
    query: object,
    limit: TimeLimit | None = None,
    distribution: str | None = None,
) -> Window[Any]:
    """One visit; ``limit`` (else the strategy's own ``time_limit``) bounds choosing."""
    visit = _begin(strategy, messages, budget, counter, query)
    if isinstance(visit, Window):
        return visit
    limit = limit or TimeLimit.of(strategy)
    history = visit.history
    with visit.choosing():
        if limit is None:
            selection = strategy.choose(history)
        else:
            if workers.saturated(strategy):  # earlier visits' workers still running
                return visit.timed_out(limit, distribution)
            future = workers.in_thread(lambda: strategy.choose(history), strategy.name, strategy)
            done, _ = concurrent.futures.wait((future,), timeout=limit.seconds)
            if not done:
                return visit.timed_out(limit, distribution)
            selection = future.result()
    return visit.finish(selection)


async def arun(
    strategy: BaseStrategy,
    messages: Any,
    budget: object,
    counter: Any,
    query: object,
    limit: TimeLimit | None = None,
    distribution: str | None = None,
) -> Window[Any]:
    """The async visit. With a limit, a strategy whose choosing does not await (the
    default achoose runs the sync choose) chooses in a worker thread, so that it cannot
    block the event loop past the limit."""
    visit = _begin(strategy, messages, budget, counter, query)
    if isinstance(visit, Window):
        return visit
    limit = limit or TimeLimit.of(strategy)
    history = visit.history
    selection: Selection | None
    with visit.choosing():
        if limit is None:
            selection = await strategy.achoose(history)
        else:
            from ctxwindow.strategy import BaseStrategy

            if type(strategy).achoose is BaseStrategy.achoose:
                if workers.saturated(strategy):  # earlier visits' workers still running
                    return visit.timed_out(limit, distribution)
                call: Awaitable[Selection] = asyncio.wrap_future(
                    workers.in_thread(lambda: strategy.choose(history), strategy.name, strategy)
                )
            else:
                call = strategy.achoose(history)
            finished, selection = await within(call, limit.seconds)
            if not finished:
                return visit.timed_out(limit, distribution)
    return visit.finish(selection)


async def within(call: Awaitable[T], seconds: float) -> tuple[bool, T | None]:
    """``(True, result)`` if ``call`` finishes within ``seconds``, else ``(False, None)``
    once it is cancelled; its own errors, TimeoutError included, are raised as they are.

    A coroutine that blocks the event loop cannot be interrupted; one that returns
    after the limit that way counts as late too, so the limit holds for the window.
    """
    started = time.perf_counter()
    task = asyncio.ensure_future(call)
    finished: list[float] = []  # when the task ended, not when this waiter woke up
    task.add_done_callback(lambda _: finished.append(time.perf_counter()))
    try:
        done, _ = await asyncio.wait((task,), timeout=seconds)
    finally:
        if not task.done():
            task.cancel()  # not awaited: a strategy that ignores cancelling cannot hang us
            task.add_done_callback(_retrieve)
    if not done or (finished and finished[0] - started > seconds):
        if task.done():
            _retrieve(task)
        return False, None
    return True, task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned task's outcome as seen, so asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()


def recent_selection(history: History) -> Selection:
    """The host's own choice: the must-keep units and the newest run of units that fit
    (as ``fixed`` keeps them), for a strategy that ran out of time."""
    selection = history.selection()
    selection.default_reason = OLDER_REASON
    room = history.budget - history.must_keep_tokens
    for unit in range(len(history.units) - 1, -1, -1):
        if unit in history.must_keep:
            continue
        tokens = history.unit_tokens(unit)
        if tokens > room:
            break
        selection.keep(unit, RECENT_REASON)
        room -= tokens
    return selection


def fallback_window(
    strategy: object,
    messages: Any,
    budget: int,
    counter: Any,
    query: str | None,
    limit: TimeLimit,
) -> Window[Any]:
    """The host's recent window for a strategy not built on BaseStrategy that ran out
    of time: default policies (orphans and oversize raise), named after the strategy."""
    from ctxwindow.strategy import BaseStrategy

    class _Recent(BaseStrategy):
        name = str(getattr(strategy, "name", type(strategy).__name__))
        overhead_tokens = getattr(strategy, "overhead_tokens", 0)  # checked by the visit

        def choose(self, history: History) -> Selection:  # pragma: no cover - never called
            return recent_selection(history)

    visit = _Visit(_Recent(), messages, budget, counter, query)
    visit.apply_oversize_policy()
    return visit.timed_out(limit)


def _layout(history: History, chosen: _Chosen) -> tuple[list[int | None], list[Message]]:
    """Window positions in order (None for a synthetic message) and the synthetic ones."""
    inserts: dict[int, list[Message]] = {}
    for before, message in chosen.synthetic:
        inserts.setdefault(before, []).append(message)
    kept = chosen.kept
    positions: list[int | None] = []
    synthetic: list[Message] = []
    for unit in sorted(kept | inserts.keys()):
        for message in inserts.get(unit, ()):
            positions.append(None)
            synthetic.append(message)
        if unit in kept:
            positions.extend(history.span(unit))
    return positions, synthetic


def _output(
    history: History,
    positions: Sequence[int | None],
    synthetic: Sequence[Message],
    replacements: Mapping[int, Message],
    stand_ins: Mapping[int, Message],
) -> list[Any]:
    """The window in the caller's own objects; made messages follow the caller's kind.

    A strategy's stand-in is the original's fields with the stand-in's content, and
    metadata that says it was made and which message it stands for."""
    wants_dicts = len(history) == 0 or not isinstance(history.original(0), Message)
    made = iter(synthetic)
    output: list[Any] = []
    for position in positions:
        if position is None:
            message = next(made)
            output.append(message.to_dict() if wants_dicts else message)
        elif position in stand_ins:
            original = history.original(position)
            stand_in = stand_ins[position]
            metadata = {**stand_in.metadata, "stands_in_for": position}
            if isinstance(original, Message):
                output.append(dataclasses.replace(stand_in, metadata=metadata))
            else:
                content = stand_in.to_dict()["content"]
                output.append({**original, "content": content, "metadata": metadata})
        elif position in replacements:
            original = history.original(position)
            replacement = replacements[position]
            if isinstance(original, Message):
                output.append(replacement)
            else:
                output.append({**original, "content": replacement.to_dict()["content"]})
        else:
            output.append(history.original(position))
    return output


def _truncate(message: Message, room: int, count: Callable[[Message], int]) -> Message | None:
    """The longest head of the message's text, with a marker, that costs <= ``room``."""
    text = message.text
    others: tuple[ContentPart, ...] = ()
    if isinstance(message.content, tuple):
        others = tuple(part for part in message.content if part.text is None)

    def cut(keep: int) -> Message:
        marked = text[:keep] + TRUNCATION_MARKER.format(removed=len(text) - keep)
        content: Any = (ContentPart("text", marked), *others) if others else marked
        metadata = {**message.metadata, "truncated": True}
        return dataclasses.replace(message, content=content, metadata=metadata)

    low, high = 0, len(text)
    if count(cut(0)) > room:
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if count(cut(middle)) <= room:
            low = middle
        else:
            high = middle - 1
    return cut(low)
