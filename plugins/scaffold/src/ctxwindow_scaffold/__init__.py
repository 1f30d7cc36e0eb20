"""ctxwindow-scaffold: ``ctxwindow new-plugin NAME`` writes a strategy plugin package whose
tests, the conformance suite included, pass as generated."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import ctxwindow
from ctxwindow_scaffold.scaffold import create_plugin, plugin_names

if TYPE_CHECKING:
    import argparse

__all__ = ["create_plugin", "plugin_names"]


@ctxwindow.hookimpl
def register_commands(cli: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    new_plugin = cli.add_parser(
        "new-plugin",
        help="create a strategy plugin package whose tests pass as generated",
        description="Writes DIR/ctxwindow-NAME: pyproject.toml, a starter strategy, its "
        "tests (the conformance suite included) and a README.",
    )
    new_plugin.add_argument("name", help="the strategy's name: lowercase words joined by '-'")
    new_plugin.add_argument("--dir", default=".", help="where to create it (default: here)")
    new_plugin.set_defaults(run=_new_plugin)


def _new_plugin(args: argparse.Namespace) -> int:
    target = create_plugin(args.name, args.dir)
    # quoted: the next line is a command to paste, and the folder may hold a space
    where = shlex.quote(str(target))
    print(f"created {target}\nnext: cd {where} && pip install -e '.[test]' && pytest")
    return 0
