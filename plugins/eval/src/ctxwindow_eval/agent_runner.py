"""Running strategies over agent trajectories, step by step, at several budgets.

Each trajectory is replayed as its agent loop ran: one ``Conversation`` per trajectory
and budget, extended message by message, windowed before every action. A strategy that
keeps per-conversation state (an embedding index) therefore works as in a real loop,
and the figures are warm ones, as an app would see them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwindow import Conversation, Message, from_config, get_counter
from ctxwindow.errors import BudgetTooSmall
from ctxwindow_eval.agent_metrics import StepScore, needed_values, score_step
from ctxwindow_eval.runner import STRATEGY_FAILURES, Raised, StrategySpec, warn_raised
from ctxwindow_eval.spread import cluster_interval
from ctxwindow_eval.trajectories import Trajectory

AGENT_BUDGETS = (2000, 3000, 4000)


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "agent",
            "counter": self.counter,
            "trajectories": self.trajectories,
            "rows": [row.to_dict() for row in self.rows],
        }

    def row(self, strategy: str, budget: int) -> AgentRow:
        return next(r for r in self.rows if r.strategy == strategy and r.budget == budget)


def evaluate_agent(
    strategies: Iterable[StrategySpec | str],
    trajectories: Sequence[Trajectory],
    *,
    budgets: Sequence[int] = AGENT_BUDGETS,
    counter: str = "approx",
    progress: Callable[[str, int], None] | None = None,
) -> AgentResult:
    """Next-action recall, pending exchange kept and task statement kept, for each
    strategy at each budget, over the steps whose history is over the budget."""
    specs = [s if isinstance(s, StrategySpec) else StrategySpec.parse(s) for s in strategies]
    steps = _steps(trajectories, get_counter(counter))
    rows = []
    for spec in specs:
        config = {"strategy": spec.name, "budget": max(budgets), "counter": counter}
        windower = from_config({**config, **spec.options})
        failures: list[Raised] = []
        for budget in budgets:
            by_sample: dict[str, list[StepScore]] = {}  # a task's runs (else a run) each
            timings: list[float] = []
            too_small = 0
            raised = Raised()
            for trajectory, chosen in steps:
                conversation = Conversation()
                for action, history_tokens, needed in chosen:
                    conversation.extend(trajectory.messages[len(conversation) : action])
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
    return AgentResult(rows, counter, [t.id for t in trajectories])


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
