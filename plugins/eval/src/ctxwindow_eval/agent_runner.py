"""Running strategies over agent trajectories, step by step, at several budgets.

Each trajectory is replayed as its agent loop ran: one ``Conversation`` per trajectory
and budget, extended message by message, windowed before every action. A strategy that
keeps per-conversation state (an embedding index) therefore works as in a real loop,
and the figures are warm ones, as an app would see them.

Every trajectory is checked before anything runs (:func:`screen_trajectories`): one
ctxwindow cannot window (a message it cannot read, a broken tool exchange that a
strategy raises on) fails the run at once, listed by its place in the file, unless
``skip_malformed`` leaves it out and the result says so. A strategy that raises on a
sound history still counts as keeping nothing at that step.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwindow import Conversation, Message, Windower, from_config, get_counter
from ctxwindow.errors import BudgetTooSmall, ConfigError, InvalidMessage, OrphanToolResult
from ctxwindow_eval.agent_metrics import StepScore, needed_values, score_step
from ctxwindow_eval.runner import (
    STRATEGY_FAILURES,
    Raised,
    StrategySpec,
    check_budgets,
    parse_specs,
    warn_raised,
)
from ctxwindow_eval.spread import cluster_interval
from ctxwindow_eval.trajectories import Fault, Trajectory, find_faults

AGENT_BUDGETS = (2000, 3000, 4000)
#: How many malformed trajectories an error names (then how many more there are).
LISTED = 3


class MalformedTrajectories(ConfigError):
    """Trajectories ctxwindow cannot window: nothing was evaluated. ``faults`` holds
    the first fault of each, ``total`` how many trajectories were given."""

    def __init__(
        self,
        faults: Sequence[Fault],
        total: int,
        raising: Sequence[StrategySpec] = (),
        *,
        cli: bool = False,
    ) -> None:
        self.faults = list(faults)
        self.total = total
        super().__init__(_malformed_message(self.faults, total, raising, cli))


def _malformed_message(
    faults: list[Fault], total: int, raising: Sequence[StrategySpec], cli: bool
) -> str:
    """Which trajectories are malformed (the first few, then a count), and how to go
    on: from the command line (``cli``) or in Python."""
    sources = sorted({f.trajectory.source for f in faults if f.trajectory.source})
    head = f"{', '.join(sources)}: " if sources else ""
    count = len(faults)
    listed = "; ".join(map(str, faults[:LISTED]))
    if count > LISTED:
        listed += f"; and {count - LISTED} more"
    message = (
        f"{count} of {total} trajectories {'is' if count == 1 else 'are'} malformed; "
        f"nothing was evaluated: {listed}"
    )
    them = "it" if count == 1 else "them"
    ways = [f"fix {them}"]
    if raising and any(fault.exchange for fault in faults):
        dropping = [_dropping(spec) for spec in raising]
        given = " ".join(f"-s {s}" for s in dropping) if cli else ", ".join(map(repr, dropping))
        ways.append(f"drop broken tool exchanges ({given})")
    if count < total:  # leaving out every trajectory leaves nothing to evaluate
        skip = "--skip-malformed" if cli else "skip_malformed=True"
        ways.append(f"leave {them} out ({skip})")
    if len(ways) == 1:
        return f"{head}{message}. To go on, {ways[0]}"
    return (
        f"{head}{message}. To go on, {', '.join(ways[:-1])}"
        f"{',' if len(ways) > 2 else ''} or {ways[-1]}"
    )


def _dropping(spec: StrategySpec) -> str:
    """``spec`` as written, with ``orphans=drop`` among its options."""
    text = spec.label or spec.name
    return f"{text}{',' if ':' in text else ':'}orphans=drop"


def _raises_on_orphans(windower: Windower) -> bool:
    """Whether the strategy raises OrphanToolResult on a broken tool exchange."""
    return bool(windower.common_option("orphans") == "raise")


@dataclass
class AgentRow:
    """One strategy at one budget, over the steps where it had a choice."""

    strategy: str
    budget: int
    steps: int  # actions whose history was over the budget
    recall: float | None
    recall_steps: int  # of those, the steps with needed values
    pending_kept: float | None
    pending_steps: int  # of those, the steps waiting on tool results
    pending_cut: int  # steps whose pending exchange was kept with a result cut to fit
    task_kept: float | None
    too_small: int
    median_ms: float
    #: Steps whose window the strategy failed to make (scored as keeping nothing).
    raised: int = 0
    first_error: str | None = None
    #: The 95% interval of ``recall`` over the samples (tasks, else runs) its steps
    #: came from (:func:`~ctxwindow_eval.spread.cluster_interval`), and how many.
    recall_interval: tuple[float, float] | None = None
    recall_samples: int = 0

    def to_dict(self) -> dict[str, Any]:
        def rounded(value: float | None) -> float | None:
            # six places: the README's three, read from here, round as the table does
            return None if value is None else round(value, 6)

        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "steps_with_choice": self.steps,
            "next_action_recall": rounded(self.recall),
            "recall_steps": self.recall_steps,
            "next_action_recall_interval": (
                None if self.recall_interval is None else [*map(rounded, self.recall_interval)]
            ),
            "recall_samples": self.recall_samples,
            "pending_kept": rounded(self.pending_kept),
            "pending_steps": self.pending_steps,
            "pending_cut": self.pending_cut,
            "task_statement_kept": rounded(self.task_kept),
            "budget_too_small": self.too_small,
            "raised": self.raised,
            "first_error": self.first_error,
            "median_ms_per_window": round(self.median_ms, 3),
        }


@dataclass
class AgentResult:
    rows: list[AgentRow]
    counter: str
    trajectories: list[str]
    #: The malformed trajectories left out (``skip_malformed``), each with its fault.
    left_out: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "agent",
            "counter": self.counter,
            "trajectories": self.trajectories,
            "left_out_malformed": self.left_out,
            "rows": [row.to_dict() for row in self.rows],
        }

    def row(self, strategy: str, budget: int) -> AgentRow:
        return next(r for r in self.rows if r.strategy == strategy and r.budget == budget)


def screen_trajectories(
    strategies: Iterable[StrategySpec | str] | StrategySpec | str,
    trajectories: Sequence[Trajectory],
    *,
    counter: str = "approx",
    skip_malformed: bool = False,
    cli: bool = False,
) -> tuple[list[Trajectory], list[Fault]]:
    """The trajectories the strategies can be run on, and the faults of the others (see
    :func:`~ctxwindow_eval.trajectories.find_faults`; a broken tool exchange is one
    unless every strategy has ``orphans='drop'``). Any fault raises
    MalformedTrajectories, naming them and how to go on (``cli``: with the command's
    options), unless ``skip_malformed``; none left raises it too."""
    specs = parse_specs(strategies)
    windowers = _windowers(specs, max(AGENT_BUDGETS), counter)
    return _screen(specs, windowers, trajectories, skip_malformed, cli)


def _windowers(specs: Sequence[StrategySpec], budget: int, counter: str) -> list[Windower]:
    """Each strategy's windower, all built before anything runs: a bad option fails first."""
    config = {"budget": budget, "counter": counter}
    return [from_config({**config, "strategy": spec.name, **spec.run_options}) for spec in specs]


def _screen(
    specs: Sequence[StrategySpec],
    windowers: Sequence[Windower],
    trajectories: Sequence[Trajectory],
    skip: bool,
    cli: bool,
) -> tuple[list[Trajectory], list[Fault]]:
    raising = [spec for spec, w in zip(specs, windowers, strict=True) if _raises_on_orphans(w)]
    faults = find_faults(trajectories, exchanges=bool(raising))
    if faults and (not skip or len(faults) == len(trajectories)):
        raise MalformedTrajectories(faults, len(trajectories), raising, cli=cli)
    bad = {id(fault.trajectory) for fault in faults}
    return [t for t in trajectories if id(t) not in bad], faults


def evaluate_agent(
    strategies: Iterable[StrategySpec | str] | StrategySpec | str,
    trajectories: Sequence[Trajectory],
    *,
    budgets: Sequence[int] = AGENT_BUDGETS,
    counter: str = "approx",
    progress: Callable[[str, int], None] | None = None,
    skip_malformed: bool = False,
) -> AgentResult:
    """Next-action recall, pending exchange kept and task statement kept, for each
    strategy at each budget, over the steps whose history is over the budget.

    Trajectories are checked first (:func:`screen_trajectories`): a malformed one raises
    MalformedTrajectories before any strategy runs, or with ``skip_malformed`` is left
    out, and named in the result's ``left_out``."""
    specs = parse_specs(strategies)
    budgets = check_budgets(budgets)
    windowers = _windowers(specs, max(budgets), counter)
    kept, faults = _screen(specs, windowers, trajectories, skip_malformed, cli=False)
    steps = _steps(kept, get_counter(counter))
    rows = []
    for spec, windower in zip(specs, windowers, strict=True):
        failures: list[Raised] = []
        for budget in budgets:
            by_sample: dict[str, list[StepScore]] = {}  # a task's runs (else a run) each
            timings: list[float] = []
            too_small = 0
            raised = Raised()
            for trajectory, chosen in steps:
                conversation = Conversation()
                for action, history_tokens, needed in chosen:
                    try:
                        conversation.extend(trajectory.messages[len(conversation) : action])
                    except InvalidMessage as error:  # the screen let it by: still say where
                        raise _malformed(trajectory, error, len(kept), spec) from error
                    if history_tokens <= budget:
                        continue
                    history = trajectory.messages[:action]
                    begun = time.perf_counter()
                    try:
                        window = windower.select(conversation, budget=budget).messages
                    except BudgetTooSmall:
                        too_small += 1
                        window = []
                    except STRATEGY_FAILURES as error:
                        raised.add(error)
                        window = []
                    except InvalidMessage as error:  # the history's fault, not the strategy's
                        raise _malformed(trajectory, error, len(kept), spec) from error
                    else:
                        timings.append(time.perf_counter() - begun)
                    step = trajectory.messages[action]
                    scored = score_step(history, step, window, needed)
                    by_sample.setdefault(trajectory.sample, []).append(scored)
                if progress:
                    progress(spec.title, len(chosen))
            row = _row(spec.title, budget, by_sample, too_small, timings)
            row.raised, row.first_error = raised.count, raised.first
            rows.append(row)
            failures.append(raised)
        warn_raised(spec.title, failures, "step")
    return AgentResult(rows, counter, [t.id for t in kept], [str(f) for f in faults])


def _malformed(
    trajectory: Trajectory, error: InvalidMessage, total: int, spec: StrategySpec
) -> MalformedTrajectories:
    exchange = isinstance(error, OrphanToolResult)
    fault = Fault(trajectory, error.index, error.problem, exchange=exchange)
    return MalformedTrajectories([fault], total, [spec] if exchange else [])


def _steps(
    trajectories: Sequence[Trajectory], counter: Any
) -> list[tuple[Trajectory, list[tuple[int, int, set[str]]]]]:
    """Each trajectory's actions with the tokens of the history before each, and the
    values it needs: counted once, shared by every strategy and budget."""
    out = []
    for trajectory in trajectories:
        sums = [0]
        for message in trajectory.messages:
            sums.append(sums[-1] + counter.count_message(Message.from_dict(message)))
        chosen = [
            (
                action,
                sums[action],
                needed_values(trajectory.messages[action], trajectory.messages[:action]),
            )
            for action in trajectory.actions()
        ]
        out.append((trajectory, chosen))
    return out


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _recalls(scores: list[StepScore]) -> list[float]:
    """The recall of each step that needed values."""
    return [s.recall for s in scores if s.recall is not None]


def _row(
    label: str,
    budget: int,
    by_sample: dict[str, list[StepScore]],
    too_small: int,
    timings: list[float],
) -> AgentRow:
    """The row of the steps scored, grouped by sample: the recall's interval draws
    whole samples (see :func:`~ctxwindow_eval.spread.cluster_interval`)."""
    scores = [score for group in by_sample.values() for score in group]
    recalls = _recalls(scores)
    groups = [(sum(found), len(found)) for found in map(_recalls, by_sample.values()) if found]
    pending = [float(s.pending_kept) for s in scores if s.pending_kept is not None]
    task = [float(s.task_kept) for s in scores if s.task_kept is not None]
    return AgentRow(
        strategy=label,
        budget=budget,
        steps=len(scores),
        recall=_mean(recalls),
        recall_steps=len(recalls),
        pending_kept=_mean(pending),
        pending_steps=len(pending),
        pending_cut=sum(s.pending_cut for s in scores),
        task_kept=_mean(task),
        too_small=too_small,
        median_ms=statistics.median(timings) * 1000 if timings else 0.0,
        recall_interval=cluster_interval(groups),
        recall_samples=len(groups),
    )
