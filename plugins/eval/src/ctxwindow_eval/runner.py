"""Running strategies over benchmark conversations at several budgets."""

from __future__ import annotations

import statistics
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwindow import Conversation, describe_strategies, from_config, parse_strategy_spec
from ctxwindow.errors import BudgetTooSmall, ConfigError, ContractViolation, PluginError
from ctxwindow_eval.dataset import EvalConversation, LoadReport
from ctxwindow_eval.metrics import Score, score, window_contents

DEFAULT_BUDGETS = (1000, 2000, 4000, 8000)
HEADLINE_CATEGORIES = (1, 2, 3, 4)
#: A strategy's own failures while choosing (its code raised, or its window broke the
#: contract and cannot be scored): that window keeps nothing, and the eval goes on.
STRATEGY_FAILURES = (PluginError, ContractViolation)


@dataclass(frozen=True)
class StrategySpec:
    """A strategy to evaluate: its name, options and the label results carry."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    @classmethod
    def parse(cls, text: str) -> StrategySpec:
        """``name`` or ``name:key=value,key=value`` (:func:`ctxwindow.parse_strategy_spec`)."""
        name, options = parse_strategy_spec(text)
        return cls(name, options, text)

    @property
    def title(self) -> str:
        return self.label or self.name

    @property
    def run_options(self) -> dict[str, Any]:
        """The options a run uses: the spec's, over a memory cache for a strategy that
        keeps one (:func:`no_shared_cache`)."""
        return {**no_shared_cache(self.name), **self.options}


def takes_cache(name: str) -> bool:
    """Whether the installed strategy ``name`` has a ``cache`` option (a store that
    outlives a visit, on disk by default)."""
    described = next((s for s in describe_strategies() if s["name"] == name), None)
    if described is None:
        return False
    return any(option["name"] == "cache" for option in described["options"])


def no_shared_cache(name: str) -> dict[str, Any]:
    """``cache="memory"`` for a strategy with a ``cache`` option, unless the spec sets
    one: a run's results must not depend on what earlier runs left on disk (a summary
    rolls on from the newest checkpoint's it finds there, and another version's or
    configuration's would change it), and the made-up texts stay out of the caches a
    user's strategies share."""
    return {"cache": "memory"} if takes_cache(name) else {}


def parse_specs(
    strategies: Iterable[StrategySpec | str] | StrategySpec | str,
) -> list[StrategySpec]:
    """The strategies to run, each once: one name (or spec) alone is one strategy, not
    its letters; a spec given twice runs once, and two specs that share a label are
    told apart (``label (2)``), so that no two lines of a table or plot merge."""
    if isinstance(strategies, (str, StrategySpec)):
        strategies = [strategies]
    specs: list[StrategySpec] = []
    for given in strategies:
        spec = given if isinstance(given, StrategySpec) else StrategySpec.parse(given)
        if spec in specs:
            continue
        titles = {s.title for s in specs}
        title, number = spec.title, 2
        while title in titles:
            title, number = f"{spec.title} ({number})", number + 1
        specs.append(spec if title == spec.title else replace(spec, label=title))
    if not specs:
        raise ConfigError("no strategy to evaluate: name at least one, as 'fixed'")
    return specs


def check_budgets(budgets: Any, what: str = "budgets") -> list[int]:
    """``budgets`` as a list of token budgets, each a whole number of 1 or more; else a
    ConfigError naming ``what`` (the argument, or the command's flag)."""
    if isinstance(budgets, (str, bytes)) or not isinstance(budgets, Iterable):
        raise ConfigError(
            f"{what} is a list of token budgets, got {budgets!r}: give one in a list, "
            f"as [{budgets!r}]"
        )
    found = list(budgets)
    if not found:
        raise ConfigError(f"{what} is empty: give at least one token budget, as [2000]")
    for budget in found:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ConfigError(
                f"{what} holds {budget!r}: each token budget is a whole number of 1 or more"
            )
    return found


@dataclass
class Raised:
    """The windows a strategy failed to make at one budget (each keeps nothing), and
    the first error, so that a failing plugin shows instead of scoring a plain 0."""

    count: int = 0
    first: str | None = None

    def add(self, error: Exception) -> None:
        self.count += 1
        if self.first is None:
            self.first = f"{type(error).__name__}: {error}"


def warn_raised(strategy: str, raised: Sequence[Raised], what: str) -> None:
    """One warning per strategy, over all its budgets, when any of its windows failed."""
    failed = [r for r in raised if r.count]
    if not failed:
        return
    count = sum(r.count for r in failed)
    warnings.warn(
        f"ctxwindow eval: strategy {strategy!r} raised at {count} {what}"
        f"{'' if count == 1 else 's'}, each scored as keeping nothing (the 'raised' "
        f"column); first: {failed[0].first}",
        RuntimeWarning,
        stacklevel=3,
    )


@dataclass
class Row:
    """One strategy at one budget."""

    strategy: str
    budget: int
    questions: int
    recall: float
    by_category: dict[int, float]
    all_kept: float
    recall_with_summaries: float | None
    too_small: int
    seconds: float
    median_ms: float
    #: Questions without a category: in ``recall`` (and ``all_kept``), in no category.
    uncategorised: int = 0
    #: ``recall`` and ``by_category`` of each conversation alone, by its id: the folds a
    #: lever is judged on (chosen on the others, scored on each).
    by_conversation: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Questions whose window the strategy failed to make (scored as keeping nothing).
    raised: int = 0
    first_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "questions": self.questions,
            # six places, as the agent rows: a figure shown to three is rounded once
            # (0.79653 kept as 0.7965 would show as 0.796 here, 0.797 in the tables)
            "recall": round(self.recall, 6),
            "by_category": {str(k): round(v, 6) for k, v in sorted(self.by_category.items())},
            "uncategorised": self.uncategorised,
            "all_kept": round(self.all_kept, 6),
            "recall_with_summaries": None
            if self.recall_with_summaries is None
            else round(self.recall_with_summaries, 6),
            "budget_too_small": self.too_small,
            "raised": self.raised,
            "first_error": self.first_error,
            "seconds": round(self.seconds, 3),
            "median_ms_per_window": round(self.median_ms, 3),
            "by_conversation": self.by_conversation,
        }


@dataclass
class EvalResult:
    rows: list[Row]
    counter: str
    categories: tuple[int, ...]
    load_report: LoadReport
    conversations: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "counter": self.counter,
            "categories": list(self.categories),
            "conversations": self.conversations,
            "load_report": self.load_report.to_dict(),
            "rows": [row.to_dict() for row in self.rows],
        }

    def recall(self, strategy: str, budget: int) -> float:
        return next(r.recall for r in self.rows if r.strategy == strategy and r.budget == budget)

    def scored_categories(self) -> tuple[int, ...]:
        """The categories asked for that some question was scored in."""
        return tuple(c for c in self.categories if any(c in r.by_category for r in self.rows))

    def uncategorised(self) -> bool:
        """Whether questions without a category were scored."""
        return any(row.uncategorised for row in self.rows)


def evaluate(
    strategies: Iterable[StrategySpec | str] | StrategySpec | str,
    conversations: Sequence[EvalConversation],
    *,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    counter: str = "approx",
    categories: Sequence[int] = HEADLINE_CATEGORIES,
    load_report: LoadReport | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> EvalResult:
    """Evidence recall of each strategy at each budget, every question asked at the end
    of its conversation with the question as the query. Questions of the ``categories``
    are scored, and questions without a category (your own data need not have them):
    those count in the overall recall only.

    Each conversation is read and counted once and shared by every strategy and
    question, so only the windows themselves cost per question.
    """
    specs = parse_specs(strategies)
    budgets = check_budgets(budgets)
    prepared = [(c, Conversation(c.messages), c.texts()) for c in conversations]
    wanted = set(categories)
    rows = []
    for spec in specs:
        config = {"strategy": spec.name, "budget": max(budgets), "counter": counter}
        windower = from_config({**config, **spec.run_options})
        failures: list[Raised] = []
        for budget in budgets:
            started = time.perf_counter()
            scores: list[tuple[int | None, Score]] = []
            owners: list[str] = []  # the conversation of each score
            timings: list[float] = []
            too_small = 0
            raised = Raised()
            for item, conversation, texts in prepared:
                for question in item.questions:
                    if not scored(question.category, wanted):
                        continue
                    begun = time.perf_counter()
                    try:
                        window = windower.select(conversation, query=question.text, budget=budget)
                    except (BudgetTooSmall, *STRATEGY_FAILURES) as error:
                        if isinstance(error, BudgetTooSmall):
                            too_small += 1
                        else:
                            raised.add(error)
                        scores.append((question.category, Score(0.0, 0.0, False)))
                        owners.append(item.id)
                        continue
                    timings.append(time.perf_counter() - begun)
                    kept, summaries = window_contents(window.messages)
                    scores.append((question.category, score(question, kept, summaries, texts)))
                    owners.append(item.id)
                if progress:
                    progress(spec.title, sum(scored(q.category, wanted) for q in item.questions))
            row = _row(spec.title, budget, scores, too_small, started, timings)
            row.by_conversation = _by_conversation(scores, owners)
            row.raised, row.first_error = raised.count, raised.first
            rows.append(row)
            failures.append(raised)
        warn_raised(spec.title, failures, "question")
    return EvalResult(
        rows,
        counter,
        tuple(categories),
        load_report or LoadReport(),
        [c.id for c in conversations],
    )


def scored(category: int | None, wanted: Sequence[int] | set[int]) -> bool:
    """Whether a question of that category is scored: uncategorised ones always are."""
    return category is None or category in wanted


def _by_conversation(
    scores: list[tuple[int | None, Score]], owners: list[str]
) -> dict[str, dict[str, Any]]:
    """Recall, by category too, of each conversation's questions alone."""
    grouped: dict[str, list[tuple[int | None, Score]]] = defaultdict(list)
    for owner, scored_one in zip(owners, scores, strict=True):
        grouped[owner].append(scored_one)
    out = {}
    for owner, own in grouped.items():
        by_category: dict[int, list[float]] = defaultdict(list)
        for category, result in own:
            if category is not None:
                by_category[category].append(result.verbatim)
        out[owner] = {
            "questions": len(own),
            "recall": round(sum(r.verbatim for _, r in own) / len(own), 4),
            "by_category": {
                str(k): round(sum(v) / len(v), 4) for k, v in sorted(by_category.items())
            },
        }
    return out


def _row(
    label: str,
    budget: int,
    scores: list[tuple[int | None, Score]],
    too_small: int,
    started: float,
    timings: list[float],
) -> Row:
    by_category: dict[int, list[float]] = defaultdict(list)
    for category, result in scores:
        if category is not None:
            by_category[category].append(result.verbatim)
    count = len(scores) or 1
    with_summaries = [result.with_summaries for _, result in scores]
    summarized = any(r.summarized for _, r in scores)  # a window held a summary
    return Row(
        strategy=label,
        budget=budget,
        questions=len(scores),
        recall=sum(r.verbatim for _, r in scores) / count,
        by_category={k: sum(v) / len(v) for k, v in by_category.items()},
        all_kept=sum(r.all_kept for _, r in scores) / count,
        recall_with_summaries=sum(with_summaries) / count if summarized else None,
        too_small=too_small,
        seconds=time.perf_counter() - started,
        median_ms=statistics.median(timings) * 1000 if timings else 0.0,
        uncategorised=sum(category is None for category, _ in scores),
    )
