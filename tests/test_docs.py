"""The documentation site cannot go stale: hooks, quickstart, generated references."""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType

import docs_scripts
import pytest

import ctxwindow
from ctxwindow import hookspecs
from ctxwindow._cli import _parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def hooks() -> list[str]:
    """Every function of ctxwindow.hookspecs marked with its hookspec marker."""
    marker = f"{hookspecs.PROJECT}_spec"
    return [
        name
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, marker)
    ]


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    """docs_gen/reference.py, the generators mkdocs runs at build time."""
    return docs_scripts.load("reference")


def installed_first_party(reference: ModuleType) -> list[str]:
    names = []
    for name, (distribution, _) in reference.FIRST_PARTY.items():
        try:
            metadata.distribution(distribution)
        except metadata.PackageNotFoundError:
            continue
        names.append(name)
    return names


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a level-2 heading line), up to the next one."""
    assert f"\n{heading}\n" in text, f"no section {heading!r}"
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_every_hook_is_named_in_the_hook_page() -> None:
    names = hooks()
    assert len(names) >= 5, names
    page = (DOCS / "reference" / "hooks.md").read_text(encoding="utf-8")
    assert "::: ctxwindow.hookspecs" in page  # each hook's own docs, from its docstring
    for name in names:
        assert f"`{name}`" in page, f"hook {name} is not named in docs/reference/hooks.md"
        function = getattr(hookspecs, name)
        for parameter in inspect.signature(function).parameters:  # tox's :param: form
            assert f":param {parameter}:" in (function.__doc__ or ""), (name, parameter)


def test_docs_quickstart_is_the_readmes_opening_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    quickstart = index.split("\n## Quickstart\n", 1)[1]
    readme_commands = bash_blocks(readme)[0].strip().splitlines()
    docs_commands = bash_blocks(quickstart)[0].strip().splitlines()
    assert len(readme_commands) == 2
    assert docs_commands == readme_commands
    for block in bash_blocks(index):  # the overview's other commands are the README's too
        assert block in readme, block


def test_configuration_reference_lists_every_option_of_every_first_party_strategy(
    reference: ModuleType,
) -> None:
    names = installed_first_party(reference)
    assert "fixed" in names  # the cross-package tests always run with ctxwindow-fixed
    text = reference.configuration_reference()
    for name in names:
        options = ctxwindow.strategy_class(name).all_options()
        assert options
        table = section(text, f"## `{name}`")
        for option in options:
            row = next(
                (line for line in table.splitlines() if line.startswith(f"| `{option.name}` |")),
                None,
            )
            assert row is not None, f"option {option.name!r} of {name!r} missing"
            assert f"`{option.default!r}`" in row, row


def test_cli_reference_lists_every_subcommand_and_argument(reference: ModuleType) -> None:
    text = reference.cli_reference()
    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(reference.cli_subcommands()) == set(commands.choices)
    for name, sub in commands.choices.items():
        body = section(text, f"## `ctxwindow {name}`")
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            shown = action.option_strings[0] if action.option_strings else action.dest
            assert f"`{shown}`" in body, f"ctxwindow {name}: {shown} missing"
            if action.help:
                assert action.help in body.replace("\\|", "|")


def test_strategy_pages_are_the_plugin_readmes_with_working_links(
    reference: ModuleType,
) -> None:
    for name, (_, folder) in reference.FIRST_PARTY.items():
        readme = (ROOT / folder / "README.md").read_text(encoding="utf-8")
        page = reference.strategy_page(name)
        assert page.splitlines()[0] == readme.splitlines()[0]
        for block in bash_blocks(readme):
            assert block in page  # the README's commands, verbatim
        assert "](../../" not in page, "a link that leaves the site"
        assert "](../index.md)" in page
        # the README links to the repository for PyPI; the site page, to its own pages
        assert f"]({reference.REPOSITORY}#" not in page
        assert f"]({reference.REPOSITORY}/blob/main/docs/" not in page


def test_api_reference_covers_the_public_modules(reference: ModuleType) -> None:
    text = reference.api_reference()
    public = (
        "ctxwindow",
        "ctxwindow.errors",
        "ctxwindow.testing",
        "ctxwindow.kit",
        "ctxwindow.kit.ranking",
    )
    plugins = ("ctxwindow_stores", "ctxwindow_eval", "ctxwindow_adapters.testing")
    for module in (*public, *plugins):
        assert f"\n::: {module}\n" in text, module
    for name in ctxwindow.__all__:
        assert f"- {name}\n" in text or f"`{name}`" in text, name


def _site_tools() -> bool:
    return all(
        importlib.util.find_spec(module) is not None
        for module in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_gen_files")
    )


@pytest.mark.skipif(not _site_tools(), reason="mkdocs and its plugins are not installed")
def test_site_builds_strict_with_every_hook_documented(tmp_path: Path) -> None:
    # not -q: it hides warnings, and then --strict has none to fail on
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # a guard against a hung build only: a loaded machine took 154 s
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    built = (tmp_path / "reference" / "hooks" / "index.html").read_text(encoding="utf-8")
    for name in hooks():
        assert f'id="ctxwindow.hookspecs.{name}"' in built, name
    assert built.count("Parameters:") >= len(hooks())
    configuration = tmp_path / "reference" / "configuration" / "index.html"
    assert "max_messages" in configuration.read_text(encoding="utf-8")
