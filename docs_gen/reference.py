"""The generated pages of the documentation site, as Markdown strings.

Nothing here depends on mkdocs: ``gen_pages.py`` (run by mkdocs-gen-files at build time)
writes these strings into the site, and ``core/tests/test_docs.py`` reads them directly.
Every page is built from what the code declares, so it cannot drift from it:

- the configuration reference from each first-party strategy's declared options;
- the CLI reference from ``ctxwindow._cli._parser()``;
- one page per first-party strategy from its plugin's README (links rewritten for the
  site), its declared options and its rows of ``docs/results/recall.json`` and
  ``docs/results/agent.json``;
- the README's strategy table, its figures from the same files (``readme_table``;
  ``python docs_gen/readme_table.py`` writes it into the README);
- the speed tables of docs/evaluation.md, from ``docs/results/bench.json`` and
  ``docs/results/bench-semantic.json`` (``bench_tables``; ``python
  docs_gen/bench_tables.py`` writes them in), and the memory table of
  docs/reliability.md from ``docs/results/memory.json`` (``memory_table``, the same);
- the API reference's member list from ``ctxwindow.__all__``.
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: First-party strategies: name -> (distribution, plugin folder), in the site's order.
FIRST_PARTY = {
    "fixed": ("ctxwindow-fixed", "plugins/fixed"),
    "sliding": ("ctxwindow-sliding", "plugins/sliding"),
    "semantic": ("ctxwindow-semantic", "plugins/semantic"),
    "summarize": ("ctxwindow-summarize", "plugins/summarize"),
    "pipeline": ("ctxwindow-pipeline", "plugins/pipeline"),
    "clear_tool_outputs": ("ctxwindow-pipeline", "plugins/pipeline"),
}

#: A line on when to pick each strategy, shown above its README.
WHEN_TO_USE = {
    "fixed": "You want the cheapest, most predictable window: the recent conversation, "
    "contiguous, and nothing else. A good default for short chats and agents whose "
    "recent steps are all that matter.",
    "sliding": "Long conversations where old facts come back, and you want no model and "
    "no extra dependency: keyword relevance to the question plus a recent run.",
    "semantic": "Long conversations where questions reach far back, worded differently "
    "from the turns that answer them, and you can afford a small embedding model.",
    "summarize": "You want a bounded, always-current account of the whole history "
    "rather than the turns picked for one question; with an LLM, or extractive "
    "without one.",
    "pipeline": "One strategy is not enough: clear old tool output, then summarize, then "
    "pick what is relevant, each stage under the same budget, with one record.",
    "clear_tool_outputs": "Agents whose old tool results (search pages, file dumps) "
    "crowd out the conversation: replace them with a short stub that says what went.",
}


def _cell(value: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(value).replace("\n", " ").replace("|", "\\|")


def _default(value: object) -> str:
    return f"`{value!r}`"


# -- configuration reference -----------------------------------------------------------
def first_party_strategies() -> list[dict[str, Any]]:
    """``describe_strategies()`` for the installed first-party strategies, site order."""
    import inspect

    import ctxwindow

    by_name = {
        entry["name"]: entry
        for entry in ctxwindow.describe_strategies()
        if entry["distribution"] == FIRST_PARTY.get(entry["name"], ("",))[0]
    }
    for name, entry in by_name.items():
        doc = inspect.getdoc(ctxwindow.strategy_class(name)) or ""
        paragraph = " ".join(doc.split("\n\n")[0].split())
        entry["summary"] = paragraph.replace("``", "`")
    return [by_name[name] for name in FIRST_PARTY if name in by_name]


def options_table(options: list[dict[str, Any]]) -> str:
    lines = ["| option | type | default | choices | meaning |", "| --- | --- | --- | --- | --- |"]
    for option in options:
        choices = option.get("choices")
        shown = ", ".join(f"`{choice!r}`" for choice in choices) if choices else ""
        lines.append(
            f"| `{option['name']}` | {_cell(option['type'])} | {_cell(_default(option['default']))}"
            f" | {_cell(shown)} | {_cell(option['help'])} |"
        )
    return "\n".join(lines)


def configuration_reference() -> str:
    """Every option of every installed first-party strategy, from what each declares."""
    from ctxwindow._config import HOST_KEYS

    strategies = first_party_strategies()
    missing = [name for name in FIRST_PARTY if name not in {s["name"] for s in strategies}]
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated at build time by docs_gen/reference.py from the options each "
        "strategy declares (`option_specs`); do not edit. -->",
        "",
        "A configuration is a dict, a `ctxwindow.toml`, or `[tool.ctxwindow]` in "
        "`pyproject.toml`, read by `ctxwindow.from_config(...)` and by "
        "`ctxwindow select --config FILE`. It holds the host's keys "
        f"({', '.join(f'`{key}`' for key in HOST_KEYS)}) and, flat beside them, the "
        "options of the chosen strategy. Unknown keys are an error listing the valid "
        "ones; a wrong type says what was expected. The same options are keyword "
        "arguments of the strategy class and `KEY=VALUE` pairs of "
        "`ctxwindow select --option`.",
        "",
        "```toml",
        'strategy = "fixed"',
        "budget = 4000",
        'counter = "approx"   # approx | tiktoken:<encoding or model> | hf:<tokenizer.json>',
        "max_messages = 40    # an option of `fixed`",
        "```",
        "",
        "`ctxwindow strategies` prints the same information for every installed "
        "strategy, third-party ones included.",
    ]
    for strategy in strategies:
        distribution = strategy["distribution"]
        out += [
            "",
            f"## `{strategy['name']}`",
            "",
            f"{strategy['summary']} From `{distribution}` "
            f"([strategy page](../strategies/{strategy['name']}.md)); "
            f"requires an LLM: {'yes' if strategy['requires_llm'] else 'no'}.",
            "",
            options_table(strategy["options"]),
        ]
    if missing:
        out += [
            "",
            "Not installed when this page was built: "
            + ", ".join(f"`{name}`" for name in missing)
            + ".",
        ]
    return "\n".join(out) + "\n"


# -- CLI reference ---------------------------------------------------------------------
@contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse wraps usage to the terminal; pin the width so the page is stable."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order they were added."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def _arguments_table(parser: argparse.ArgumentParser) -> str:
    header = ["| argument | value | default | meaning |", "| --- | --- | --- | --- |"]
    lines = list(header)
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            name = ", ".join(f"`{flag}`" for flag in action.option_strings)
            value = "" if action.nargs == 0 else action.metavar or action.dest.upper()
        else:
            name = f"`{action.metavar or action.dest}`"
            value = ""
        if isinstance(action, argparse._AppendAction):
            value = f"{value} (repeatable)"
        elif action.type is not None and not value:
            value = getattr(action.type, "__name__", "")
        elif action.type is not None:
            value = f"{value} ({getattr(action.type, '__name__', '')})"
        default = action.default
        shown = "" if default in (None, [], False) or action.nargs == 0 else f"`{default}`"
        lines.append(f"| {name} | {_cell(value)} | {_cell(shown)} | {_cell(action.help or '')} |")
    return "No arguments besides `--help`." if lines == header else "\n".join(lines)


def cli_reference() -> str:
    """Each subcommand of ``ctxwindow``: its help, usage and arguments, from argparse."""
    from ctxwindow._cli import _parser

    parser = _parser()
    with _columns(88):
        usage = parser.format_usage().strip()
        out = [
            "# CLI reference",
            "",
            "<!-- Generated at build time by docs_gen/reference.py from "
            "ctxwindow._cli._parser(); do not edit. -->",
            "",
            f"{parser.description} Errors print one line and exit 1 (2 for usage "
            "errors); `--debug` shows the traceback instead.",
            "",
            "```text",
            usage,
            "```",
            "",
            _arguments_table(parser),
        ]
        for name, help_text, sub in _subcommands(parser):
            out += ["", f"## `ctxwindow {name}`", "", f"{help_text[:1].upper()}{help_text[1:]}."]
            if sub.description:
                out += ["", sub.description]
            out += ["", "```text", sub.format_usage().strip(), "```", "", _arguments_table(sub)]
    return "\n".join(out) + "\n"


def cli_subcommands() -> list[str]:
    from ctxwindow._cli import _parser

    return [name for name, _, _ in _subcommands(_parser())]


# -- strategy pages --------------------------------------------------------------------
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")


def site_path(target: Path) -> str | None:
    """Where a repository file lives in the site (relative to docs/), or None."""
    try:
        relative = target.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    if relative == "README.md":
        return "index.md"
    if relative.startswith("docs/"):
        return relative.removeprefix("docs/")
    for name, (_, folder) in FIRST_PARTY.items():
        if relative == f"{folder}/README.md":
            return f"strategies/{name}.md"
    return None


#: The repository's address, as the package READMEs link to it (PyPI shows them, where
#: a link relative to the monorepo is a 404).
REPOSITORY = "https://github.com/ctxwindow/ctxwindow"


def repository_file(target: str) -> tuple[str, str] | None:
    """A link to a file of this repository on GitHub as (path from the root, anchor);
    None for any other link. ``REPOSITORY#readme`` is the README."""
    if target == REPOSITORY or target.startswith(f"{REPOSITORY}#"):
        anchor = target.partition("#")[2]
        return "README.md", "" if anchor == "readme" else anchor
    prefix = f"{REPOSITORY}/blob/main/"
    if not target.startswith(prefix):
        return None
    path, _, anchor = target.removeprefix(prefix).partition("#")
    return path, anchor


def rewrite_links(text: str, source: Path, page: str) -> str:
    """Links of ``source`` (a repository file) made right for site page ``page``: relative
    ones, and a package README's absolute links to this repository's files.

    A relative link to a file the site does not hold becomes its plain text; an absolute
    one stays as it is.
    """

    def replace(match: re.Match[str]) -> str:
        label, target = match.group(1), match.group(2)
        in_repository = repository_file(target)
        if in_repository is not None:  # a package README's link, absolute for PyPI
            path, anchor = in_repository
            where = site_path(ROOT / path)
            if where is None:
                return match.group(0)  # a file the site does not hold: the repository's
        elif re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return match.group(0)
        else:
            path, _, anchor = target.partition("#")
            where = site_path(source.parent / path)
            if where is None:
                return label
        relative = posixpath.relpath(where, posixpath.dirname(page) or ".")
        return f"[{label}]({relative}{'#' + anchor if anchor else ''})"

    return LINK.sub(replace, text)


LIST_ITEM = re.compile(r"^(?:[-*+]|\d+\.) ")


def loose_lists(text: str) -> str:
    """A blank line before each list that follows a paragraph line: GitHub renders such a
    list without one, Python-Markdown does not."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        previous = out[-1] if out else ""
        if (
            not fenced
            and LIST_ITEM.match(line)
            and previous.strip()
            and not LIST_ITEM.match(previous)
            and not previous.startswith((" ", "|", "#"))
        ):
            out.append("")
        out.append(line)
    return "\n".join(out) + "\n"


def result_rows(name: str, results: str = "recall") -> list[dict[str, Any]]:
    """The rows of ``docs/results/<results>.json`` for strategy ``name``: ``recall``
    (LoCoMo) or ``agent`` (tau-bench airline trajectories)."""
    path = DOCS / "results" / f"{results}.json"
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["rows"]
    return [row for row in rows if row["strategy"] == name]


#: The README's strategy table: what to install and what each keeps; the figures come
#: from docs/results.
README_STRATEGIES = {
    "fixed": ("`pip install ctxwindow-fixed`", "the most recent units that fit"),
    "sliding": (
        "`pip install ctxwindow-sliding`",
        "the recent turns plus the older units most important to the query (numpy "
        "BM25 spread to neighbours, speaker and fact salience, `metadata.importance`; in an "
        "agent's history, the identifiers a unit adds, older tool results as marked "
        "excerpts; pluggable scorer)",
    ),
    "summarize": (
        "`pip install ctxwindow-summarize`",
        "the recent turns verbatim plus one rolling summary of everything older "
        "(extractive: the user's words first, tool calls collapsed, identifiers kept; or "
        "any OpenAI-compatible LLM)",
    ),
    "semantic": (
        "`pip install 'ctxwindow-semantic[bundled-model]'`",
        "a recent tail, then the older units most relevant to the query (dense + BM25, "
        "spread to neighbours; in an agent's history, the identifiers a unit adds, older "
        "tool results as marked excerpts)",
    ),
}
README_TABLE_START = "<!-- strategy-table: generated by docs_gen/readme_table.py -->"
README_TABLE_END = "<!-- end of strategy-table -->"


def _agent_cell(name: str) -> str:
    """Next-action recall, then pending exchange kept, at each agent budget."""
    agent = result_rows(name, "agent")
    steps = " / ".join(f"{row['next_action_recall']:.3f}" for row in agent)
    pending = " / ".join(f"{row['pending_kept']:.2f}" for row in agent)
    return f"{steps}; {pending}" if agent else "not measured"


def readme_table() -> str:
    """The README's strategy table, figures read from docs/results."""
    head = (
        "| strategy | install | keeps | LoCoMo evidence recall at 1k / 2k / 4k / 8k tokens "
        "| agent steps (tau-bench airline): next-action recall at 2k / 3k / 4k tokens; "
        "pending exchange kept |"
    )
    lines = [README_TABLE_START, head, "| --- | --- | --- | --- | --- |"]
    for name, (install, keeps) in README_STRATEGIES.items():
        recall = result_rows(name)
        verbatim = " / ".join(f"{row['recall']:.3f}" for row in recall) or "not measured"
        summaries = [row.get("recall_with_summaries") for row in recall]
        if any(value is not None for value in summaries):
            shown = " / ".join("-" if v is None else f"{v:.3f}" for v in summaries)
            verbatim = f"{verbatim} verbatim; {shown} with the summary"
        agent_cell = _agent_cell(name)
        lines.append(f"| `{name}` | {install} | {_cell(keeps)} | {verbatim} | {agent_cell} |")
    lines.append(
        "| `pipeline`, `clear_tool_outputs` | `pip install ctxwindow-pipeline` | `pipeline`: "
        "what its stages keep, run in order under one budget (say `clear_tool_outputs`, "
        "`summarize`, `semantic`); `clear_tool_outputs`: old, large tool outputs replaced by "
        "short stubs that say what was removed (each still answering its call), then, if "
        "still over budget, the newest units that fit | not measured (a pipeline's depends "
        f"on its stages) | `clear_tool_outputs`: {_agent_cell('clear_tool_outputs')} |"
    )
    lines.append(README_TABLE_END)
    return "\n".join(lines)


ABLATION_START = "<!-- ablation-table: generated by docs_gen/ablation_tables.py -->"
ABLATION_END = "<!-- end of ablation-table -->"
#: The budgets an ablation table shows, as its columns.
ABLATION_BUDGETS = (1000, 2000, 4000, 8000)
#: Each plugin README's table of measured configurations, one row per configuration:
#: its label (in bold, the defaults'), the results file it is read from (``recall``: the
#: main run of ``nox -s eval``, so the defaults agree with the README's figures) and the
#: ``ctxwindow eval`` spec, which is how the row is named there.
ABLATIONS: dict[str, list[tuple[str, str, str]]] = {
    "plugins/sliding/README.md": [
        ("`fixed` (most recent)", "recall", "fixed"),
        ("all recent (`important_share=0`)", "ablation-sliding", "sliding:important_share=0"),
        (
            "BM25 only (`scorer=keywords:neighbours=0;speaker=0;salience=0`)",
            "ablation-sliding",
            "sliding:scorer=keywords:neighbours=0;speaker=0;salience=0",
        ),
        (
            "+ neighbours (`scorer=keywords:speaker=0;salience=0`)",
            "ablation-sliding",
            "sliding:scorer=keywords:speaker=0;salience=0",
        ),
        (
            "+ named speaker (`scorer=keywords:salience=0`)",
            "ablation-sliding",
            "sliding:scorer=keywords:salience=0",
        ),
        ("**+ asked-for fact: the defaults**", "recall", "sliding"),
        (
            "defaults without neighbours (`scorer=keywords:neighbours=0`)",
            "ablation-sliding",
            "sliding:scorer=keywords:neighbours=0",
        ),
        (
            "defaults without named speaker (`scorer=keywords:speaker=0`)",
            "ablation-sliding",
            "sliding:scorer=keywords:speaker=0",
        ),
        ("`important_share=1` (no recent run)", "ablation-sliding", "sliding:important_share=1"),
        ("`important_share=0.8`", "ablation-sliding", "sliding:important_share=0.8"),
        ("`important_share=0.7`", "ablation-sliding", "sliding:important_share=0.7"),
        ("`important_share=0.5`", "ablation-sliding", "sliding:important_share=0.5"),
        ("`semantic` defaults, for reference (all-MiniLM-L6-v2 + BM25)", "recall", "semantic"),
    ],
    "plugins/semantic/README.md": [
        ("`fixed` (most recent)", "recall", "fixed"),
        (
            "dense only (`lexical_weight=0, neighbours=0`)",
            "ablation-semantic",
            "semantic:lexical_weight=0,neighbours=0",
        ),
        (
            "BM25 only (`lexical_weight=1, neighbours=0`)",
            "ablation-semantic",
            "semantic:lexical_weight=1,neighbours=0",
        ),
        ("dense + BM25 (`neighbours=0`)", "ablation-semantic", "semantic:neighbours=0"),
        (
            "dense + BM25 + neighbours, no recent tail (`recent_share=0`)",
            "ablation-semantic",
            "semantic:recent_share=0",
        ),
        ("**defaults** (`recent_share=0.05`)", "recall", "semantic"),
        ("defaults with `recent_share=0.1`", "ablation-semantic", "semantic:recent_share=0.1"),
        (
            "defaults on PyTorch (`embedder=sentence-transformers:@torch`)",
            "ablation-semantic",
            "semantic:embedder=sentence-transformers:@torch",
        ),
    ],
}


def ablation_specs(results: str) -> list[str]:
    """The ``ctxwindow eval`` specs whose rows ``docs/results/<results>.json`` must hold
    for the ablation tables (what ``nox -s eval`` runs into it)."""
    return [spec for rows in ABLATIONS.values() for _, found, spec in rows if found == results]


def ablation_table(readme: str) -> str:
    """The table of measured configurations of a plugin README (a key of ABLATIONS),
    every figure read from docs/results."""
    lines = [
        ABLATION_START,
        "| configuration | " + " | ".join(f"{b:,}" for b in ABLATION_BUDGETS) + " |",
        "|---|" + "---|" * len(ABLATION_BUDGETS),
    ]
    for label, results, spec in ABLATIONS[readme]:
        by_budget = {row["budget"]: row["recall"] for row in result_rows(spec, results)}
        figures = [by_budget.get(budget) for budget in ABLATION_BUDGETS]
        if any(value is None for value in figures):
            raise LookupError(f"docs/results/{results}.json lacks {spec!r} at some budget")
        bold = "**" if label.startswith("**") else ""
        cells = " | ".join(f"{bold}{value:.3f}{bold}" for value in figures)
        lines.append(f"| {label} | {cells} |")
    lines.append(ABLATION_END)
    return "\n".join(lines)


def write_between(path: Path, start: str, end: str, text: str) -> None:
    """Replace what lies between the markers ``start`` and ``end`` (both included, and
    both starting ``text``'s own) in the file at ``path``: a generated part of a page."""
    page = path.read_text(encoding="utf-8")
    first = page.index(start)
    last = page.index(end) + len(end)
    path.write_text(page[:first] + text + page[last:], encoding="utf-8")


BENCH_START = "<!-- bench-tables: generated by docs_gen/bench_tables.py -->"
BENCH_END = "<!-- end of bench-tables -->"
#: The result files of ``ctxwindow bench``, in the order their tables are shown.
BENCH_FILES = ("bench.json", "bench-semantic.json")


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.3f}" if value < 1 else f"{value:,.1f}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}x"


def bench_tables() -> str:
    """The speed tables: each strategy's figures per history length and entry point,
    then the ratios the bars are stated in, read from the bench's result files."""
    rows: list[dict[str, Any]] = []
    growth: dict[str, dict[str, Any]] = {}
    imports: float | None = None
    loads: list[str] = []
    for name in BENCH_FILES:
        path = DOCS / "results" / name
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            rows.extend(data["rows"])
            growth.update(data["summary"])
            if imports is None:  # the first file's: the model-free run, made most often
                imports = data.get("import_ms")
            load = data["machine"].get("load")
            if load is not None:
                loads.append(f"{load:.1f} at the end of `{name}`'s run")
    times = [
        "| strategy | messages | count loop | cold | warm | `select` cold | `select` warm "
        "| adapter cold | adapter warm | `trim_messages` | `trim_messages` cached |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = [
        "| strategy | messages | cold / count loop | cold / `trim_messages` "
        "| cached `trim_messages` / warm | `select` warm / warm | adapter warm / warm "
        "| warm / encoding the new message | `trim_messages` window tokens / ours |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for row in rows:
        where = f"| {row['strategy']} | {row['messages']:,} |"
        keys = ("count_ms", "cold_ms", "warm_ms", "select_cold_ms", "select_warm_ms")
        keys += ("adapter_cold_ms", "adapter_warm_ms", "trim_ms", "trim_cached_ms")
        times.append(where + "".join(f" {_ms(row[key])} |" for key in keys))
        keys = ("cold_over_count", "cold_over_trim", "trim_cached_over_warm")
        keys += ("select_warm_over_conversation", "adapter_warm_over_conversation")
        keys += ("warm_over_encode_new",)
        tokens = row["trim_tokens_ratio"]
        ratio_cells = "".join(f" {_times(row[key])} |" for key in keys)
        ratios.append(where + ratio_cells + f" {'-' if tokens is None else f'{tokens:.2f}'} |")
        notes.extend(f"- {row['strategy']} at {row['messages']:,}: {n}" for n in row["notes"])
    cold_caches = [
        "| strategy | messages | warm | cached `trim_messages` | cached `trim_messages` / warm |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        if row.get("warm_cold_caches_ms") is not None:
            cold_caches.append(
                f"| {row['strategy']} | {row['messages']:,} | {_ms(row['warm_cold_caches_ms'])} "
                f"| {_ms(row.get('trim_cached_cold_caches_ms'))} "
                f"| {_times(row.get('trim_cached_over_warm_cold_caches'))} |"
            )
    flat = [
        "| strategy | history lengths | warm | `select` warm | adapter warm |",
        "|---|---|---|---|---|",
    ]
    for name, entry in growth.items():
        cells = (entry["warm_growth"], entry["select_warm_growth"], entry["adapter_warm_growth"])
        flat.append(
            f"| {name} | {entry['smallest']:,} to {entry['largest']:,} |"
            + "".join(f" {_times(cell)} |" for cell in cells)
        )
    machine = (
        f" (on a machine shared with other jobs: load average {', '.join(loads)})" if loads else ""
    )
    parts = [
        BENCH_START,
        f"Medians in milliseconds{machine}:",
        "",
        *times,
        "",
        "Ratios (above 1, the first is slower):",
        "",
        *ratios,
    ]
    if len(cold_caches) > 2:
        parts += [
            "",
            "The warm turn and the cached `trim_messages` with caches cold (each after a full "
            "collection), median milliseconds:",
            "",
            *cold_caches,
        ]
    parts += [
        "",
        "How warm cost grows with the history (1.0x is flat):",
        "",
        *flat,
    ]
    if notes:
        parts += ["", *notes]
    parts += agent_step_table()
    parts += [
        "",
        "The bars, as this run meets them or not:",
        "",
        *bench_bars(rows, growth, imports),
    ]
    parts.append(BENCH_END)
    return "\n".join(parts)


#: The result file of ``ctxwindow bench --agent-steps``.
AGENT_STEPS_FILE = "bench-agent-steps.json"
#: The result file of ``ctxwindow bench --agent-steps --one-task``.
AGENT_TASK_FILE = "bench-agent-task.json"


def agent_step_table() -> list[str]:
    """The agent step tables: a loop of requests (``ctxwindow bench --agent-steps``) and
    a run from one task (``--one-task``), from their results files (none when missing)."""
    return _step_table(
        AGENT_STEPS_FILE,
        "One step of an agent loop, median milliseconds (`ctxwindow bench --agent-steps`: "
        "the user's request naming an id the history holds, the tool call and its result "
        "appended to a history of the same length whose tool results are records with "
        "identifiers; the lengths' steps run turn about, so each growth compares steps "
        "made under the same load){machine}. Unlike the warm turn above, whose question "
        "matches nothing in the history, a step here gives a ranking strategy something "
        "to rank:",
    ) + _step_table(
        AGENT_TASK_FILE,
        "One step of an agent's run from one task, median milliseconds (`ctxwindow bench "
        "--agent-steps --one-task`: one request, then tool rounds only, as a coding or "
        "auditing agent runs; a step appends a tool round){machine}. The current turn is "
        "the whole history, and so the query of `sliding` and `semantic` (the turn's "
        "newest 32,000 characters), read anew on every step:",
    )


def _step_table(name: str, intro: str) -> list[str]:
    """A table of agent steps from ``docs/results/NAME``, after ``intro`` (whose
    ``{machine}`` says the machine's load)."""
    path = DOCS / "results" / name
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    sizes = sorted({row["messages"] for row in data["rows"]})
    by = {(row["strategy"], row["messages"]): row["step_ms"] for row in data["rows"]}
    head = "| strategy |" + "".join(f" {size:,} messages |" for size in sizes) + " growth |"
    lines = [head, "|---|" + "---|" * (len(sizes) + 1)]
    for strategy, entry in data["summary"].items():
        cells = "".join(f" {_ms(by.get((strategy, size)))} |" for size in sizes)
        lines.append(f"| {strategy} |{cells} {_times(entry['step_growth'])} |")
    load = data["machine"].get("load")
    machine = f" (load average {load:.1f} at the end of the run)" if load is not None else ""
    return ["", intro.format(machine=machine), "", *lines]


SERVE_START = "<!-- serve-bench: generated by docs_gen/bench_tables.py -->"
SERVE_END = "<!-- end of serve-bench -->"
#: The proxy's bar: what it adds to a warm windowed request, at most (milliseconds).
SERVE_ADDED_MS = 2.0


def serve_table() -> str:
    """What the proxy adds, from ``docs/results/serve-bench.json`` (written by
    ``python -m ctxwindow_serve.bench --suite``), with the machine's load at the time,
    the proxy's CPU time per request and what it ran on."""
    results = json.loads((DOCS / "results" / "serve-bench.json").read_text(encoding="utf-8"))
    machine = results["machine"]
    load = machine.get("load")
    lines = [
        SERVE_START,
        f"{machine['cpus']} cores, Python {machine['python']}"
        + (f", load average {load:.1f} when the run ended" if load is not None else "")
        + f"; medians of {results['runs'][0]['requests']} requests per arm:",
        "",
        "| run | messages | direct | through the proxy | added | ratio | proxy CPU (ms) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run in results["runs"]:
        key = "first_chunk_ms" if run["stream"] else "total_ms"
        direct, proxied = run["direct"][key]["median"], run["proxy"][key]["median"]
        lines.append(
            f"| {run['label']} | {run['messages']:,} | {_ms(direct)} ms | {_ms(proxied)} ms "
            f"| {_ms(run[f'added_{key}'])} ms | {_times(run[f'ratio_{key}'])} "
            f"| {_ms(run.get('proxy_cpu_ms'))} |"
        )
    runtime = results.get("runtime")
    if runtime:
        lines += [
            "",
            f"Run on {runtime['server']} ({runtime['http']}, {runtime['loop']}), "
            f"upstream client {runtime['client']}, JSON {runtime['json']}.",
        ]
    windowed = [r for r in results["runs"] if not r["passthrough"]]
    added = {
        "JSON" if not r["stream"] else "first SSE chunk": r[
            "added_first_chunk_ms" if r["stream"] else "added_total_ms"
        ]
        for r in windowed
    }
    met = bool(added) and all(value <= SERVE_ADDED_MS for value in added.values())
    figures = ", ".join(f"{name} {_ms(value)} ms" for name, value in added.items())
    lines += [
        "",
        f"The bar, at most {SERVE_ADDED_MS:g} ms added to a warm windowed request and to its "
        "first streamed chunk: "
        + ("met" if met else "**not met**")
        + (f" ({figures}) in this run." if figures else "."),
        SERVE_END,
    ]
    return "\n".join(lines)


MEMORY_START = "<!-- memory-table: generated by docs_gen/bench_tables.py -->"
MEMORY_END = "<!-- end of memory-table -->"


def _seconds(value: float) -> str:
    return f"{value:,.2f}" if value < 10 else f"{value:,.0f}"


def memory_table() -> str:
    """One cold visit's memory on a long history, per strategy, from
    ``docs/results/memory.json`` (written by ``python -m ctxwindow_eval.memory``), least
    first, beside the ceiling ``tests/test_memory.py`` holds each model-free one to."""
    from ctxwindow_eval.memory import CEILINGS_MIB

    rows = json.loads((DOCS / "results" / "memory.json").read_text(encoding="utf-8"))
    sizes = sorted({row["messages"] for row in rows})
    lines = [
        MEMORY_START,
        f"One run of `python -m ctxwindow_eval.memory` on {' and '.join(f'{s:,}' for s in sizes)}"
        " messages:",
        "",
        "| strategy | options | kept | seconds | peak resident growth, MiB | ceiling, MiB |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for row in sorted(rows, key=lambda r: (r.get("rss_growth_mib", float("inf")), r["strategy"])):
        name = row["strategy"]
        if "error" in row:
            lines.append(f"| `{name}` | | | | failed: {_cell(row['error'])} | |")
            continue
        options = f"`{json.dumps(row['options'])}`" if row["options"] else "defaults"
        ceiling = CEILINGS_MIB.get(name)
        held = f"{ceiling:,}" if ceiling is not None else "none (loads a model)"
        lines.append(
            f"| `{name}` | {options} | {row['kept']:,} | {_seconds(row['seconds'])} "
            f"| {row['rss_growth_mib']:,.0f} | {held} |"
        )
    before = [row["peak_rss_mib"] - row["rss_growth_mib"] for row in rows if "error" not in row]
    if before:
        lines += [
            "",
            f"Before its visit, each process (the interpreter, ctxwindow, the history, any "
            f"model) held {min(before):,.0f} to {max(before):,.0f} MiB.",
        ]
    lines.append(MEMORY_END)
    return "\n".join(lines)


#: (what, strategies it applies to (None: every model-free one), sizes, the row's key,
#: the bar, whether a figure must be at least (True) or at most (False) the bar)
BARS: tuple[tuple[str, tuple[str, ...] | None, tuple[int, ...], str, float, bool], ...] = (
    ("cached `trim_messages` / warm", None, (10_000, 100_000), "trim_cached_over_warm", 20, True),
    ("`select` cold / `select` warm", None, (10_000,), "select_cold_over_warm", 10, True),
    ("`select` warm / warm", None, (10_000,), "select_warm_over_conversation", 3, False),
    ("adapter cold / adapter warm", None, (10_000,), "adapter_cold_over_warm", 10, True),
    ("adapter warm / warm", None, (10_000,), "adapter_warm_over_conversation", 3, False),
    ("cold / `trim_messages`", ("fixed",), (10_000,), "cold_over_trim", 1.0, False),
    ("cold / count loop", ("fixed",), (10_000,), "cold_over_count", 3, False),
    ("warm / encoding the new message", ("semantic",), (), "warm_over_encode_new", 1.3, False),
    (
        "PyTorch encoding / default encoding (cold)",
        ("semantic",),
        (1_000,),
        "encode_all_torch_over_encode_all",
        2,
        True,
    ),
)


#: Warm cost at the largest history over the smallest: "flat" is within this.
FLAT = 2.0
#: The median ``import ctxwindow`` in a fresh interpreter, at most.
IMPORT_MS = 50


def _unlike(key: str, row: dict[str, Any]) -> str:
    """For a bar against ``trim_messages``: a word when its window was not within
    :data:`ctxwindow_eval.bench.LIKE_FOR_LIKE` of ours in tokens (the row's note says so
    too), so that the bar is not read as met like for like."""
    from ctxwindow_eval.bench import LIKE_FOR_LIKE  # the bench's own bound

    ratio = row.get("trim_tokens_ratio")
    if "trim" not in key or ratio is None or abs(ratio - 1) <= LIKE_FOR_LIKE:
        return ""
    return f" (`trim_messages`' window {ratio:.2f}x ours: not like for like)"


def bench_bars(
    rows: list[dict[str, Any]], growth: dict[str, dict[str, Any]], imports: float | None
) -> list[str]:
    """A table of every bar the bench can check, the figure this run gave, and whether
    it is met: read from the same results as the tables above, so the page never claims
    a bar the results do not show."""
    out = ["| bar | strategy | messages | figure | met |", "|---|---|---|---|---|"]

    def line(
        what: str,
        name: str,
        messages: str,
        figure: float | None,
        bar: float,
        ok: bool,
        note: str = "",
    ) -> str:
        met = "-" if figure is None else "yes" if ok else "**no**"
        shown = _times(figure)
        if figure is not None and round(figure, 1) == bar:  # rounded onto the bar: say more
            shown = f"{figure:,.2f}x"
        return f"| {what} | {name} | {messages} | {shown} | {met}{note} |"

    model_free = [r for r in rows if r["encode_new_ms"] is None]
    for what, names, sizes, key, bar, at_least in BARS:
        for row in [r for r in rows if r["strategy"] in names] if names else model_free:
            if sizes and row["messages"] not in sizes:
                continue
            figure = row.get(key)
            ok = figure is not None and (figure >= bar if at_least else figure <= bar)
            sign = ">=" if at_least else "<="
            size, unlike = f"{row['messages']:,}", _unlike(key, row)
            what_bar = f"{what} {sign} {bar:g}x"
            out.append(line(what_bar, row["strategy"], size, figure, bar, ok, unlike))
    for name, entry in growth.items():
        span = f"{entry['smallest']:,} to {entry['largest']:,}"
        figure = entry["warm_growth"]
        out.append(
            line(
                f"warm growth <= {FLAT:g}x",
                name,
                span,
                figure,
                FLAT,
                figure is not None and figure <= FLAT,
            )
        )
    steps = DOCS / "results" / AGENT_STEPS_FILE
    if steps.exists():  # the same bar for an agent's step, the measure that engages ranking
        for name, entry in json.loads(steps.read_text(encoding="utf-8"))["summary"].items():
            figure = entry["step_growth"]
            span = f"{entry['smallest']:,} to {entry['largest']:,}"
            ok = figure is not None and figure <= FLAT
            out.append(line(f"agent step growth <= {FLAT:g}x", name, span, figure, FLAT, ok))
    if imports is not None:
        met = "yes" if imports <= IMPORT_MS else "**no**"
        out.append(
            f"| `import ctxwindow` <= {IMPORT_MS:g} ms | - | - | {_ms(imports)} ms | {met} |"
        )
    return out


def strategy_page(name: str) -> str:
    """The strategy's README for the site, then its declared options and eval numbers."""
    _, folder = FIRST_PARTY[name]
    source = ROOT / folder / "README.md"
    page = f"strategies/{name}.md"
    readme = loose_lists(rewrite_links(source.read_text(encoding="utf-8"), source, page))
    title, _, body = readme.partition("\n")
    out = [
        title,
        "",
        f"<!-- Generated at build time from {folder}/README.md by docs_gen/reference.py; "
        "edit the README. -->",
        "",
        f'!!! tip "When to use it"\n    {WHEN_TO_USE[name]}',
        body.rstrip(),
    ]
    declared = {s["name"]: s for s in first_party_strategies()}
    if name in declared:
        out += [
            "",
            "## Declared options",
            "",
            "What the strategy class declares (also in the "
            "[configuration reference](../reference/configuration.md)):",
            "",
            options_table(declared[name]["options"]),
        ]
    rows = result_rows(name)
    if rows:
        out += [
            "",
            "## On the shipped benchmarks",
            "",
            "Evidence recall on the LoCoMo development split (categories 1-4, approximate "
            "counting), from `docs/results/recall.json` as written by `python3 -m nox -s "
            "eval`; see [Evaluation](../evaluation.md) for the metric.",
            "",
            "| budget | recall | all evidence kept | with summaries | ms / window |",
            "| --- | --- | --- | --- | --- |",
        ]
        for row in rows:
            summaries = row.get("recall_with_summaries")
            out.append(
                f"| {row['budget']:,} | **{row['recall']:.3f}** | {row['all_kept']:.3f} | "
                f"{'-' if summaries is None else f'{summaries:.3f}'} | "
                f"{row['median_ms_per_window']:.2f} |"
            )
        out += ["", "![Evidence recall against budget, every strategy](../img/recall.png)"]
    steps = result_rows(name, "agent")
    if steps:
        out += [
            "",
            "Agent steps on the tau-bench airline development split (100 trajectories, "
            "approximate counting), from `docs/results/agent.json`: at every action whose "
            "history is over the budget, the share of the values its arguments needed that "
            "the window kept, whether the exchange the model was waiting on stayed, and "
            "whether the task statement did; the recall's 95% interval draws whole tasks "
            "(see [Evaluation](../evaluation.md#agent-trajectories)).",
            "",
            "| budget | steps | next-action recall | 95% interval | pending exchange kept | "
            "task statement kept | ms / window |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in steps:
            low, high = row.get("next_action_recall_interval") or (None, None)
            interval = "-" if low is None else f"{low:.3f}-{high:.3f}"
            out.append(
                f"| {row['budget']:,} | {row['steps_with_choice']} | "
                f"**{row['next_action_recall']:.3f}** | {interval} | {row['pending_kept']:.3f} "
                f"({row['pending_steps']}) | {row['task_statement_kept']:.3f} | "
                f"{row['median_ms_per_window']:.2f} |"
            )
        out += ["", "![Next-action recall against budget, every strategy](../img/agent.png)"]
    return "\n".join(out) + "\n"


# -- API reference ---------------------------------------------------------------------
def api_reference() -> str:
    """mkdocstrings directives for the public API; ``ctxwindow``'s members from ``__all__``
    less the errors, which have their own section."""
    import ctxwindow

    errors = sorted(
        name
        for name in ctxwindow.__all__
        if getattr(getattr(ctxwindow, name), "__module__", "") == "ctxwindow.errors"
    )
    members = [name for name in ctxwindow.__all__ if name not in errors]
    listed = "\n".join(f"        - {name}" for name in members)
    return f"""# API reference

<!-- Generated at build time by docs_gen/reference.py from ctxwindow.__all__; do not edit. -->

The public API of the core: everything importable from `ctxwindow`, its errors, the
test kit for strategy authors (`ctxwindow.testing`, the `testing` extra) and the kit
strategies share (`ctxwindow.kit`); then the first-party distributions that are
libraries rather than strategies: the caches' stores, the evaluation kit and the
adapters' conformance suite. The plugin hooks have their own page:
[Hook reference](hooks.md).

## `ctxwindow`

::: ctxwindow
    options:
      show_root_heading: false
      members:
{listed}

## `ctxwindow.errors`

Every error derives from `CtxWindowError`; all are importable from `ctxwindow` too
({", ".join(f"`{name}`" for name in errors)}).

::: ctxwindow.errors
    options:
      show_root_heading: false

## `ctxwindow.testing`

::: ctxwindow.testing
    options:
      show_root_heading: false

::: ctxwindow.testing.strategies
    options:
      show_root_heading: true

## `ctxwindow.kit`

::: ctxwindow.kit
    options:
      show_root_heading: false

### `ctxwindow.kit.ranking`

Needs numpy: `pip install "ctxwindow[ranking]"`.

::: ctxwindow.kit.ranking
    options:
      show_root_heading: false

## `ctxwindow_stores` (ctxwindow-stores)

Key-value stores for caches (memory, SQLite, Redis); see [Caches](../caches.md).

::: ctxwindow_stores
    options:
      show_root_heading: false

## `ctxwindow_eval` (ctxwindow-eval)

::: ctxwindow_eval
    options:
      show_root_heading: false

## `ctxwindow_adapters` (ctxwindow-adapters)

Histories in a framework's own shape; see [Framework adapters](../adapters.md).

::: ctxwindow_adapters.openai
::: ctxwindow_adapters.openai_responses
::: ctxwindow_adapters.anthropic
::: ctxwindow_adapters.langchain
::: ctxwindow_adapters.pydantic_ai
::: ctxwindow_adapters.testing
"""


#: Pages written into the site at build time: path under docs/ -> generator.
def pages() -> dict[str, str]:
    generated = {
        "reference/configuration.md": configuration_reference(),
        "reference/cli.md": cli_reference(),
        "reference/api.md": api_reference(),
    }
    for name in FIRST_PARTY:
        generated[f"strategies/{name}.md"] = strategy_page(name)
    return generated
