"""Showing results: a terminal table (rich), JSON, and a plot of recall against budget."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ctxwindow.errors import ConfigError
from ctxwindow_eval.agent_runner import AgentResult
from ctxwindow_eval.runner import EvalResult

Result = EvalResult | AgentResult

CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
EXTRA_HINT = "pip install ctxwindow-eval"


def require(module: str) -> Any:
    """Import an optional dependency of the eval kit, or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"this needs {module.split('.', maxsplit=1)[0]}: {EXTRA_HINT}") from None


def columns(result: Result) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the results table, shared by the terminal and Markdown."""
    if isinstance(result, AgentResult):
        return _agent_columns(result)
    shown = result.scored_categories()
    summaries = any(row.recall_with_summaries is not None for row in result.rows)
    head = ["strategy", "budget", "recall", *(CATEGORY_NAMES.get(c, str(c)) for c in shown)]
    raised = _any_raised(result)
    too_small = any(row.too_small for row in result.rows)  # else the column is all 0
    head += ["all kept", *(["with summaries"] if summaries else [])]
    head += [*(["too small"] if too_small else []), *(["raised"] if raised else [])]
    head.append("ms/window")
    cells = []
    for row in result.rows:
        line = [row.strategy, str(row.budget), f"{row.recall:.3f}"]
        line += [f"{row.by_category.get(c, 0.0):.3f}" for c in shown]
        line.append(f"{row.all_kept:.3f}")
        if summaries:
            value = row.recall_with_summaries
            line.append("-" if value is None else f"{value:.3f}")
        line += [*([str(row.too_small)] if too_small else [])]
        line += [*([str(row.raised)] if raised else []), f"{row.median_ms:.2f}"]
        cells.append(line)
    return head, cells


def _any_raised(result: Result) -> bool:
    """Whether a strategy failed somewhere: only then has the table a 'raised' column."""
    return any(row.raised for row in result.rows)


def failures(result: Result) -> list[str]:
    """One line per strategy and budget where the strategy raised: how often, and the
    first error (the table has room for the count only)."""
    return [
        f"{row.strategy} at {row.budget}: {row.raised} raised, each scored as keeping "
        f"nothing; first: {row.first_error}"
        for row in result.rows
        if row.raised
    ]


#: The column of next-action recall's interval (see :mod:`ctxwindow_eval.spread`).
INTERVAL = "95% interval"


def _agent_columns(result: AgentResult) -> tuple[list[str], list[list[str]]]:
    head = ["strategy", "budget", "steps", "next-action recall", INTERVAL, "pending kept"]
    raised = _any_raised(result)
    head += ["pending cut", "task statement kept", "too small"]
    head += [*(["raised"] if raised else []), "ms/window"]

    def share(value: float | None, count: int) -> str:
        return "-" if value is None else f"{value:.3f} ({count})"

    cells = [
        [
            row.strategy,
            str(row.budget),
            str(row.steps),
            share(row.recall, row.recall_steps),
            _interval(row.recall_interval),
            share(row.pending_kept, row.pending_steps),
            str(row.pending_cut),
            "-" if row.task_kept is None else f"{row.task_kept:.3f}",
            str(row.too_small),
            *([str(row.raised)] if raised else []),
            f"{row.median_ms:.2f}",
        ]
        for row in result.rows
    ]
    return head, cells


def _interval(bounds: tuple[float, float] | None) -> str:
    return "-" if bounds is None else f"{bounds[0]:.3f}-{bounds[1]:.3f}"


def _title(result: Result) -> str:
    if isinstance(result, AgentResult):
        return (
            f"Agent steps (counter {result.counter}; steps: actions whose history is over "
            "the budget; in brackets, the steps each share is over; the 95% interval of "
            "recall draws whole tasks, else runs)"
        )
    return f"Evidence recall (counter {result.counter}, {_scope(result)})"


def _scope(result: EvalResult) -> str:
    """Which questions the recall is over: "categories 1, 2", "uncategorised questions"."""
    shown = result.scored_categories()
    categories = f"categories {', '.join(map(str, shown))}" if shown else ""
    if not result.uncategorised():
        return categories or f"categories {', '.join(map(str, result.categories))}"
    return f"{categories} and uncategorised questions" if shown else "uncategorised questions"


def table(result: Result) -> Any:
    """A rich Table: one row per strategy and budget."""
    rich_table = require("rich.table")
    head, cells = columns(result)
    if INTERVAL in head:  # a terminal is narrower than a page: the interval under the recall
        head, cells = _under_recall(head, cells)
    out = rich_table.Table(title=_title(result), title_justify="left")
    out.add_column(head[0], overflow="fold", min_width=8, max_width=36)
    for name in head[1:]:  # folded, never cut short with an ellipsis
        bold = name.startswith(("recall", "next-action recall"))
        out.add_column(name, justify="right", style="bold" if bold else None, overflow="fold")
    for line in cells:
        out.add_row(*line)
    return out


def _under_recall(head: list[str], cells: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """The interval column folded into the recall column's cells, a line below."""
    at = head.index(INTERVAL)
    head = [*head[: at - 1], f"{head[at - 1]} ({INTERVAL})", *head[at + 1 :]]
    cells = [[*line[: at - 1], f"{line[at - 1]}\n{line[at]}", *line[at + 1 :]] for line in cells]
    return head, cells


def markdown(result: Result) -> str:
    """The same table as Markdown, for the docs (recall in bold)."""
    head, cells = columns(result)
    bold = 3 if isinstance(result, AgentResult) else 2
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in cells:
        line[bold] = f"**{line[bold]}**"
        lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines)


def write_json(result: Result, path: str | Path) -> None:
    Path(path).write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")


def plot(result: Result, path: str | Path) -> None:
    """Recall against budget, one line per strategy, as a PNG."""
    if isinstance(result, AgentResult):
        _plot(series(result), path, "next-action recall", "Next-action recall on agent steps")
        return
    label = f"evidence recall ({_scope(result)})"
    _plot(series(result), path, label, "Evidence recall at a token budget")


def series(result: Result) -> dict[str, list[tuple[int, float | None]]]:
    """Each strategy's (budget, recall) points by budget, as plotted (in the order
    given, the line would zig-zag); None where nothing was measured (no step over that
    budget): a gap in the line, never a recall of 0."""
    return {
        strategy: sorted(
            ((row.budget, row.recall) for row in result.rows if row.strategy == strategy),
            key=lambda point: point[0],
        )
        for strategy in dict.fromkeys(row.strategy for row in result.rows)
    }


def _plot(
    points: dict[str, list[tuple[int, float | None]]], path: str | Path, label: str, title: str
) -> None:
    matplotlib = require("matplotlib")
    matplotlib.use("Agg")
    pyplot = require("matplotlib.pyplot")
    figure, axes = pyplot.subplots(figsize=(7, 4.5), dpi=120)
    for strategy, line in points.items():
        recalls = [math.nan if r is None else r for _, r in line]  # NaN: a gap
        axes.plot([b for b, _ in line], recalls, marker="o", label=strategy)
    budgets = sorted({budget for line in points.values() for budget, _ in line})
    if budgets and budgets[-1] >= 4 * budgets[0]:
        axes.set_xscale("log", base=2)
    axes.set_xticks(budgets, [str(b) for b in budgets])
    axes.set_ylim(0, 1)
    axes.set_xlabel("token budget")
    axes.set_ylabel(label)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
