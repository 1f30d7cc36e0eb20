"""The ``inspect`` command: window one conversation with several strategies and write
the picture (:mod:`ctxwindow_serve.inspector`) as one HTML page.

It imports nothing of the proxy (no starlette, no uvicorn): looking needs no server.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ctxwindow import SavedRequest, Window, from_config, parse_strategy_spec, read_request
from ctxwindow_serve.inspector import render_page, without_passwords

#: The page's name when ``--html`` is not given (beside where the command runs).
DEFAULT_SUFFIX = ".inspect.html"


def register(cli: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``inspect`` to the ``ctxwindow`` command."""
    inspect = cli.add_parser(
        "inspect",
        help="see what strategies keep: one HTML page, a column per strategy",
        description="Windows FILE (read as `ctxwindow select` reads it: a JSON array or "
        "JSONL of messages, or a saved request body) with each strategy given and writes "
        "one self-contained HTML page (no network needed to view it): the conversation "
        "as a timeline, each message coloured kept, dropped, summarized or cut in each "
        "strategy's column, its tokens as a bar and the reason beside it.",
    )
    inspect.add_argument("file", help="messages file or request body; '-' for stdin")
    inspect.add_argument(
        "--strategy",
        "-s",
        action="append",
        required=True,
        metavar="SPEC",
        help="NAME or NAME:key=value,... (repeatable: one column each)",
    )
    inspect.add_argument("--budget", "-b", type=int, required=True, help="token budget")
    inspect.add_argument(
        "--counter", "-c", default="approx", help="token counter (default: approx)"
    )
    inspect.add_argument(
        "--query", "-q", help="what the next request asks, for strategies that use it"
    )
    inspect.add_argument(
        "--html",
        metavar="OUT",
        help=f"where to write the page (default: FILE's name with {DEFAULT_SUFFIX}, "
        "in the current folder)",
    )
    inspect.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Window the file with every strategy, write the page, print where it is."""
    out = Path(args.html or _default_name(args.file))
    if args.file != "-" and out.resolve() == Path(args.file).resolve():
        raise ValueError(
            f"--html {args.html!r} is the messages file; ctxwindow never overwrites its "
            "input: write to another file"
        )
    request = read_request(args.file)
    columns = [_column(spec, request, args) for spec in args.strategy]
    source = "stdin" if args.file == "-" else Path(args.file).name
    page = render_page(
        request.messages,
        columns,
        title=f"ctxwindow inspect: {source}",
        heading=f"{source} at a budget of {args.budget} tokens ({args.counter})",
    )
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as error:
        raise ValueError(
            f"cannot write --html {str(out)!r}: {error.strerror or error}; give a file "
            "path in a folder you can write to"
        ) from None
    for label, window in columns:
        record = window.record
        print(
            f"{without_passwords(label)}: tokens {record.tokens_before} -> {record.tokens_after}, "
            f"messages {record.messages_before} -> {record.messages_after}",
            file=sys.stderr,
        )
    print(out.resolve())
    return 0


def _column(spec: str, request: SavedRequest, args: argparse.Namespace) -> tuple[str, Window[Any]]:
    """The window one strategy ``spec`` gives; an error building or running it is told
    without the password of any URL in it (a store's, given in the spec). A spec that
    sets ``strategy``, ``budget`` or ``counter`` is refused (parse_strategy_spec): every
    column is windowed at the page's budget with its counter, as its heading says."""
    try:
        name, options = parse_strategy_spec(spec)
        windower = from_config(
            {**options, "strategy": name, "budget": args.budget, "counter": args.counter}
        )
        return spec, request.select(windower, args.query)[1]
    except Exception as error:
        shown = without_passwords(str(error))
        if shown == str(error):
            raise
        raise ValueError(shown) from None


def _default_name(file: str) -> str:
    return "ctxwindow" + DEFAULT_SUFFIX if file == "-" else Path(file).stem + DEFAULT_SUFFIX
