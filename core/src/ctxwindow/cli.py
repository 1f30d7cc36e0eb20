"""The ``ctxwindow`` command: list plugins and strategies, and window a conversation file.

Errors print one line and exit non-zero; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxwindow import plugins, registry
from ctxwindow.config import from_config, load_config_file
from ctxwindow.errors import CtxWindowError, InvalidMessage
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
        print(f"ctxwindow: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a bug, ours or a plugin's: still one line, unless --debug
        if args.debug:
            raise
        print(
            f"ctxwindow: internal error: {type(error).__name__}: {error} "
            f"(run with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    return parser


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
    config.update(_options(args.option))
    messages = read_messages_file(args.file)
    window = from_config(config).select(messages, query=args.query)
    text = json.dumps(window.messages, indent=2, ensure_ascii=False, default=str) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if args.explain:
        print(explain(window), file=sys.stderr)
    if args.record:
        Path(args.record).write_text(
            json.dumps(window.record.to_dict(), indent=2), encoding="utf-8"
        )
    return 0


def _options(pairs: Sequence[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--option wants KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def read_messages_file(path: str) -> list[Any]:
    """A JSON array, or JSONL with one message per line; '-' reads stdin."""
    source = "stdin" if path == "-" else path
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidMessage(None, f"{source} is not UTF-8 text (is it a binary file?)") from None
    except FileNotFoundError:
        raise InvalidMessage(None, f"{source} does not exist") from None
    except IsADirectoryError:
        raise InvalidMessage(None, f"{source} is a directory, not a messages file") from None
    stripped = text.strip()
    if not stripped:
        raise InvalidMessage(None, f"{source} is empty; expected a JSON array of messages")
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as error:
            raise InvalidMessage(None, f"{source} is not valid JSON: {error}") from None
        if not isinstance(data, list):
            raise InvalidMessage(None, f"{source} must hold a JSON array of messages")
        return data
    messages = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            messages.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise InvalidMessage(
                None,
                f"{source} line {number} is not valid JSON ({error}); expected a "
                f"JSON array or one JSON message per line",
            ) from None
    return messages


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
    for group in _runs(record.decisions):
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
