"""pipeline: strategies run in order under one budget, with one record for the visit.

Each stage windows the previous stage's output, made messages (a summary) and stand-ins
(a cleared tool output) included. A message transform that is not the last stage only
transforms; every other stage fits the budget, so the last one guarantees it, and the
host checks the final window like any strategy's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxwindow import (
    BaseStrategy,
    Conversation,
    History,
    LLMUsage,
    Message,
    Option,
    Selection,
    Window,
    WindowRecord,
)
from ctxwindow.contract import stand_in_problems
from ctxwindow.errors import BudgetTooSmall, ContractViolation
from ctxwindow.host import Windower
from ctxwindow.messages import read_message
from ctxwindow.window import decisions_from
from ctxwindow_pipeline.stages import EXAMPLE, Stage, build_stages

KEPT_ALL_FIT = "every stage found its input within the budget"
#: The actions of a unit that stays in a stage's window.
KEEPING = ("kept", "truncated", "replaced")


class PipelineStrategy(BaseStrategy):
    """Runs strategies in order, each windowing the previous one's output, under one budget.

    Stages are strategies looked up by name (third-party ones too), each with its own
    options. The record maps the final window back to your messages (kept, dropped,
    summarized, cleared: with the stage that decided and why) and holds each stage's own
    record in ``record.stages``; LLM usage is summed over the stages.
    """

    name = "pipeline"
    #: For tests that find strategies through the registry: a pipeline needs stages,
    #: here only this distribution's own, so the examples work wherever it is installed.
    example_options: ClassVar[tuple[dict[str, Any], ...]] = (
        {
            "stages": [
                {"strategy": "clear_tool_outputs", "keep_recent": 0, "min_tokens": 0},
                "clear_tool_outputs",
            ]
        },
        {"stages": [{"strategy": "clear_tool_outputs", "when": "always", "min_tokens": 5}]},
    )
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option(
            "stages",
            (list, tuple),
            [],
            "The strategies to run, in order: each a name or a table with 'strategy', "
            "that strategy's options and, before the last, 'budget_share' (its budget as a "
            f"share of the pipeline's; default 1.0), for example {EXAMPLE}.",
        ),
    )

    def check_ready(self) -> None:
        """Build every stage now: a bad stage fails at configuration, named."""
        self.stages: tuple[Stage, ...] = build_stages(
            f"strategy {self.name!r}", self.options["stages"]
        )
        paying = [s for s in self.stages if getattr(s.strategy, "requires_llm", False)]
        self.requires_llm = bool(paying)
        self._billing = getattr(paying[0].strategy, "billing", None) if paying else None

    @property
    def billing(self) -> Any:
        """The first stage that calls an LLM pays for it; the host checks it at configuration."""
        return self._billing

    def engages_within_budget(self, history: History) -> bool:
        """When any stage would engage though everything fits (clearing always, a cap)."""
        for stage in self.stages:
            engages = getattr(stage.strategy, "engages_within_budget", None)
            if engages is not None and engages(history):
                return True
        return False

    # -- visiting ------------------------------------------------------------------
    def choose(self, history: History) -> Selection:
        try:
            return self._choose(history, shares=True)
        except BudgetTooSmall:
            if not self._has_shares:
                raise
            return self._choose(history, shares=False)

    async def achoose(self, history: History) -> Selection:
        try:
            return await self._achoose(history, shares=True)
        except BudgetTooSmall:
            if not self._has_shares:
                raise
            return await self._achoose(history, shares=False)

    @property
    def _has_shares(self) -> bool:
        return any(stage.budget_share not in (None, 1.0) for stage in self.stages)

    def _choose(self, history: History, shares: bool) -> Selection:
        run = _Run(history)
        for stage, windower in self._windowing(run, shares):
            run.apply(stage, windower.select(run.items, query=history.query))
        return _set_aside(run.finish(), shares)

    async def _achoose(self, history: History, shares: bool) -> Selection:
        run = _Run(history)
        for stage, windower in self._windowing(run, shares):
            run.apply(stage, await windower.aselect(run.items, query=history.query))
        return _set_aside(run.finish(), shares)

    def _windowing(self, run: _Run, shares: bool) -> Iterator[tuple[Stage, Windower]]:
        """The stages in order: a transform before the last is applied here; every other
        stage comes with the host that windows it, for choose (or achoose) to run on
        ``run.items`` and apply before the next. Without ``shares`` every stage gets the
        pipeline's budget."""
        history = run.history
        for stage in self.stages:
            budget = stage.budget(history.budget) if shares else history.budget
            if stage.is_transform and stage is not self.stages[-1]:
                run.apply(stage, _transformed(stage, run.items, history, budget))
            else:
                yield stage, _windower(stage, history, budget)


#: Why a visit ran again without budget_share.
SHARES_SET_ASIDE = (
    "budget_share set aside for this visit: with it, a stage could not keep what it must "
    "(a stage's budget below its must-keep messages, or an earlier stage's summary too big "
    "for the last); every stage ran on the pipeline's budget"
)


def _set_aside(selection: Selection, shares: bool) -> Selection:
    """Say so in the record when the stages' budget shares were set aside."""
    if not shares:
        selection.notes.append(SHARES_SET_ASIDE)
    return selection


def _windower(stage: Stage, history: History, budget: int) -> Windower:
    """The host around one stage: its window checked, its failure named by distribution."""
    return Windower(stage.strategy, budget, history.counter, stage.distribution)


# -- a transform stage -----------------------------------------------------------------
def _transformed(stage: Stage, items: list[Any], history: History, budget: int) -> Window[Any]:
    """Run a message transform on ``items``: it may leave them over budget, and only
    runs when they are over it or it engages anyway. Its output is checked like a window,
    but for the budget, which the stages after it keep."""
    started = time.perf_counter()
    view = Conversation(items).view(history.counter, budget, history.query)
    strategy: Any = stage.strategy
    total = view.total_tokens
    count = len(view.units)
    if total <= budget and not strategy.engages_within_budget(view):
        untouched = _record(stage, view, total, False, started, len(items), (), _all_kept(view))
        return Window(list(items), untouched)
    selection = strategy.transform(view)
    _check_transform(stage, view, selection)
    inserts: dict[int, list[Message]] = {}
    for before, message in selection.synthetic:
        inserts.setdefault(before, []).append(message)
    wants_messages = bool(items) and isinstance(items[0], Message)
    stand_ins: dict[int, Message] = dict(selection.stand_ins)
    saved: dict[int, int] = {}
    actions = list(selection.actions)
    for position, stand_in in stand_ins.items():
        unit = view.unit_of(position)
        assert unit is not None  # checked above
        saved[unit] = saved.get(unit, 0) + view.tokens(position)
        saved[unit] -= view.counter.count_message(stand_in)
        actions[unit] = "replaced"
    output: list[Any] = []
    tokens = 0
    for unit in range(count + 1):
        for message in inserts.get(unit, ()):
            output.append(message if wants_messages else message.to_dict())
            tokens += view.counter.count_message(message)
        if unit < count and unit in selection.kept:
            for position in view.span(unit):
                standing = stand_ins.get(position)
                output.append(
                    items[position]
                    if standing is None
                    else _stood(items[position], standing, position)
                )
            tokens += view.unit_tokens(unit) - saved.get(unit, 0)
    reasons = [selection.reason(unit) for unit in range(count)]
    scores = dict(selection.scores)

    def unit_tokens(unit: int) -> int:
        return view.unit_tokens(unit) - saved.get(unit, 0)

    def decide() -> Any:
        return decisions_from(actions, reasons, scores, view.span, view.message_id, unit_tokens)

    notes = tuple(map(str, selection.notes))
    return Window(output, _record(stage, view, tokens, True, started, len(output), notes, decide))


def _check_transform(stage: Stage, view: History, selection: object) -> None:
    problems: list[str] = []
    if not isinstance(selection, Selection) or selection.history is not view:
        problems.append(f"transform() returned {type(selection).__name__}, not a Selection")
    else:
        missing = sorted(set(view.must_keep) - selection.kept)
        if missing:
            problems.append(f"transform() dropped must-keep unit(s) {missing}")
        for unit, action in enumerate(selection.actions):
            if (action == "kept") != (unit in selection.kept):
                problems.append(f"unit {unit}: its record says {action!r}, the window disagrees")
        for _, message in selection.synthetic:
            if not message.synthetic or message.role == "tool" or message.tool_calls:
                problems.append(
                    "a made message must be marked synthetic and cannot be half of a "
                    f"tool exchange: {message!r}"
                )
        for position, stand_in in selection.stand_ins.items():
            where = view.unit_of(position)
            if where is None or where not in selection.kept or where in view.must_keep:
                problems.append(f"a stand-in for message {position}, which it may not replace")
            else:
                problems.extend(stand_in_problems(position, view.messages[position], stand_in))
    if problems:
        raise ContractViolation(stage.name, stage.distribution, problems)


def _record(
    stage: Stage,
    view: History,
    tokens: int,
    engaged: bool,
    started: float,
    size: int,
    notes: tuple[str, ...],
    decide: Any,
) -> WindowRecord:
    return WindowRecord(
        strategy=stage.name,
        budget=view.budget,
        counter=view.counter.name,
        tokens_before=view.total_tokens,
        tokens_after=tokens,
        engaged=engaged,
        elapsed_ms=(time.perf_counter() - started) * 1000,
        messages_before=len(view),
        messages_after=size,
        notes=notes,
        _decide=decide,
    )


def _stood(original: Any, stand_in: Message, position: int) -> Any:
    """A stand-in in the input's kind, saying which message it stands for, as the host
    gives it back from a visit."""
    metadata = {**stand_in.metadata, "stands_in_for": position}
    if isinstance(original, Message):
        return replace(stand_in, metadata=metadata)
    return {**original, **_content(stand_in), "metadata": metadata}


def _stand_in_for(item: Any, position: int) -> Message | None:
    """``item`` as the stand-in a stage sent for its input message ``position``, or None."""
    message = item if isinstance(item, Message) else None
    if message is None and isinstance(item, dict):
        metadata = item.get("metadata")
        if isinstance(metadata, dict) and metadata.get("stands_in_for") == position:
            message = read_message(item, None)
    if message is None or message.metadata.get("stands_in_for") != position:
        return None
    return message


def _all_kept(view: History) -> Any:
    count = len(view.units)

    def decide() -> Any:
        return decisions_from(
            ["kept"] * count,
            ["everything fits the budget"] * count,
            {},
            view.span,
            view.message_id,
            view.unit_tokens,
        )

    return decide


# -- following the caller's messages through the stages ---------------------------------
@dataclass(frozen=True)
class _Origin:
    """Where a stage's input message comes from: the caller's message at ``position``,
    or (position None) a message stage ``made_by`` made, standing for ``covers``."""

    position: int | None
    covers: frozenset[int]
    made_by: str | None = None
    stand_in: Message | None = None  # what is sent in place of the caller's message


class _Run:
    """One pipeline visit: the current messages, where each came from, and the fate of
    every caller's unit that a stage removed."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.items: list[Any] = []
        self.origins: list[_Origin] = []
        self.fate: dict[int, tuple[str, str]] = {}
        self.kept_reason: dict[int, str] = {}
        self.replaced_reason: dict[int, str] = {}
        self.records: list[WindowRecord] = []
        self.labels: list[str] = []
        replaced = history.replacements  # the host's cut of the newest user message
        for unit in range(len(history.units)):
            for position in history.span(unit):
                item = history.original(position)
                if position in replaced:
                    cut = replaced[position]
                    item = cut if isinstance(item, Message) else {**item, **_content(cut)}
                self.items.append(item)
                self.origins.append(_Origin(position, frozenset((unit,))))

    def apply(self, stage: Stage, window: Window[Any]) -> None:
        """Take a stage's window as the next input, remembering what it did."""
        record = window.record
        self.records.append(record)
        self.labels.append(stage.label)
        if not record.engaged:
            return
        label = stage.label
        decisions = record.decisions
        kept = sorted(p for d in decisions if d.action in KEEPING for p in d.positions)
        items: list[Any] = []
        origins: list[_Origin | None] = []
        made: list[tuple[int, int]] = []  # (index in the new input, input position after it)
        pointer = 0
        for item in window.messages:
            here = kept[pointer] if pointer < len(kept) else None
            if here is not None and item is self.items[here]:
                origins.append(self.origins[here])
                pointer += 1
            elif here is not None and (stand_in := _stand_in_for(item, here)) is not None:
                origins.append(replace(self.origins[here], stand_in=stand_in))
                pointer += 1
            else:
                anchor = kept[pointer] if pointer < len(kept) else len(self.items)
                made.append((len(items), anchor))
                origins.append(None)
            items.append(item)
        if pointer != len(kept):
            raise ContractViolation(
                stage.name,
                stage.distribution,
                ["its window does not hold the very messages its record says it kept"],
            )
        summarized: list[tuple[int, frozenset[int]]] = []
        for decision in decisions:
            if not decision.positions:
                continue
            carried = [self.origins[p] for p in decision.positions if p < len(self.origins)]
            if decision.action in KEEPING:
                for origin in carried:
                    if origin.position is not None:
                        (unit,) = origin.covers
                        why = f"{label}: {decision.reason}"
                        if decision.action == "replaced":
                            self.replaced_reason[unit] = why
                        elif unit in self.replaced_reason:
                            why = f"{self.replaced_reason[unit]}; then {why}"
                        self.kept_reason[unit] = why
            else:
                self._removed(label, decision.action, decision.reason, carried)
                if decision.action == "summarized":
                    covers = frozenset().union(*(o.covers for o in carried))
                    summarized.append((decision.positions[0], covers))
        for index, covers in _covers(made, summarized):
            origins[index] = _Origin(None, covers, label)
        self.items = items
        self.origins = [o if o is not None else _Origin(None, frozenset(), label) for o in origins]

    def _removed(self, label: str, action: str, reason: str, carried: Sequence[_Origin]) -> None:
        for origin in carried:
            if origin.position is not None:
                (unit,) = origin.covers
                why = f"{label}: {reason}"
                if unit in self.replaced_reason:  # cleared first, then went
                    verb = f" dropped it: {reason}" if action == "dropped" else f": {reason}"
                    why = f"{self.replaced_reason[unit]}; then {label}{verb}"
                self.fate[unit] = (action, why)
                continue
            for unit in origin.covers:  # a made message goes, and what it stood for
                before = self.fate.get(unit, ("summarized", str(origin.made_by)))[1]
                if action == "dropped":
                    self.fate[unit] = ("dropped", f"{before}; then {label} dropped it: {reason}")
                else:
                    self.fate[unit] = ("summarized", f"{before}; then {label}: {reason}")

    def finish(self) -> Selection:
        """The pipeline's own selection over the caller's messages: what the last
        stage's window holds, traced back, and why each other unit went."""
        history = self.history
        selection = history.selection()
        present = {next(iter(o.covers)) for o in self.origins if o.position is not None}
        for unit in range(len(history.units)):
            if unit in history.must_keep:
                continue
            if unit in present:
                selection.keep(unit, self.kept_reason.get(unit, KEPT_ALL_FIT))
            elif unit in self.fate:
                action, reason = self.fate[unit]
                if action == "summarized":
                    selection.summarize(unit, reason)
                else:
                    selection.drop(unit, reason)
        for origin in self.origins:
            if origin.position is not None and origin.stand_in is not None:
                (unit,) = origin.covers
                reason = self.kept_reason.get(unit, KEPT_ALL_FIT)
                selection.replace(origin.position, origin.stand_in, reason)
        count = len(history.units)
        for index, origin in enumerate(self.origins):
            if origin.position is not None:
                continue
            after = next(
                (next(iter(o.covers)) for o in self.origins[index + 1 :] if o.position is not None),
                count,
            )
            selection.add_synthetic(read_message(self.items[index], None), before_unit=after)
        for label, record in zip(self.labels, self.records, strict=True):
            selection.notes.append(f"{label}: {_summary(record)}")
            selection.notes.extend(f"{label}: {note}" for note in record.notes)
        selection.llm = _usage(self.records)
        selection.stages.extend(self.records)
        return selection


def _covers(
    made: list[tuple[int, int]], summarized: list[tuple[int, frozenset[int]]]
) -> list[tuple[int, frozenset[int]]]:
    """Which summarized units each made message stands for: those just before where it
    sits (a note where its exchange was, a summary where the verbatim part begins)."""
    if not made:
        return []
    anchors = sorted({anchor for _, anchor in made})
    groups: dict[int, list[frozenset[int]]] = {anchor: [] for anchor in anchors}
    for first, covers in summarized:
        anchor = next((a for a in anchors if a > first), anchors[-1])
        groups[anchor].append(covers)
    out: list[tuple[int, frozenset[int]]] = []
    for anchor in anchors:
        here = [index for index, a in made if a == anchor]
        found = groups[anchor]
        if len(found) == len(here):  # one message for each (a note per exchange, say)
            out.extend(zip(here, found, strict=True))
        else:
            every = frozenset().union(*found) if found else frozenset()
            out.extend((index, every) for index in here)
    return out


def _content(message: Message) -> dict[str, Any]:
    return {"content": message.to_dict()["content"]}


def _summary(record: WindowRecord) -> str:
    if not record.engaged:
        return f"not engaged (its input, {record.tokens_before:,} tokens, fits)"
    counts = ", ".join(
        f"{action} {record.count(action)}"
        for action in ("kept", "replaced", "dropped", "summarized", "truncated")
        if record.count(action)
    )
    return (
        f"tokens {record.tokens_before:,} -> {record.tokens_after:,}, messages "
        f"{record.messages_before} -> {record.messages_after} (units {counts})"
    )


def _usage(records: Sequence[WindowRecord]) -> LLMUsage | None:
    used = [record.llm for record in records if record.llm is not None]
    if not used:
        return None
    providers = sorted({u.provider for u in used if u.provider})
    models = sorted({u.model for u in used if u.model})
    return LLMUsage(
        provider="+".join(providers) or None,
        model="+".join(models) or None,
        calls=sum(u.calls for u in used),
        prompt_tokens=sum(u.prompt_tokens for u in used),
        completion_tokens=sum(u.completion_tokens for u in used),
    )
