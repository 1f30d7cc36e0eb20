"""The ``ctxwindow`` command: list plugins and strategies, and window a conversation file.

Errors print one line and exit non-zero; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ctxwindow import plugins, registry
from ctxwindow.config import HOST_KEYS, from_config, load_config_file
from ctxwindow.errors import ConfigError, CtxWindowError, InvalidMessage
from ctxwindow.window import Window

EXIT_ERROR = 1
EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.run(args))
    except (CtxWindowError, ValueError, OSError) as error:
        if args.debug:
            raise
        print(f"ctxwindow: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a bug, ours or a plugin's: still one line, unless --debug
        if args.debug:
            raise
        print(
            f"ctxwindow: internal error: {type(error).__name__}: {_one_line(error)} "
            f"(run with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR


def _one_line(error: BaseException) -> str:
    """An error's message on one line (a plugin's message may hold line breaks)."""
    return " ".join(str(error).split("\n")).strip() or type(error).__name__


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line like every other error (and exit 2)."""

    def error(self, message: str) -> NoReturn:
        print(
            f"ctxwindow: error: {' '.join(message.splitlines())} (see `{self.prog} --help`)",
            file=sys.stderr,
        )
        sys.exit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ctxwindow", description="Context-window strategies for LLM applications."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    listing = commands.add_parser("plugins", help="installed plugins as JSON, with load errors")
    listing.set_defaults(run=_plugins)

    strategies = commands.add_parser("strategies", help="installed strategies and their options")
    strategies.set_defaults(run=_strategies)

    select = commands.add_parser(
        "select",
        help="window a conversation file (JSON array or JSONL of OpenAI-format messages)",
        description="Writes the window as a JSON array to stdout.",
    )
    select.add_argument("file", help="messages file: JSON array or JSONL; '-' for stdin")
    select.add_argument(
        "--strategy", "-s", help="strategy name (default: from config, else 'fixed')"
    )
    select.add_argument("--budget", "-b", type=int, help="token budget (default: from config)")
    select.add_argument(
        "--query", "-q", help="what the next request asks, for strategies that use it"
    )
    select.add_argument(
        "--counter", "-c", help="token counter: approx, tiktoken:cl100k_base, hf:PATH"
    )
    select.add_argument("--config", help="ctxwindow.toml or pyproject.toml to read settings from")
    select.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a strategy option; VALUE is read as JSON when it can be (repeatable)",
    )
    select.add_argument(
        "--explain", action="store_true", help="print the record as a table to stderr"
    )
    select.add_argument(
        "--output", "-O", metavar="FILE", help="write the window to FILE instead of stdout"
    )
    select.add_argument(
        "--record", metavar="FILE", help="also write the full record as JSON to FILE"
    )
    select.set_defaults(run=_select)

    evaluation = commands.add_parser(
        "eval",
        help="evidence recall of strategies at token budgets on a benchmark",
        description="DATA is LoCoMo's JSON, or with --questions a JSONL of your messages "
        "(each with an 'id'). Needs: pip install 'ctxwindow[eval]'.",
    )
    evaluation.add_argument("data", help="LoCoMo JSON file, or your messages JSONL")
    evaluation.add_argument("--questions", help="JSONL of {question, evidence: [ids]} for DATA")
    evaluation.add_argument(
        "--strategy",
        "-s",
        action="append",
        default=[],
        metavar="SPEC",
        help="NAME or NAME:key=value,... (repeatable; default: every installed strategy "
        "that needs no LLM)",
    )
    evaluation.add_argument("--budgets", default="1000,2000,4000,8000", help="comma-separated")
    evaluation.add_argument("--counter", "-c", default="approx")
    evaluation.add_argument("--categories", default="1,2,3,4", help="question categories scored")
    evaluation.add_argument("--json", metavar="FILE", help="write the results as JSON")
    evaluation.add_argument("--plot", metavar="FILE", help="write recall against budget as PNG")
    evaluation.add_argument("--markdown", metavar="FILE", help="write the table as Markdown")
    evaluation.set_defaults(run=_eval)

    bench = commands.add_parser(
        "bench",
        help="speed and memory of strategies on synthetic histories (cold, warm, vs LangChain)",
    )
    bench.add_argument(
        "--strategy",
        "-s",
        action="append",
        default=[],
        metavar="SPEC",
        help="NAME or NAME:key=value,... (repeatable; default: every strategy needing no LLM)",
    )
    bench.add_argument("--sizes", default="1000,10000,100000", help="history lengths")
    bench.add_argument("--repeats", type=int, help="runs per figure (default: by size)")
    bench.add_argument("--json", metavar="FILE", help="write the results as JSON")
    bench.set_defaults(run=_bench)

    new_plugin = commands.add_parser(
        "new-plugin",
        help="create a strategy plugin package whose tests pass as generated",
        description="Writes DIR/ctxwindow-NAME: pyproject.toml, a starter strategy, its "
        "tests (the conformance suite included) and a README.",
    )
    new_plugin.add_argument("name", help="the strategy's name: lowercase words joined by '-'")
    new_plugin.add_argument("--dir", default=".", help="where to create it (default: here)")
    new_plugin.set_defaults(run=_new_plugin)
    return parser


def _new_plugin(args: argparse.Namespace) -> int:
    from ctxwindow.scaffold import create_plugin

    target = create_plugin(args.name, args.dir)
    print(f"created {target}\nnext: cd {target} && pip install -e '.[test]' && pytest")
    return 0


def _plugins(args: argparse.Namespace) -> int:
    report = {
        "plugins": [plugin.to_dict() for plugin in plugins.get_plugins()],
        "problems": registry.registry().problems,
    }
    print(json.dumps(report, indent=2))
    return 0


def _strategies(args: argparse.Namespace) -> int:
    print(json.dumps(registry.describe_strategies(), indent=2, default=str))
    return 0


def _select(args: argparse.Namespace) -> int:
    config: dict[str, Any] = load_config_file(args.config) if args.config else {}
    for key, value in (
        ("strategy", args.strategy),
        ("budget", args.budget),
        ("counter", args.counter),
    ):
        if value is not None:
            config[key] = value
    config.setdefault("strategy", "fixed")
    if "budget" not in config:
        raise ConfigError(
            "no token budget: pass --budget N, or set budget in the file given with --config"
        )
    config.update(_options(args.option))
    _check_outputs(args)
    messages = read_messages_file(args.file)
    window = from_config(config).select(messages, query=args.query)
    text = json.dumps(window.messages, indent=2, ensure_ascii=False, default=str) + "\n"
    if not _encodable(text):  # lone surrogates, read from "\ud800" escapes: keep them escaped
        text = json.dumps(window.messages, indent=2, default=str) + "\n"
    if args.output:
        _write(args.output, text, "--output")
    else:
        sys.stdout.write(text)
    if args.explain:
        print(explain(window), file=sys.stderr)
    if args.record:
        _write(args.record, json.dumps(window.record.to_dict(), indent=2), "--record")
    return 0


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse to write the window or the record over an input (or over each other)."""
    inputs = {"the messages file": args.file, "the config file": args.config}
    outputs = {"--output": args.output, "--record": args.record}
    seen: dict[Path, str] = {}
    for label, name in inputs.items():
        if name and name != "-":
            seen[Path(name).resolve()] = label
    for flag, name in outputs.items():
        if not name:
            continue
        target = Path(name).resolve()
        if target in seen:
            raise ValueError(
                f"{flag} {name!r} is {seen[target]}; ctxwindow never overwrites its "
                f"input: write to another file"
            )
        seen[target] = flag


def _write(name: str, text: str, flag: str) -> None:
    try:
        Path(name).write_text(text, encoding="utf-8")
    except OSError as error:
        raise ValueError(
            f"cannot write {flag} {name!r}: {error.strerror or error}; give a file path "
            f"in a folder you can write to"
        ) from None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _eval(args: argparse.Namespace) -> int:
    from ctxwindow.evaluation import dataset, report, runner

    progress_module = report.require("rich.progress")
    console = _console(report)
    budgets = _ints(args.budgets, "--budgets")  # before the data: a typo fails at once
    categories = _ints(args.categories, "--categories")
    conversations, loaded = _load_benchmark(dataset, args.data, args.questions)
    console.print(f"[dim]{len(conversations)} conversations; {loaded.summary()}[/dim]")
    specs = args.strategy or [
        s["name"] for s in registry.describe_strategies() if not s["requires_llm"]
    ]
    per_round = sum(len(c.questions) for c in conversations)
    with progress_module.Progress(console=console, transient=True) as bar:
        task = bar.add_task("evaluating", total=per_round * len(specs) * len(budgets))

        def advance(label: str, questions: int) -> None:
            bar.update(task, advance=questions, description=label)

        result = runner.evaluate(
            specs,
            conversations,
            budgets=budgets,
            counter=args.counter,
            categories=categories,
            load_report=loaded,
            progress=advance,
        )
    console.print(report.table(result))
    if args.json:
        report.write_json(result, args.json)
    if args.markdown:
        Path(args.markdown).write_text(report.markdown(result) + "\n", encoding="utf-8")
    if args.plot:
        report.plot(result, args.plot)
    return 0


def _load_benchmark(dataset: Any, data: str, questions: str | None) -> tuple[Any, Any]:
    """The benchmark's conversations; a file of another shape is one ConfigError."""
    what = "your messages JSONL" if questions else "LoCoMo's JSON (a list of samples)"
    try:
        if questions:
            return dataset.load_jsonl(data, questions)  # type: ignore[no-any-return]
        return dataset.load_locomo(data)  # type: ignore[no-any-return]
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
    from ctxwindow.evaluation import bench, report

    console = _console(report)
    rich_table = report.require("rich.table")
    with console.status("benchmarking") as status:
        rows = bench.run(
            args.strategy or None,
            _ints(args.sizes, "--sizes"),
            progress=lambda label: status.update(f"benchmarking {label}"),
            repeats=args.repeats,
        )
    table = rich_table.Table(
        title=f"Medians, budget {bench.BUDGET} tokens, approx counting", title_justify="left"
    )
    for column in (
        "strategy",
        "messages",
        "count ms",
        "cold ms",
        "cold/count",
        "warm ms",
        "trim_messages ms",
        "trim/warm",
        "peak MiB",
    ):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for row in rows:
        trim = "-" if row.trim_ms is None else f"{row.trim_ms:.2f}"
        ratio = row.trim_over_warm
        table.add_row(
            row.strategy,
            f"{row.messages:,}",
            f"{row.count_ms:.2f}",
            f"{row.cold_ms:.2f}",
            f"{row.cold_over_count:.2f}x",
            f"{row.warm_ms:.3f}",
            trim,
            "-" if ratio is None else f"{ratio:,.0f}x",
            f"{row.peak_mib:.1f}",
        )
    console.print(table)
    if any(row.trim_ms is None for row in rows):
        console.print("[dim]LangChain not installed: pip install langchain-core to compare[/dim]")
    if args.json:
        Path(args.json).write_text(bench.to_json(rows) + "\n", encoding="utf-8")
    return 0


def _console(report: Any) -> Any:
    """A rich console as wide as a table needs, also when output goes to a file."""
    console_module = report.require("rich.console")
    return console_module.Console(width=None if sys.stdout.isatty() else 120)


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{flag} wants comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{flag} is empty")
    return values


def _options(pairs: Sequence[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--option wants KEY=VALUE, got {pair!r}")
        if key in HOST_KEYS:
            raise ValueError(f"--option cannot set {key!r}; use --{key} instead")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


#: What to do when a messages file cannot be read, said once for every problem.
FORMAT_HINT = "expected a JSON array of messages, or JSONL with one message per line"


def read_messages_file(path: str) -> list[Any]:
    """A JSON array, or JSONL with one message per line; '-' reads stdin.

    Anything else is one InvalidMessage naming the file and the problem.
    """
    source = "stdin" if path == "-" else path
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except FileNotFoundError:
        raise InvalidMessage(None, f"{source} does not exist") from None
    except IsADirectoryError:
        raise InvalidMessage(None, f"{source} is a directory, not a messages file") from None
    except OSError as error:
        raise InvalidMessage(None, f"{source} cannot be read ({error.strerror or error})") from None
    return parse_messages(raw, source)


def parse_messages(raw: bytes, source: str = "input") -> list[Any]:
    """The bytes of a messages file as a list of (unchecked) entries, as the CLI reads
    them; ``source`` names the file in errors. Anything else is one InvalidMessage."""
    text = _decoded(raw, source)
    stripped = text.strip()
    if not stripped:
        raise InvalidMessage(None, f"{source} is empty; {FORMAT_HINT}")
    if stripped.startswith("["):
        data = _parsed(stripped, source, "")
        if not isinstance(data, list):  # pragma: no cover - a JSON text starting '[' is a list
            raise InvalidMessage(None, f"{source} must hold a JSON array of messages")
        return data
    messages = []
    # split on newlines only: str.splitlines() also splits on U+2028, U+0085 and others,
    # which JSON allows unescaped inside strings
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            messages.append(_parsed(line, source, f" line {number}"))
        except InvalidMessage:
            if stripped.startswith("{") and number == 1 and _is_one_object(stripped):
                raise InvalidMessage(
                    None,
                    f"{source} holds one JSON object spread over lines, not a list of "
                    f"messages; put it in a JSON array ([...]) or on a single line",
                ) from None
            raise
    return messages


def _decoded(raw: bytes, source: str) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InvalidMessage(
            None, f"{source} is UTF-16 text, not UTF-8; save it as UTF-8 and try again"
        )
    if b"\x00" in raw:
        raise InvalidMessage(
            None, f"{source} holds NUL bytes, so it is no text file (is it binary?); {FORMAT_HINT}"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InvalidMessage(
            None,
            f"{source} is not UTF-8 text (byte {error.start}; is it a binary file?); "
            f"save it as UTF-8",
        ) from None


def _parsed(text: str, source: str, where: str) -> Any:
    """One JSON value, or InvalidMessage naming the file, the line and what to do."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        problem = f"{error.msg} at line {error.lineno} column {error.colno}"
        if where:  # a JSONL line: its own line and column are the line's
            problem = f"{error.msg} at column {error.colno}"
    except RecursionError:
        problem = "its arrays or objects are nested too deeply"
    except ValueError as error:  # such as an integer with more digits than Python reads
        problem = str(error)
    raise InvalidMessage(None, f"{source}{where} is not valid JSON ({problem}); {FORMAT_HINT}")


def _is_one_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def explain(window: Window[Any]) -> str:
    """The record as a readable table; runs of units with the same fate share a row."""
    record = window.record
    lines = [
        f"strategy {record.strategy} | budget {record.budget} | counter {record.counter} | "
        f"{'engaged' if record.engaged else 'not engaged: everything fits'} | "
        f"{record.elapsed_ms:.2f} ms",
        f"tokens {record.tokens_before} -> {record.tokens_after} | "
        f"messages {record.messages_before} -> {record.messages_after}",
    ]
    rows = [("messages", "units", "tokens", "action", "reason")]
    in_order = sorted(record.decisions, key=lambda d: d.positions[0] if d.positions else -1)
    for group in _runs(in_order):
        first, last = group[0], group[-1]
        positions = [p for d in group for p in d.positions]
        span = f"{positions[0]}" if len(positions) == 1 else f"{positions[0]}-{positions[-1]}"
        units = str(first.unit) if first is last else f"{first.unit}-{last.unit}"
        score = f" (score {first.score:.3f})" if first.score is not None and first is last else ""
        rows.append(
            (span, units, str(sum(d.tokens for d in group)), first.action, first.reason + score)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        lines.append(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[4]
        )
    lines.extend(f"note: {note}" for note in record.notes)
    if record.llm is not None:
        lines.append(f"llm: {json.dumps(record.llm.to_dict())}")
    return "\n".join(lines)


def _runs(decisions: Sequence[Any]) -> list[list[Any]]:
    runs: list[list[Any]] = []
    for decision in decisions:
        last = runs[-1][-1] if runs else None
        if (
            last is not None
            and decision.unit >= 0
            and last.unit == decision.unit - 1
            and (last.action, last.reason, last.score)
            == (decision.action, decision.reason, decision.score)
        ):
            runs[-1].append(decision)
        else:
            runs.append([decision])
    return runs


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
