"""The ``ctxwindow`` command: list plugins and strategies, and window a conversation
file; plugins add their own commands through the ``register_commands`` hook.

Errors print one line and exit non-zero; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ctxwindow._config import HOST_KEYS, from_config, load_config_file
from ctxwindow._files import read_messages_file
from ctxwindow._plugins import (
    describe_strategies,
    get_plugins,
    install_hint,
    plugin_problems,
    plugins,
)
from ctxwindow.errors import ConfigError, CtxWindowError

EXIT_ERROR = 1
EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    given = sys.argv[1:] if argv is None else list(argv)
    missing = _missing_command(parser, given)
    if missing:
        print(f"ctxwindow: error: {missing}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(given)
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
    plugins().call_each("register_commands", commands)
    parser.command_names = tuple(commands.choices)  # type: ignore[attr-defined]
    return parser


def _missing_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """For a command that a plugin not installed here adds: what to install."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    hint = install_hint("command", command) if command else None
    if hint is None or command in getattr(parser, "command_names", ()):
        return None
    return f"no command {command!r} here; it comes with `{hint}`"


def _plugins(args: argparse.Namespace) -> int:
    report = {
        "plugins": [plugin.to_dict() for plugin in get_plugins()],
        "problems": plugin_problems(),
    }
    print(json.dumps(report, indent=2))
    return 0


def _strategies(args: argparse.Namespace) -> int:
    print(json.dumps(describe_strategies(), indent=2, default=str))
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
        print(window.record.explain(), file=sys.stderr)
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
