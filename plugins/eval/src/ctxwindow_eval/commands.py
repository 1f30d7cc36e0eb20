"""The ``eval`` and ``bench`` commands, added to ``ctxwindow`` through the
``register_commands`` hook."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxwindow.errors import ConfigError, CtxWindowError, did_you_mean
from ctxwindow_eval import (
    agent_runner,
    bench,
    dataset,
    datasets,
    report,
    runner,
    steps,
    trajectories,
)

KINDS = ("auto", "locomo", "agent")


def register(cli: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``eval`` and ``bench`` to the ``ctxwindow`` command."""
    evaluation = cli.add_parser(
        "eval",
        help="what strategies keep at token budgets: evidence recall on conversations, "
        "next-action recall on agent trajectories",
        description="DATA is LoCoMo's JSON; or with --questions a JSONL of your messages "
        "(each with an 'id'); or agent trajectories (a JSON list, or JSONL with one "
        "trajectory a line, of OpenAI messages with tool calls), found by their shape "
        "or named with --kind agent; or the name of a public benchmark ("
        + ", ".join(datasets.DATASETS)
        + "), fetched from its source on first use into the user cache, its sha256 "
        f"checked ({datasets.MIRROR_ENV}: a base URL to fetch it from instead).",
    )
    evaluation.add_argument(
        "data",
        help="LoCoMo JSON, your messages JSONL, trajectories, or a benchmark name: "
        + ", ".join(datasets.DATASETS),
    )
    evaluation.add_argument("--questions", help="JSONL of {question, evidence: [ids]} for DATA")
    evaluation.add_argument(
        "--skip-malformed",
        action="store_true",
        help="agent trajectories: leave out those ctxwindow cannot window (a bad message, "
        "a broken tool exchange), named after the table and in the JSON, instead of "
        "stopping before the run with their list",
    )
    evaluation.add_argument(
        "--kind",
        choices=KINDS,
        default="auto",
        help="conversations with questions (locomo) or agent trajectories (agent); "
        "auto: agent when DATA is JSONL or a JSON list of OpenAI message lists",
    )
    evaluation.add_argument(
        "--strategy",
        "-s",
        action="append",
        default=[],
        metavar="SPEC",
        help="NAME or NAME:key=value,... (repeatable; default: every installed strategy "
        "that needs no LLM)",
    )
    evaluation.add_argument(
        "--budgets",
        help="comma-separated (default: 1000,2000,4000,8000; for agent trajectories "
        "2000,3000,4000)",
    )
    evaluation.add_argument("--counter", "-c", default="approx")
    evaluation.add_argument(
        "--render",
        choices=dataset.RENDERINGS,
        default="headers",
        help="how LoCoMo's sessions are written (locomo): headers, a dated message before "
        "each session; timestamps, the date in each turn's metadata.timestamp instead; "
        "inline, headers and 'Speaker: text' with no name (the JSON's rows hold each "
        "conversation's recall under by_conversation)",
    )
    evaluation.add_argument(
        "--categories", default="1,2,3,4", help="question categories scored (locomo)"
    )
    evaluation.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="write the results as JSON to FILE, or to stdout without one (the table then "
        "goes to stderr)",
    )
    evaluation.add_argument("--plot", metavar="FILE", help="write recall against budget as PNG")
    evaluation.add_argument("--markdown", metavar="FILE", help="write the table as Markdown")
    evaluation.set_defaults(run=_eval)

    benchmark = cli.add_parser(
        "bench",
        help=(
            "speed of strategies on agent-shaped histories, cold and warm, through each "
            "entry point, beside trim_messages"
        ),
    )
    benchmark.add_argument(
        "--strategy",
        "-s",
        action="append",
        default=[],
        metavar="SPEC",
        help="NAME or NAME:key=value,... (repeatable; default: every strategy needing no LLM)",
    )
    benchmark.add_argument(
        "--agent-steps",
        action="store_true",
        help="time one step of an agent loop instead (a request naming an id, the tool "
        "call and its result appended to a history of records with identifiers), at "
        "1,000 and 10,000 messages unless --sizes says otherwise",
    )
    benchmark.add_argument(
        "--one-task",
        action="store_true",
        help="with --agent-steps: the history is an agent's run from one task (one "
        "request, then tool rounds only) and a step appends a tool round",
    )
    benchmark.add_argument("--sizes", help="history lengths (default: 1000,10000,100000)")
    benchmark.add_argument("--repeats", type=int, help="runs per figure (default: by size)")
    benchmark.add_argument("--json", metavar="FILE", help="write the results as JSON")
    benchmark.set_defaults(run=_bench)


def _eval(args: argparse.Namespace) -> int:
    progress_module = report.require("rich.progress")
    to_stdout = args.json == "-"  # JSON alone on stdout, for a pipe
    console = _console(report, stderr=to_stdout)
    _writable(("--json", None if to_stdout else args.json))  # before minutes of running
    _writable(("--markdown", args.markdown), ("--plot", args.plot))
    _public_benchmark(args, console)
    _require_file(args.data, args.questions)
    agent = _is_agent(args)
    default = agent_runner.AGENT_BUDGETS if agent else runner.DEFAULT_BUDGETS
    budgets = _ints(args.budgets, "--budgets") if args.budgets else list(default)
    budgets = runner.check_budgets(budgets, "--budgets")
    categories = _ints(args.categories, "--categories")  # before the data: typos fail first
    specs = runner.parse_specs(args.strategy or _default_specs(console))
    result: Any
    with progress_module.Progress(console=console, transient=True) as bar:
        if agent:
            runs = trajectories.load_trajectories(args.data)
            kept, faults = agent_runner.screen_trajectories(  # all, before minutes of running
                specs, runs, counter=args.counter, skip_malformed=args.skip_malformed, cli=True
            )
            steps = _actions(kept, args.data)
            left_out = f"; {len(faults)} malformed left out" if faults else ""
            console.print(f"[dim]{len(kept)} trajectories, {steps} actions{left_out}[/dim]")
            task = bar.add_task("evaluating", total=steps * len(specs) * len(budgets))
        else:
            conversations, loaded = _load_conversations(args)
            console.print(f"[dim]{len(conversations)} conversations; {loaded.summary()}[/dim]")
            per_round = _scored_questions(conversations, categories, loaded, args.categories)
            task = bar.add_task("evaluating", total=per_round * len(specs) * len(budgets))

        def advance(label: str, done: int) -> None:
            bar.update(task, advance=done, description=label)

        if agent:
            result = agent_runner.evaluate_agent(
                specs,
                runs,
                budgets=budgets,
                counter=args.counter,
                progress=advance,
                skip_malformed=args.skip_malformed,
            )
        else:
            result = runner.evaluate(
                specs,
                conversations,
                budgets=budgets,
                counter=args.counter,
                categories=categories,
                load_report=loaded,
                progress=advance,
            )
    _show(console, report.table(result))
    for line in report.failures(result):
        console.print(line, style="yellow", markup=False, highlight=False)
    for line in _left_out(result):
        console.print(line, style="yellow", markup=False, highlight=False)
    if to_stdout:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    elif args.json:
        report.write_json(result, args.json)
    if args.markdown:
        Path(args.markdown).write_text(report.markdown(result) + "\n", encoding="utf-8")
    if args.plot:
        report.plot(result, args.plot)
    return 0


def _left_out(result: Any) -> list[str]:
    """The malformed trajectories --skip-malformed left out, one line each."""
    left_out = getattr(result, "left_out", [])
    if not left_out:
        return []
    total = len(left_out) + len(result.trajectories)
    head = f"--skip-malformed left out {len(left_out)} of {total} trajectories:"
    return [head, *(f"  {fault}" for fault in left_out)]


def _require_file(data: str, questions: str | None = None) -> None:
    """DATA that is neither a file nor a benchmark's name: said plainly ('-', stdin, is
    your messages with --questions)."""
    if data == "-" and not questions:
        raise ConfigError(
            "DATA '-' (stdin) is read as your messages JSONL only, with --questions FILE; "
            "give the path of a file of trajectories or of LoCoMo's JSON instead"
        )
    if data == "-" or Path(data).exists():
        return
    raise ConfigError(
        f"file {data!r} does not exist; DATA is agent trajectories (JSON or JSONL), "
        "LoCoMo's JSON, your messages JSONL (with --questions) or a benchmark's name "
        f"({', '.join(datasets.DATASETS)}){did_you_mean(data, datasets.DATASETS)}"
    )


def _public_benchmark(args: argparse.Namespace, console: Any) -> None:
    """A benchmark's name for DATA (and no file of that name here) stands for its public
    file, fetched on first use; its kind is the benchmark's."""
    public = datasets.DATASETS.get(args.data)
    if public is None or Path(args.data).exists():
        return

    def say(line: str) -> None:
        console.print(line, style="dim", markup=False, highlight=False)

    args.data = str(datasets.fetch(public, say=say))
    if args.kind == "auto":
        args.kind = public.kind


def _scored_questions(conversations: Any, categories: list[int], loaded: Any, given: str) -> int:
    """How many questions a round scores; none is an error that says why."""
    questions = [q for c in conversations for q in c.questions]
    count = sum(runner.scored(q.category, set(categories)) for q in questions)
    if count:
        return count
    if questions:
        found = sorted({q.category for q in questions if q.category is not None})
        why = (
            f"the {len(questions)} questions are of categories "
            f"{', '.join(map(str, found))}, none of --categories {given}"
        )
    else:
        skipped = len(loaded.skipped_questions)
        why = f"no question has evidence in the data ({skipped} skipped for that)"
    raise ConfigError(f"no question to score: {why}; nothing was evaluated")


def _default_specs(console: Any) -> list[str]:
    """Every installed strategy that needs no LLM and works with its defaults (a
    ``pipeline`` needs its stages: it is named, and skipped, saying why)."""
    return bench.default_strategies(lambda note: _note(console, note))


def _note(console: Any, line: str) -> None:
    """A dim line, as written (not markup: a note may quote options in brackets)."""
    console.print(line, style="dim", markup=False, highlight=False)


def _writable(*outputs: tuple[str, str | None]) -> None:
    """Each output file's folder exists and can be written, checked before the run: a
    typo found after it would throw the results away. ``outputs``: (flag, path)."""
    for flag, path in outputs:
        if path is None:
            continue
        target = Path(path)
        folder = target.parent
        if target.is_dir():
            raise ConfigError(f"{flag} {path!r} is a directory; give a file's path")
        if not folder.is_dir():
            raise ConfigError(
                f"{flag} {path!r}: the folder {str(folder)!r} does not exist; create it "
                "or give another path"
            )
        if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
            raise ConfigError(f"{flag} {path!r} cannot be written here; give another path")


def _is_agent(args: argparse.Namespace) -> bool:
    """Agent trajectories when told so, or (auto) when DATA is shaped as them."""
    if args.kind != "auto":
        if args.kind == "agent" and args.questions:
            raise ConfigError("--questions go with conversations, not with --kind agent")
        return bool(args.kind == "agent")
    return not args.questions and trajectories.looks_like_trajectories(args.data)


#: What each kind of DATA is, for the error on a file that is neither.
KINDS_EXPECTED = (
    "ctxwindow eval reads agent trajectories (a JSON list, or JSONL with one a line, of "
    "OpenAI message lists or of objects holding one under traj, messages or trajectory; "
    "or a JSONL log of one run, one message a line) or LoCoMo's JSON (one list of "
    "samples, each with a 'conversation' and its 'qa'); name the kind with --kind agent "
    "or --kind locomo to see what is wrong for that kind"
)


def _load_conversations(args: argparse.Namespace) -> tuple[Any, Any]:
    """The conversations of DATA; when the kind was guessed, a file that is no LoCoMo
    was no trajectories either, and the error says what each kind is."""
    try:
        return _load_benchmark(dataset, args.data, args.questions, args.render)
    except ConfigError as error:
        if args.kind != "auto" or args.questions or isinstance(error, dataset.BadSample):
            raise  # a LoCoMo sample at fault: the file is LoCoMo's, not trajectories
        raise ConfigError(
            f"{error}; nor does it hold agent trajectories: {KINDS_EXPECTED}"
        ) from None


def _actions(runs: list[Any], data: str) -> int:
    """How many actions the trajectories hold; none is an error that says why."""
    steps = sum(len(list(t.actions())) for t in runs)
    if not steps:
        raise ConfigError(
            f"{data}: no assistant message of its {len(runs)} trajectories calls tools "
            "(after the first message), so there is no step to score; a chat without "
            "tool calls is evaluated with --questions (a JSONL of questions about it)"
        )
    return steps


def _load_benchmark(
    dataset: Any, data: str, questions: str | None, render: str = "headers"
) -> tuple[Any, Any]:
    """The benchmark's conversations; a file of another shape is one ConfigError."""
    what = "your messages JSONL" if questions else "LoCoMo's JSON (a list of samples)"
    try:
        if questions:
            return dataset.load_jsonl(data, questions)  # type: ignore[no-any-return]
        return dataset.load_locomo(data, render)  # type: ignore[no-any-return]
    except CtxWindowError:
        raise
    except IsADirectoryError:
        raise ConfigError(f"benchmark file {data!r} is a directory; give {what}") from None
    except OSError as error:
        raise ConfigError(f"benchmark file cannot be read: {error}") from None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, RecursionError) as error:
        raise ConfigError(
            f"benchmark file {data!r} is not {what}: {type(error).__name__}: {error}"
        ) from None


def _bench(args: argparse.Namespace) -> int:
    if args.agent_steps:
        return _bench_steps(args)
    if args.one_task:
        raise ConfigError("--one-task times agent steps: give it with --agent-steps")
    _writable(("--json", args.json))
    sizes = _sizes(args.sizes, bench.SIZES, bench.MIN_SIZE, "")
    repeats = _repeats(args.repeats)
    console = _console(report)
    rich_table = report.require("rich.table")
    strategies = args.strategy or _default_specs(console)
    with console.status("benchmarking") as status:
        rows = bench.run(
            strategies,
            sizes,
            progress=lambda label: status.update(f"benchmarking {label}"),
            repeats=repeats,
        )
    table = rich_table.Table(
        title=f"Medians in ms, budget {bench.BUDGET} tokens, approx counting",
        title_justify="left",
    )
    for column, _ in BENCH_COLUMNS:
        _add_column(table, column)
    for row in rows:
        data = row.to_dict()
        table.add_row(*(_cell(data[key]) for _, key in BENCH_COLUMNS))
    _show(console, table)
    for row in rows:
        for note in row.notes:
            # not markup: a note may quote an install command's extras, in brackets
            line = f"{row.strategy} at {row.messages:,}: {note}"
            console.print(line, style="dim", markup=False, highlight=False)
    if args.json:
        results = bench.to_json(rows, imports=bench.import_ms())
        Path(args.json).write_text(results + "\n", encoding="utf-8")
    return 0


def _bench_steps(args: argparse.Namespace) -> int:
    """``bench --agent-steps``: the median step of an agent loop per strategy and length."""
    _writable(("--json", args.json))
    sizes = _sizes(args.sizes, steps.SIZES, steps.MIN_SIZE, " (one tool result to ask about)")
    repeats = _repeats(args.repeats)
    console = _console(report)
    rich_table = report.require("rich.table")
    strategies = args.strategy or _default_specs(console)
    with console.status("benchmarking") as status:
        rows = steps.run(
            strategies,
            sizes,
            progress=lambda label: status.update(f"benchmarking {label}"),
            steps=repeats or steps.STEPS,
            one_task=args.one_task,
        )
    run_of = " of a run from one task" if args.one_task else ""
    table = rich_table.Table(
        title=f"One agent step{run_of}, median ms, budget {bench.BUDGET} tokens, approx counting",
        title_justify="left",
    )
    for column in ("strategy", "messages", "step", "window tokens"):
        _add_column(table, column)
    for row in rows:
        cells = (f"{row.messages:,}", _cell(row.step_ms), f"{row.window_tokens:,}")
        table.add_row(row.strategy, *cells)
    _show(console, table)
    if args.json:
        results = steps.to_json(rows, one_task=args.one_task)
        Path(args.json).write_text(results + "\n", encoding="utf-8")
    return 0


#: The console table's columns: heading, and the key of the row's JSON.
BENCH_COLUMNS = (
    ("strategy", "strategy"),
    ("messages", "messages"),
    ("count loop", "count_ms"),
    ("cold", "cold_ms"),
    ("warm", "warm_ms"),
    ("select cold", "select_cold_ms"),
    ("select warm", "select_warm_ms"),
    ("adapter cold", "adapter_cold_ms"),
    ("adapter warm", "adapter_warm_ms"),
    ("trim", "trim_ms"),
    ("trim cached", "trim_cached_ms"),
    ("trim cached / warm", "trim_cached_over_warm"),
    ("encode new", "encode_new_ms"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) >= 1 else f"{value:.{_decimals(value)}f}"
    return str(value)


def _decimals(value: float, figures: int = 3) -> int:
    """Decimals that show ``figures`` significant ones of a value below 1 (at least 3):
    0.0038 as 0.00380, not 0.000."""
    if value == 0 or not math.isfinite(value):
        return 3
    return max(3, figures - 1 - math.floor(math.log10(abs(value))))


def _add_column(table: Any, heading: str) -> None:
    """A bench table's column: labels and figures fold, never cut short with an ellipsis."""
    justify = "left" if heading == "strategy" else "right"
    table.add_column(heading, justify=justify, overflow="fold")


def _console(report: Any, stderr: bool = False) -> Any:
    """A rich console as wide as a table needs, also when output goes to a file."""
    console_module = report.require("rich.console")
    stream = sys.stderr if stderr else sys.stdout
    return console_module.Console(width=None if stream.isatty() else 120, stderr=stderr)


#: Room enough for any table: the width a table is measured in off a terminal.
UNBOUNDED = 10_000


def _show(console: Any, table: Any) -> None:
    """Print a table; off a terminal, as wide as it needs (a file has no edge to fit),
    so no label or figure is folded or cut."""
    if console.is_terminal:
        console.print(table)
        return
    measure = report.require("rich.measure")
    unbounded = console.options.update_width(UNBOUNDED)
    needed = measure.Measurement.get(console, unbounded, table).maximum
    width = console.width
    console.width = max(width, needed)
    try:
        console.print(table)
    finally:
        console.width = width


def _sizes(text: str | None, default: Sequence[int], smallest: int, why: str) -> list[int]:
    """--sizes as history lengths, each at least ``smallest`` messages."""
    sizes = _ints(text, "--sizes") if text else list(default)
    short = [size for size in sizes if size < smallest]
    if short:
        raise ConfigError(
            f"--sizes wants history lengths of at least {smallest} message"
            f"{'' if smallest == 1 else 's'}{why}, got {', '.join(map(str, short))}"
        )
    return sizes


def _repeats(repeats: int | None) -> int | None:
    """--repeats, a whole number of 1 or more (None: by size)."""
    if repeats is not None and repeats < 1:
        raise ConfigError(
            f"--repeats wants a whole number of runs of 1 or more, got {repeats}; leave it "
            "out for the default (by size)"
        )
    return repeats


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{flag} wants comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{flag} is empty")
    return values
