"""What a visit returns: the window, and the record of what was kept and why."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from ctxwindow.errors import InvalidOption

#: ``truncated``: kept, with the newest user message cut by the host; ``replaced``:
#: kept, with a strategy's stand-in for one or more of its messages (a cleared tool
#: output), where the core lets strategies send stand-ins.
Action = Literal["kept", "dropped", "summarized", "truncated", "replaced"]
ACTIONS: tuple[Action, ...] = ("kept", "dropped", "summarized", "truncated", "replaced")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Decision:
    """What happened to one unit, and why."""

    unit: int
    positions: tuple[int, ...]  # indices into the caller's message list
    ids: tuple[str | None, ...]
    action: Action
    reason: str
    tokens: int
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "positions": list(self.positions),
            "ids": list(self.ids),
            "action": self.action,
            "reason": self.reason,
            "tokens": self.tokens,
            "score": self.score,
        }


@dataclass(frozen=True, slots=True)
class DecisionRun:
    """Consecutive units with one action and reason: what ``decisions`` say, a run at
    a time (ids and scores left out), for a reader that needs no per-unit detail, such
    as a strategy made of stages following each stage's window. ``units`` is empty for
    the runner's decision about defective messages, which belong to no unit."""

    units: range
    positions: Sequence[int]  # a range when the units' messages lie end to end
    action: Action
    reason: str


@dataclass(frozen=True, slots=True)
class LLMUsage:
    """What an LLM-backed strategy spent on one visit."""

    provider: str | None = None
    model: str | None = None
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


class _Read(Generic[T]):
    """What a record's lazy part (its decisions, their runs) was when first read, in
    place of the function that built it: that function holds the visit's history."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value

    def __call__(self) -> T:
        return self.value

    def __reduce__(self) -> tuple[Any, ...]:
        return _Read, (self.value,)


@dataclass(frozen=True, eq=False)
class WindowRecord:
    """The record of one visit.

    ``decisions`` holds one entry per unit. It is built on first access, so a chat loop
    that never reads it does not pay for it on a long history. Until then the record
    holds the visit's history (every message it was given, dropped ones included), to
    build them from; once they are read it holds only what it says. An audit log that
    keeps records should read their decisions, or keep ``to_dict()`` instead. A
    pipeline's stages hold their histories the same way until their own decisions are
    read (``to_dict()`` reads every stage's).

    A strategy made of other strategies (``pipeline``) keeps each one's own record in
    ``stages``, in the order they ran, while ``decisions`` map its final window back to
    the caller's messages.

    Two records are equal when they say the same about a visit: every field but
    ``elapsed_ms`` (a measurement, not an outcome), and the decisions. A record
    pickles and copies (its decisions read first: a function over the visit cannot be
    pickled), and :meth:`from_dict` reads back what :meth:`to_dict` wrote.
    """

    strategy: str
    budget: int
    counter: str
    tokens_before: int
    tokens_after: int
    engaged: bool
    elapsed_ms: float
    messages_before: int
    messages_after: int
    llm: LLMUsage | None = None
    notes: tuple[str, ...] = ()
    _decide: Callable[[], tuple[Decision, ...]] = field(default=tuple, repr=False, compare=False)
    stages: tuple[WindowRecord, ...] = ()
    _decide_runs: Callable[[], tuple[DecisionRun, ...]] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def decisions(self) -> tuple[Decision, ...]:
        cached: tuple[Decision, ...] | None = self.__dict__.get("_decisions")
        if cached is None:
            cached = self._decide()
            object.__setattr__(self, "_decisions", cached)
            self._let_go()
        return cached

    def _let_go(self) -> None:
        """Keep what the decisions and their runs were read as, not the functions that
        built them, whose closures hold the visit's history: a record kept after its
        decisions were read (an audit log) then holds no message it did not keep."""
        if not isinstance(self._decide, _Read):
            object.__setattr__(self, "_decide", _Read(self.decisions))
        if self._decide_runs is not None and not isinstance(self._decide_runs, _Read):
            object.__setattr__(self, "_decide_runs", _Read(self.decision_runs))

    @property
    def decision_runs(self) -> tuple[DecisionRun, ...]:
        """The decisions as runs of consecutive units with one action and reason, in
        order, then those about no unit. Read from what the strategy decided when the
        runner can (a turn that drops 100,000 units in one range reads one run), else
        grouped from ``decisions``."""
        cached: tuple[DecisionRun, ...] | None = self.__dict__.get("_runs")
        if cached is None:
            cached = self._decide_runs() if self._decide_runs else _grouped(self.decisions)
            object.__setattr__(self, "_runs", cached)
        return cached

    def count(self, action: Action) -> int:
        """How many units got ``action`` (a decision about defective messages counts
        as one), read from the runs of decisions: tallied for every action in one pass,
        on the first call (a pipeline's record reads five actions of each stage's)."""
        tally: dict[str, int] | None = self.__dict__.get("_tally")
        if tally is None:
            runs = self.decision_runs
            # the runner's runs may bring their tally (an earlier visit's, carried on)
            tally = self.__dict__.get("_tally") or tally_runs(runs)
            object.__setattr__(self, "_tally", tally)
        return tally.get(action, 0)

    def _outcome(self) -> tuple[Any, ...]:
        """What equality compares besides the decisions: all but ``elapsed_ms``."""
        return (
            self.strategy,
            self.budget,
            self.counter,
            self.tokens_before,
            self.tokens_after,
            self.engaged,
            self.messages_before,
            self.messages_after,
            self.llm,
            self.notes,
            self.stages,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WindowRecord) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._outcome() == other._outcome() and self.decisions == other.decisions

    def __hash__(self) -> int:
        return hash(self._outcome())

    def __getstate__(self) -> dict[str, Any]:
        """The record with its decisions read, as pickle and ``copy.deepcopy`` take it:
        no function over the visit, which cannot be pickled."""
        self.decisions  # noqa: B018  # read: built, and the visit let go
        return dict(self.__dict__)

    def __copy__(self) -> WindowRecord:
        """A shallow copy, as lazy as the record (its decisions built when first read)."""
        copied = object.__new__(self.__class__)
        copied.__dict__.update(self.__dict__)
        return copied

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WindowRecord:
        """The record :meth:`to_dict` wrote (its decisions with it), read back: an audit
        log's records, say, to ``explain()`` or compare. ``elapsed_ms`` is as written
        (to the microsecond); ``counts`` are read from the decisions."""
        if "decisions" not in data:
            raise InvalidOption(
                "WindowRecord.from_dict needs the record's decisions, which "
                "to_dict(decisions=False) leaves out; write the record with to_dict()"
            )
        decisions = tuple(_decision_of(entry) for entry in data["decisions"])
        llm = data.get("llm")
        return cls(
            strategy=data["strategy"],
            budget=data["budget"],
            counter=data["counter"],
            tokens_before=data["tokens_before"],
            tokens_after=data["tokens_after"],
            engaged=data["engaged"],
            elapsed_ms=data["elapsed_ms"],
            messages_before=data["messages_before"],
            messages_after=data["messages_after"],
            llm=LLMUsage(**llm) if llm is not None else None,
            notes=tuple(data.get("notes", ())),
            _decide=_Read(decisions),
            stages=tuple(cls.from_dict(stage) for stage in data.get("stages", ())),
        )

    def to_dict(self, decisions: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "strategy": self.strategy,
            "budget": self.budget,
            "counter": self.counter,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "engaged": self.engaged,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "messages_before": self.messages_before,
            "messages_after": self.messages_after,
            "llm": self.llm.to_dict() if self.llm else None,
            "notes": list(self.notes),
            "counts": {action: self.count(action) for action in ACTIONS},
        }
        if decisions:
            out["decisions"] = [decision.to_dict() for decision in self.decisions]
        if self.stages:  # only a composed strategy's record has the key
            out["stages"] = [stage.to_dict(decisions) for stage in self.stages]
        return out

    def explain(self) -> str:
        """This record as a readable table (what ``ctxwindow select --explain`` prints);
        runs of units with the same fate share a row."""
        import json  # here: `import ctxwindow` does without it

        lines = [
            f"strategy {self.strategy} | budget {self.budget} | counter {self.counter} | "
            f"{'engaged' if self.engaged else 'not engaged: everything fits'} | "
            f"{self.elapsed_ms:.2f} ms",
            f"tokens {self.tokens_before} -> {self.tokens_after} | "
            f"messages {self.messages_before} -> {self.messages_after}",
        ]
        rows = [("messages", "units", "tokens", "action", "reason")]
        in_order = sorted(self.decisions, key=lambda d: d.positions[0] if d.positions else -1)
        for group in _runs(in_order):
            first, last = group[0], group[-1]
            positions = [p for d in group for p in d.positions]
            span = _span(positions)
            units = str(first.unit) if first is last else f"{first.unit}-{last.unit}"
            score = (
                f" (score {first.score:.3f})" if first.score is not None and first is last else ""
            )
            tokens = str(sum(d.tokens for d in group))
            rows.append((span, units, tokens, first.action, first.reason + score))
        made = self._made_row(in_order)
        if made is not None:  # after the last summarized row: where a summary sits
            after = max(
                (i for i, row in enumerate(rows) if row[3] == "summarized"), default=len(rows) - 1
            )
            rows.insert(after + 1, made)
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for row in rows:
            cells = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            lines.append(f"{cells}  {row[4]}")
        lines.extend(f"note: {note}" for note in self.notes)
        if self.llm is not None:
            lines.append(f"llm: {json.dumps(self.llm.to_dict())}")
        return "\n".join(lines)

    def _made_row(self, decisions: Sequence[Decision]) -> tuple[str, str, str, str, str] | None:
        """The explain table's row for the messages the strategy wrote (a summary, a
        note), which no decision holds: what the window holds beyond the messages its
        decisions keep, each message once (an adapter may split one message in two units,
        an Anthropic user turn's tool results and its words, both kept). None when it
        wrote none."""
        keeping = [d for d in decisions if d.action in ("kept", "truncated", "replaced")]
        count = self.messages_after - len({p for d in keeping for p in d.positions})
        if count <= 0:
            return None
        tokens = self.tokens_after - sum(d.tokens for d in keeping)
        what = "message" if count == 1 else "messages"
        return (
            "-",
            "-",
            str(tokens),
            "made",
            f"{count} {what} the strategy wrote (a summary, a note), placed where what "
            f"{'it stands' if count == 1 else 'they stand'} for was",
        )


@dataclass(frozen=True)
class Window(Generic[T]):
    """The messages to send (the same kind of objects the caller passed) and the record.

    Two windows are equal when their messages are and their records are (see
    :class:`WindowRecord`: the time taken is not compared). A window is not hashable:
    its messages are a list. It pickles when its messages do.
    """

    messages: list[T]
    record: WindowRecord

    __hash__ = None  # type: ignore[assignment]  # its messages are a list

    @property
    def tokens(self) -> int:
        return self.record.tokens_after

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[T]:
        return iter(self.messages)


def _decision_of(entry: Mapping[str, Any]) -> Decision:
    """A decision as :meth:`Decision.to_dict` wrote it."""
    return Decision(
        unit=entry["unit"],
        positions=tuple(entry["positions"]),
        ids=tuple(entry["ids"]),
        action=entry["action"],
        reason=entry["reason"],
        tokens=entry["tokens"],
        score=entry.get("score"),
    )


def decisions_from(
    actions: Sequence[str],
    reasons: Sequence[str],
    score: Callable[[int], float | None],
    spans: Callable[[int], range],
    ids: Callable[[int], str | None],
    tokens: Callable[[int], int],
) -> tuple[Decision, ...]:
    """Build the per-unit decisions from a selection's compact arrays."""
    built = []
    for unit, (action, reason) in enumerate(zip(actions, reasons, strict=True)):
        positions = spans(unit)
        built.append(
            Decision(
                unit=unit,
                positions=tuple(positions),
                ids=tuple(ids(position) for position in positions),
                action=action,  # type: ignore[arg-type]
                reason=reason,
                tokens=tokens(unit),
                score=score(unit),
            )
        )
    return tuple(built)


def _row_key(decision: Decision) -> tuple[str, str, float | None]:
    """What an ``explain`` row shares: action, reason and score."""
    return decision.action, decision.reason, decision.score


def tally_runs(runs: Iterable[DecisionRun], sign: int = 1) -> dict[str, int]:
    """How many units each action of ``runs`` has (a decision about defective messages
    counts as one), times ``sign``."""
    tally: dict[str, int] = {}
    for run in runs:
        tally[run.action] = tally.get(run.action, 0) + sign * (len(run.units) or 1)
    return tally


def _grouped(decisions: Sequence[Decision]) -> tuple[DecisionRun, ...]:
    """Decisions in runs of consecutive units with one action and reason."""
    return tuple(
        DecisionRun(
            range(group[0].unit, group[-1].unit + 1) if group[0].unit >= 0 else range(0),
            tuple(position for decision in group for position in decision.positions),
            group[0].action,
            group[0].reason,
        )
        for group in _runs(decisions, lambda d: (d.action, d.reason))
    )


def _span(positions: Sequence[int]) -> str:
    """Where a row's messages are: one position, a range, or ``-`` for a decision about
    no message of the list (an Anthropic ``system`` parameter, kept beside it)."""
    if not positions:
        return "-"
    return f"{positions[0]}" if len(positions) == 1 else f"{positions[0]}-{positions[-1]}"


def _runs(
    decisions: Sequence[Decision], key: Callable[[Decision], object] = _row_key
) -> list[list[Decision]]:
    """Decisions grouped in runs of consecutive units with one ``key``; a decision about
    no unit (-1) stands alone."""
    runs: list[list[Decision]] = []
    for decision in decisions:
        last = runs[-1][-1] if runs else None
        if last is not None and 0 <= last.unit == decision.unit - 1 and key(last) == key(decision):
            runs[-1].append(decision)
        else:
            runs.append([decision])
    return runs
