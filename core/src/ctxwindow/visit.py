"""One visit of a strategy: the host's work before and after the strategy chooses.

Before: check the arguments, read and count the history, apply the orphan policy,
return early when everything fits, apply the oversize policy. After: build the window
in the caller's kind of objects, check the contract, write the record.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ctxwindow.contract import check_window
from ctxwindow.errors import (
    BudgetTooSmall,
    ContractViolation,
    InvalidBudget,
    InvalidQuery,
    OrphanToolResult,
)
from ctxwindow.history import Conversation, History, Selection
from ctxwindow.messages import ContentPart, Message
from ctxwindow.window import Decision, Window, WindowRecord, decisions_from

if TYPE_CHECKING:
    from ctxwindow.strategy import BaseStrategy

TRUNCATION_MARKER = "\n[... {removed} characters cut by ctxwindow to fit the token budget]"


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


class _Visit:
    """The state of one visit between preparing and finishing."""

    def __init__(
        self, strategy: BaseStrategy, messages: Any, budget: object, counter: Any, query: object
    ) -> None:
        from ctxwindow.registry import get_counter

        self.started = time.perf_counter()
        self.strategy = strategy
        self.budget = check_budget(budget)
        self.limit = self.budget - strategy.overhead_tokens
        if self.limit <= 0:
            raise InvalidBudget(
                f"budget {self.budget} leaves nothing once strategy {strategy.name!r} takes "
                f"its overhead of {strategy.overhead_tokens} tokens"
            )
        self.counter = get_counter(counter)
        conversation = messages if isinstance(messages, Conversation) else Conversation(messages)
        self.history: History = conversation.view(self.counter, self.limit, check_query(query))
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
            self.defect_decisions.append(
                Decision(
                    unit=-1,
                    positions=positions,
                    ids=tuple(history.message_id(p) for p in positions),
                    action="dropped",
                    reason=defect.problem,
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
        history.replace(newest, replacement)
        self.notes.append(
            f"truncated message {newest} from {len(message.text)} to "
            f"{len(replacement.text)} characters to fit the budget"
        )

    # -- after -------------------------------------------------------------------
    def finish(self, selection: Selection) -> Window[Any]:
        history = self.history
        for position in history.replacements:
            unit = history.unit_of(position)
            if unit is not None and unit in selection.kept:
                selection.actions[unit] = "truncated"
                selection.reasons[unit] = f"{selection.reason(unit)}; text cut to fit the budget"
        positions, synthetic = _layout(history, selection)
        problems, tokens = check_window(history, positions, synthetic, self.limit)
        if problems:
            from ctxwindow.plugins import distribution_of

            raise ContractViolation(self.strategy.name, distribution_of(self.strategy), problems)
        output = _output(history, positions, synthetic)
        notes = tuple(self.notes) + tuple(selection.notes)
        defect_decisions = tuple(self.defect_decisions)

        def decide() -> tuple[Decision, ...]:
            return (
                decisions_from(
                    selection.actions,
                    [reason or selection.default_reason for reason in selection.reasons],
                    selection.scores,
                    history.span,
                    history.message_id,
                    history.unit_tokens,
                )
                + defect_decisions
            )

        return Window(output, self._record(tokens, True, len(output), notes, decide, selection.llm))

    def untouched(self) -> Window[Any]:
        history = self.history
        output = history._conversation.originals[: len(history)]

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


def run(
    strategy: BaseStrategy, messages: Any, budget: object, counter: Any, query: object
) -> Window[Any]:
    visit = _Visit(strategy, messages, budget, counter, query)
    if visit.fits_untouched():
        return visit.untouched()
    visit.apply_oversize_policy()
    return visit.finish(strategy.choose(visit.history))


async def arun(
    strategy: BaseStrategy, messages: Any, budget: object, counter: Any, query: object
) -> Window[Any]:
    visit = _Visit(strategy, messages, budget, counter, query)
    if visit.fits_untouched():
        return visit.untouched()
    visit.apply_oversize_policy()
    return visit.finish(await strategy.achoose(visit.history))


def _layout(history: History, selection: Selection) -> tuple[list[int | None], list[Message]]:
    """Window positions in order (None for a synthetic message) and the synthetic ones."""
    inserts: dict[int, list[Message]] = {}
    for before, message in selection.synthetic:
        inserts.setdefault(before, []).append(message)
    positions: list[int | None] = []
    synthetic: list[Message] = []
    for unit in sorted(selection.kept | inserts.keys()):
        for message in inserts.get(unit, ()):
            positions.append(None)
            synthetic.append(message)
        if unit in selection.kept and 0 <= unit < len(history.units):
            positions.extend(history.span(unit))
    return positions, synthetic


def _output(
    history: History, positions: Sequence[int | None], synthetic: Sequence[Message]
) -> list[Any]:
    """The window in the caller's own objects; made messages follow the caller's kind."""
    wants_dicts = len(history) == 0 or not isinstance(history.original(0), Message)
    replacements = history.replacements
    made = iter(synthetic)
    output: list[Any] = []
    for position in positions:
        if position is None:
            message = next(made)
            output.append(message.to_dict() if wants_dicts else message)
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
