"""The ``ctxwindow`` command: list plugins and strategies, and window a conversation
file; plugins add their own commands through the ``register_commands`` hook.

Errors print one line and exit non-zero; ``--debug`` shows the traceback instead.
Listings are tables a person reads (fitted to the terminal, 80 columns when it is not
one), and JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from ctxwindow._config import (
    VISIT_KEYS,
    check_keys,
    find_config_file,
    from_config,
    load_config_file,
    parse_strategy_spec,
)
from ctxwindow._contract import HOST_KEYS, declared_options
from ctxwindow._options import suggestions
from ctxwindow._plugins import (
    PluginInfo,
    core_version,
    describe_strategies,
    get_plugins,
    install_hint,
    plugins,
    refused_strategies,
    registration_problems,
    strategy_class,
    strategy_entry,
)
from ctxwindow._requests import read_request
from ctxwindow.errors import ConfigError, CtxWindowError, PluginError, UnknownStrategy

EXIT_ERROR = 1
EXIT_USAGE = 2
#: The width of a listing when stdout is not a terminal (a pipe, a file, a test).
WIDTH = 80

logger = logging.getLogger("ctxwindow.cli")


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    with _one_line_warnings(debug="--debug" in given):
        parser = _parser()
        missing = _missing_command(parser, given)
        if missing:
            print(f"ctxwindow: error: {missing}", file=sys.stderr)
            return EXIT_USAGE
        args = parser.parse_args(given)
        if args.version or args.command is None:
            return _no_command(parser, args)
        return _run(args)


@contextlib.contextmanager
def _one_line_warnings(debug: bool) -> Iterator[None]:
    """While the command runs, ctxwindow's warnings (its core's and its plugins') are
    one line each, as its errors are: not Python's file:line and source line, which
    tell a user nothing. Other warnings, and every warning under --debug, show as
    Python shows them."""
    if debug:
        yield
        return
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not _ours(str(message), filename):
            shown(message, category, filename, lineno, file, line)
            return
        said = " ".join(str(message).removeprefix("ctxwindow").lstrip(": ").splitlines())
        print(f"ctxwindow: warning: {said}", file=file or sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def _ours(message: str, filename: str) -> bool:
    """Whether a warning is ctxwindow's: said in its name, or from one of its packages
    (``ctxwindow``, and a plugin's ``ctxwindow_NAME``)."""
    packages = Path(filename).parts[:-1]
    return message.startswith("ctxwindow") or any(
        part.startswith("ctxwindow") and part.isidentifier() for part in packages
    )


def _run(args: argparse.Namespace) -> int:
    """Run the command; an error is one line on stderr (the traceback with --debug)."""
    try:
        return int(args.run(args))
    except BrokenPipeError:  # `ctxwindow strategies | head`: the reader has had enough
        _quiet_stdout()
        return 0
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


def _quiet_stdout() -> None:
    """Point stdout at devnull, so that flushing it at exit raises no second error."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _no_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``ctxwindow --version``, or the help (and a usage exit) for no command at all."""
    if args.version:
        print(f"ctxwindow {core_version()}")
        return 0
    parser.print_help(sys.stderr)
    return EXIT_USAGE


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
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    listing = _listing(
        commands,
        "plugins",
        "installed plugins: distribution, version, hooks, load errors",
        "A table of every plugin found, loaded or not, and the problems found loading "
        "them; --json for the JSON report.",
        ("print the report as JSON", "add the module each plugin loads"),
    )
    listing.set_defaults(run=_plugins)

    strategies = _listing(
        commands,
        "strategies",
        "installed strategies and their options",
        "A table of the installed strategies (name, distribution, whether it needs an "
        "LLM, summary); --verbose adds their options, NAME shows one.",
        ("print them as JSON", "list each strategy's options too"),
    )
    strategies.add_argument("name", nargs="?", help="show this strategy only, with its options")
    strategies.set_defaults(run=_strategies, parser=strategies)

    select = commands.add_parser(
        "select",
        help="window a conversation file (JSON array or JSONL of OpenAI-format messages)",
        description="Writes the window as a JSON array to stdout; given a saved request "
        'body ({"model": ..., "messages": [...], ...}, or a shape a plugin reads, such '
        "as an Anthropic Messages body), writes that body with its messages windowed "
        "(those the window made with the API's fields only) and every other key kept. "
        "Settings, first found wins: --strategy, --budget, "
        "--counter and --option; then the file given with --config or, without --config, "
        "ctxwindow.toml in the current directory, else [tool.ctxwindow] in its "
        "pyproject.toml; then the defaults (strategy fixed, counter approx). --explain "
        "says which config file was read.",
    )
    select.add_argument(
        "file",
        help="messages file: JSON array or JSONL, or a request body; '-' for stdin",
    )
    select.add_argument(
        "--strategy",
        "-s",
        metavar="SPEC",
        help="NAME or NAME:key=value,... (default: from config, else 'fixed'); naming "
        "another than the config's sets aside the config's options for that one",
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
        "--output",
        "-O",
        metavar="FILE",
        help="write the window to FILE instead of stdout ('-': stdout)",
    )
    select.add_argument(
        "--record",
        metavar="FILE",
        help="also write the full record as JSON to FILE ('-': stdout, with --output FILE)",
    )
    select.set_defaults(run=_select)
    _plugin_commands(commands)
    parser.command_names = tuple(commands.choices)  # type: ignore[attr-defined]
    return parser


def _plugin_commands(commands: Any) -> None:
    """Let each plugin add its commands. One a plugin leaves without a ``run`` (its hook
    failed after ``add_parser``, say) reports that plugin's error when run, not an
    internal error naming no one."""
    seen = set(commands.choices)

    def after_each(distribution: str, problem: str | None) -> None:
        for name in sorted(set(commands.choices) - seen):
            if commands.choices[name].get_default("run") is None:
                commands.choices[name].set_defaults(run=_unfinished(name, distribution, problem))
        seen.update(commands.choices)

    plugins().call_each("register_commands", commands, after_each=after_each)


def _unfinished(
    name: str, distribution: str, problem: str | None
) -> Callable[[argparse.Namespace], int]:
    """The ``run`` of a command its plugin did not finish registering: a PluginError
    naming the plugin and why."""
    why = (
        f"its hook failed: {problem}"
        if problem
        else "its hook set no run function; call parser.set_defaults(run=...)"
    )

    def run(args: argparse.Namespace) -> int:
        raise PluginError(
            f"command {name!r} from distribution {distribution!r} was not fully registered, "
            f"so it cannot run ({why}); see `ctxwindow plugins`"
        )

    return run


def _listing(
    commands: Any, name: str, help_text: str, description: str, flags: tuple[str, str]
) -> argparse.ArgumentParser:
    """A listing command: a table by default, ``--json`` and ``--verbose``."""
    listing: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=description
    )
    listing.add_argument("--json", action="store_true", help=flags[0])
    listing.add_argument("--verbose", "-v", action="store_true", help=flags[1])
    return listing


def _missing_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """For a command that a plugin not installed here adds: what to install."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    hint = install_hint("command", command) if command else None
    if hint is None or command in getattr(parser, "command_names", ()):
        return None
    package = hint.split()[-1]
    variable = plugins().skipped.get(package)
    if variable is not None:  # installed: the environment keeps it out
        return f"no command {command!r} here: {package} is installed, but {variable} keeps it out"
    return f"no command {command!r} here; it comes with `{hint}`"


def _kept_out_words() -> str:
    """The plugins the environment kept out, in words ("" for none)."""
    skipped = sorted(plugins().skipped.items())
    if not skipped:
        return ""
    named = ", ".join(f"{distribution} ({variable})" for distribution, variable in skipped)
    return f"not loaded because of the environment: {named}"


# -- listings ----------------------------------------------------------------------------
def _width() -> int:
    """The terminal's width; 80 when stdout is not a terminal (or $COLUMNS says so)."""
    return max(40, shutil.get_terminal_size((WIDTH, 24)).columns)


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, lines_per_row: int = 0
) -> str:
    """Columns padded to their widest cell; the last one wrapped to what is left of
    ``width`` (at most ``lines_per_row`` lines, shortened with "...", when set)."""
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers[:-1])]
    indent = sum(widths) + 2 * len(widths)
    room = max(20, width - indent)
    lines = []
    for cells in [headers, ["-" * len(h) for h in headers], *rows]:
        head = "".join(f"{cell:<{w}}  " for cell, w in zip(cells[:-1], widths, strict=True))
        wrapped = textwrap.wrap(
            cells[-1], room, max_lines=lines_per_row or None, placeholder=" ..."
        ) or [""]
        lines.append((head + wrapped[0]).rstrip())
        lines.extend((" " * indent + more).rstrip() for more in wrapped[1:])
    return "\n".join(lines)


def _paragraph(text: str, width: int, indent: str) -> str:
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent)


def _hooks_cell(plugin: PluginInfo, hooks: str) -> str:
    """A plugin's hooks; ERROR and why when it failed (it did not load, or a hook raised
    or is never called); its hooks and the problem when only something it registered
    was refused (the rest of it works)."""
    if plugin.failed:
        return f"ERROR {plugin.error}"
    if plugin.error:
        return f"{hooks or '-'} (problem: {plugin.error})"
    return hooks or "-"


def _plugins(args: argparse.Namespace) -> int:
    found = get_plugins()
    problems = registration_problems()
    kept_out = dict(sorted(plugins().skipped.items()))  # never imported: no name or hooks
    if args.json:
        report = {
            "plugins": [plugin.to_dict() for plugin in found],
            "kept_out": [{"distribution": d, "by": by} for d, by in kept_out.items()],
            "problems": problems,
        }
        print(json.dumps(report, indent=2))
        return 0
    width = _width()
    headers = ["name", "distribution", "version"]
    if args.verbose:
        headers.append("module")
    headers.append("hooks")
    rows = []
    for plugin in found:
        row = [plugin.name, plugin.distribution, plugin.version or "-"]
        if args.verbose:
            row.append(plugin.module or "-")
        hooks = ", ".join(hook.removeprefix("register_") for hook in plugin.hooks)
        row.append(_hooks_cell(plugin, hooks))
        rows.append(row)
    for distribution, variable in kept_out.items():
        row = ["-", distribution, "-", *(["-"] if args.verbose else []), f"kept out by {variable}"]
        rows.append(row)
    print(_table(headers, rows, width))
    if problems:
        print("\nproblems:")
        for problem in problems:
            print(textwrap.fill(problem, width, initial_indent="- ", subsequent_indent="  "))
    return 0


def _strategies(args: argparse.Namespace) -> int:
    described = describe_strategies()
    if args.name is not None:
        chosen = [s for s in described if s["name"] == args.name]
        if not chosen:
            try:
                strategy_entry(args.name)  # the error, with what is installed and did-you-mean
            except UnknownStrategy as error:
                args.parser.error(str(error))
        described = chosen
    if args.json:
        listed = [_claimed(strategy) for strategy in described]
        shown: Any = listed[0] if args.name is not None else listed
        print(json.dumps(shown, indent=2, default=str))
        return 0
    width = _width()
    if not described:
        kept_out = _kept_out_words()
        if kept_out:
            print(f"no strategy is loaded; {kept_out}", file=sys.stderr)
            return 0
        hint = install_hint("strategy", "fixed")
        print(f"no strategy is installed; for the first one: {hint}", file=sys.stderr)
        return 0
    if args.name is None:
        rows = [_strategy_row(s) for s in described]
        print(_table(["name", "distribution", "LLM", "summary"], rows, width, lines_per_row=3))
        for said in _strategy_warnings(described):
            print(textwrap.fill(said, width, initial_indent="(!) ", subsequent_indent="    "))
        if not args.verbose:
            if described:
                print("\nOptions: ctxwindow strategies NAME, or --verbose for all.")
            return 0
    for strategy in described:
        if args.name is None:
            print()
        print(_described(strategy, width))
    return 0


def _claimed(strategy: dict[str, Any]) -> dict[str, Any]:
    """A strategy as ``--json`` lists it: a name two distributions claim is neither's,
    so no distribution, summary or options (``claimed_by`` names both), as in the table."""
    if not strategy["conflict"]:
        return strategy
    return {**strategy, "distribution": None, "plugin": None, "summary": None, "options": []}


def _strategy_row(strategy: dict[str, Any]) -> list[str]:
    """One strategy's row; a name two distributions claim is neither's: the row names
    both, and none of their summaries (it cannot be selected until one goes)."""
    if strategy["conflict"]:
        return [
            strategy["name"] + " (!)",
            f"({len(strategy['claimed_by'])} claimants)",
            "-",
            f"claimed by {' and '.join(strategy['claimed_by'])}; not selectable until one goes",
        ]
    return [
        strategy["name"],
        strategy["distribution"],
        "yes" if strategy["requires_llm"] else "no",
        strategy["summary"].replace("``", ""),
    ]


def _strategy_warnings(described: Sequence[dict[str, Any]]) -> list[str]:
    """What the table of strategies does not show: the names two plugins claim, and the
    plugins that failed (so their strategies may be missing). A plugin that only had a
    registration refused still works, and is not called failed."""
    said = [s["conflict"] for s in described if s["conflict"]]
    for plugin in get_plugins():
        if plugin.failed:
            said.append(
                f"failed to load or in a hook, so its strategies may be missing: "
                f"{plugin.name!r} from {plugin.distribution}: {plugin.error}"
            )
    for refused in refused_strategies():
        said.append(f"refused, while the plugin's other strategies work: {refused}")
    return said


def _described(strategy: dict[str, Any], width: int) -> str:
    """One strategy and its options, as ``ctxwindow strategies NAME`` shows it; a name
    two distributions claim shows the clash, not one claimant's summary and options."""
    if strategy["conflict"]:
        claimed = " and ".join(strategy["claimed_by"])
        return "\n".join(
            [
                f"{strategy['name']} (claimed by {claimed}; not selectable until one goes)",
                textwrap.fill(
                    strategy["conflict"], width, initial_indent="  (!) ", subsequent_indent="      "
                ),
            ]
        )
    needs = "needs an LLM" if strategy["requires_llm"] else "needs no LLM"
    lines = [
        f"{strategy['name']} (from {strategy['distribution']}; {needs})",
        _paragraph(strategy["summary"].replace("``", ""), width, "  "),
    ]
    lines.append("  options:")
    for option in strategy["options"]:
        choices = option["choices"]
        kind = " | ".join(map(repr, choices)) if choices else option["type"]
        bounds = [
            f"{word} {option[key]:g}"
            for word, key in ((">=", "minimum"), ("<=", "maximum"))
            if option.get(key) is not None
        ]
        within = f" ({', '.join(bounds)})" if bounds else ""
        lines.append(f"    {option['name']}: {kind}{within} = {option['default']!r}")
        if option["help"]:
            lines.append(_paragraph(option["help"], width, "        "))
    return "\n".join(lines)


# -- select ------------------------------------------------------------------------------
def _select(args: argparse.Namespace) -> int:
    used: Path | None = None
    if args.config:
        config: dict[str, Any] = load_config_file(args.config)
        used = Path(args.config)
    else:
        found = find_config_file()
        config, used = ({}, None) if found is None else (found[1], found[0])
    if used is not None:
        logger.info("config from %s", used)
    strategy, from_spec, given = _strategy_and_options(args.strategy, args.option)
    set_aside = _other_strategys_options(config, strategy)
    for key, value in (
        ("strategy", strategy),
        ("budget", args.budget),
        ("counter", args.counter),
    ):
        if value is not None:
            config[key] = value
    defaulted = "strategy" not in config
    config.setdefault("strategy", "fixed")
    _check_given_options(from_spec, config["strategy"], f"--strategy {args.strategy!r}, option")
    _check_given_options(given, config["strategy"])
    config.update({**from_spec, **given})
    if "budget" not in config:
        check_keys(config)  # a typo'd `buget` is named, not reported as no budget
        raise ConfigError(
            "no token budget: pass --budget N, or set budget in ctxwindow.toml or "
            "[tool.ctxwindow] of pyproject.toml (or the file given with --config)"
        )
    _check_outputs(args)
    request = read_request(args.file)
    result, window = request.select(_windower(config, defaulted), args.query)
    text = _json_text(result, "the window", ensure_ascii=False, default=str)
    if not _encodable(text):  # lone surrogates, read from "\ud800" escapes: keep them escaped
        text = _json_text(result, "the window", default=str)
    _write(args.output, text, "--output")
    if args.explain:
        source = (
            f"config {str(used)!r}" + (" (--config)" if args.config else "")
            if used is not None
            else "config: none (no ctxwindow.toml or [tool.ctxwindow] here)"
        )
        print(window.record.explain(), file=sys.stderr)
        if set_aside:
            source += f"; {set_aside}"
        print(source, file=sys.stderr)  # last: the record's table opens the output
    if args.record:
        _write(args.record, _json_text(window.record.to_dict(), "the record"), "--record")
    return 0


def _windower(config: dict[str, Any], defaulted: bool) -> Any:
    """The configured Windower; when no strategy was named and the default one is not
    installed, an error that says the default was tried and how to name another."""
    try:
        return from_config(config)
    except UnknownStrategy as error:
        if not defaulted:
            raise
        raise ConfigError(
            f"no strategy was named, so the default 'fixed' was tried: {error} (name "
            f"another with --strategy, or strategy in ctxwindow.toml)"
        ) from error


def _json_text(value: Any, what: str, **how: Any) -> str:
    """``value`` as indented JSON text; a NaN or an infinity, which Python would write
    as ``NaN`` (no JSON reader takes it), is an error instead."""
    try:
        return json.dumps(value, indent=2, allow_nan=False, **how) + "\n"
    except ValueError as error:
        raise ValueError(
            f"{what} holds a NaN or an infinity, which JSON cannot hold ({error}); no "
            f"output written: report it to the strategy's plugin"
        ) from None


def _strategy_and_options(
    spec: str | None, pairs: Sequence[str]
) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """The strategy --strategy names, the options given with it (``NAME:key=value``,
    as inspect, eval and bench take them) and those given with --option; a key set in
    both is refused, not silently won by one."""
    name, options = parse_strategy_spec(spec) if spec is not None else (None, {})
    given = _options(pairs)
    clash = sorted(set(options) & set(given))
    if clash:
        raise ValueError(
            f"--strategy {spec!r} and --option both set {', '.join(map(repr, clash))}; "
            f"set each option in one place"
        )
    return name, options, given


def _check_given_options(
    given: Mapping[str, Any], strategy: object, label: str = "--option"
) -> None:
    """An option given on the command line (``label`` says where) that the strategy
    does not take is named as such, with the options it takes (not the config file's
    keys, of which the command line may set none of the host's)."""
    if not given or not isinstance(strategy, str):
        return
    try:
        declared = declared_options(strategy_class(strategy))
    except CtxWindowError:  # an unknown strategy: reported where it is built
        return
    takes = sorted({option.name for option in declared} | set(VISIT_KEYS))
    unknown = [key for key in given if key not in takes]
    if unknown:
        raise ValueError(
            f"{label} {', '.join(map(repr, unknown))}: not an option of strategy "
            f"{strategy!r}; it takes {', '.join(takes)}" + suggestions(unknown, takes)
        )


def _other_strategys_options(config: dict[str, Any], strategy: str | None) -> str:
    """Take out of ``config`` the options of its strategy when --strategy names another
    (they are that strategy's, and another would reject them); the budget, the counter,
    the visit bounds and the options the other strategy takes too (``oversize``, say)
    stay. Says what was set aside, if any."""
    configured = config.get("strategy")
    if strategy is None or configured is None or configured == strategy:
        return ""
    takes = (option.name for option in declared_options(strategy_class(strategy)))
    shared = {*HOST_KEYS, *VISIT_KEYS, *takes}
    other = sorted(key for key in config if key not in shared)
    for key in other:
        del config[key]
    if not other:
        return ""
    return f"its options for strategy {configured!r} ({', '.join(other)}) set aside for --strategy"


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse to write the window or the record over an input (or over each other,
    stdout included: '-', or no --output for the window)."""
    if args.record == "-" and args.output in (None, "-"):
        raise ValueError(
            "--record - and the window would both go to stdout; give --output FILE for "
            "the window, or --record FILE"
        )
    inputs = {"the messages file": args.file, "the config file": args.config}
    outputs = {"--output": args.output, "--record": args.record}
    seen: dict[Path, str] = {}
    for label, name in inputs.items():
        if name and name != "-":
            seen[Path(name).resolve()] = label
    for flag, name in outputs.items():
        if not name or name == "-":
            continue
        target = Path(name).resolve()
        if target in seen:
            raise ValueError(
                f"{flag} {name!r} is {seen[target]}; ctxwindow never overwrites its "
                f"input: write to another file"
            )
        seen[target] = flag


def _write(name: str | None, text: str, flag: str) -> None:
    """Write ``text`` to the file ``name``; to stdout for none, or '-' (as '-' reads
    stdin for the messages file, rather than make a file named '-')."""
    if name in (None, "-"):
        sys.stdout.write(text)
        return
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
