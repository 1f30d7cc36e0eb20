"""Showing results: a terminal table (rich), JSON, and a plot of recall against budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxwindow.errors import ConfigError
from ctxwindow_eval.runner import EvalResult

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


def columns(result: EvalResult) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the results table, shared by the terminal and Markdown."""
    shown = result.categories
    summaries = any(row.recall_with_summaries is not None for row in result.rows)
    head = ["strategy", "budget", "recall", *(CATEGORY_NAMES.get(c, str(c)) for c in shown)]
    head += ["all kept", *(["with summaries"] if summaries else []), "ms/window"]
    cells = []
    for row in result.rows:
        line = [row.strategy, str(row.budget), f"{row.recall:.3f}"]
        line += [f"{row.by_category.get(c, 0.0):.3f}" for c in shown]
        line.append(f"{row.all_kept:.3f}")
        if summaries:
            value = row.recall_with_summaries
            line.append("-" if value is None else f"{value:.3f}")
        line.append(f"{row.median_ms:.2f}")
        cells.append(line)
    return head, cells


def table(result: EvalResult) -> Any:
    """A rich Table: one row per strategy and budget."""
    rich_table = require("rich.table")
    head, cells = columns(result)
    out = rich_table.Table(
        title=f"Evidence recall (counter {result.counter}, categories "
        f"{', '.join(map(str, result.categories))})",
        title_justify="left",
    )
    out.add_column(head[0], overflow="fold", min_width=8, max_width=36)
    for name in head[1:]:
        out.add_column(name, justify="right", style="bold" if name == "recall" else None)
    for line in cells:
        out.add_row(*line)
    return out


def markdown(result: EvalResult) -> str:
    """The same table as Markdown, for the docs (recall in bold)."""
    head, cells = columns(result)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in cells:
        line[2] = f"**{line[2]}**"
        lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines)


def write_json(result: EvalResult, path: str | Path) -> None:
    Path(path).write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")


def plot(result: EvalResult, path: str | Path) -> None:
    """Recall against budget, one line per strategy, as a PNG."""
    matplotlib = require("matplotlib")
    matplotlib.use("Agg")
    pyplot = require("matplotlib.pyplot")
    figure, axes = pyplot.subplots(figsize=(7, 4.5), dpi=120)
    for strategy in dict.fromkeys(row.strategy for row in result.rows):
        rows = [row for row in result.rows if row.strategy == strategy]
        axes.plot([r.budget for r in rows], [r.recall for r in rows], marker="o", label=strategy)
    axes.set_xscale("log", base=2)
    budgets = sorted({row.budget for row in result.rows})
    axes.set_xticks(budgets, [str(b) for b in budgets])
    axes.set_ylim(0, 1)
    axes.set_xlabel("token budget")
    axes.set_ylabel("evidence recall (categories " + ", ".join(map(str, result.categories)) + ")")
    axes.set_title("Evidence recall at a token budget")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
