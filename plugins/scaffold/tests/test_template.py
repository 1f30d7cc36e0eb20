"""``ctxwindow new-plugin``: the package it makes passes its own tests as generated.

The package is installed (editable, no dependencies) into a fresh virtual environment
in ``tmp_path`` that sees this environment's packages (ctxwindow, pytest, hypothesis)
through a ``.pth`` file, so nothing is installed into the environment running the tests.
"""

from __future__ import annotations

import ast
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import BaseStrategy, History, Selection
from ctxwindow import _cli as cli
from ctxwindow_scaffold import scaffold
from ctxwindow_scaffold.scaffold import (
    create_plugin,
    first_party_distributions,
    plugin_names,
    template,
)

#: The fixture package_tests (tests/support, on pytest's pythonpath).
pytest_plugins = ["package_tests"]


def test_generated_package_passes_its_own_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], package_tests: Any
) -> None:
    assert cli.main(["new-plugin", "recent-first", "--dir", str(tmp_path)]) == 0
    package = tmp_path / "ctxwindow-recent-first"
    assert "created" in capsys.readouterr().out
    files = sorted(str(p.relative_to(package)) for p in package.rglob("*") if p.is_file())
    assert files == [
        "README.md",
        "pyproject.toml",
        "src/ctxwindow_recent_first/__init__.py",
        "src/ctxwindow_recent_first/py.typed",
        "tests/test_conformance.py",
        "tests/test_ctxwindow_recent_first.py",
    ]
    text = "\n".join((package / f).read_text(encoding="utf-8") for f in files)
    assert "{{" not in text and "__module__" not in text
    assert 'recent-first = "ctxwindow_recent_first"' in text  # the entry point

    result = package_tests(package)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout and "failed" not in result.stdout
    assert "skipped" not in result.stdout  # the whole conformance suite ran


@pytest.mark.parametrize(
    "bad", ["", "Recent", "recent_first", "recent-", "recent--first", "1st", "a b", "récent"]
)
def test_bad_names_are_a_clear_error(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["new-plugin", bad, "--dir", str(tmp_path)]) == cli.EXIT_ERROR
    assert "lowercase letters and digits" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ctxwindow-mine").mkdir()
    (tmp_path / "ctxwindow-mine" / "keep.txt").write_text("mine", encoding="utf-8")
    assert cli.main(["new-plugin", "mine", "--dir", str(tmp_path)]) == cli.EXIT_ERROR
    assert "already exists" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "ctxwindow-mine").iterdir()] == ["keep.txt"]


#: versions.toml at the repository root: every distribution this project ships (absent
#: when the tests run from an sdist).
VERSIONS = Path(__file__).resolve().parents[3] / "versions.toml"


def _shipped() -> list[str]:
    """The first-party plugin distributions, from versions.toml (else the scaffold's
    own list), the core aside."""
    if not VERSIONS.is_file():
        return sorted(first_party_distributions())
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    versions = tomllib.loads(VERSIONS.read_text(encoding="utf-8"))["versions"]
    return sorted(name for name in versions if name != "ctxwindow")


@pytest.mark.skipif(not VERSIONS.is_file(), reason="needs the repository's versions.toml")
def test_first_party_distributions_are_those_the_project_ships() -> None:
    assert sorted(first_party_distributions()) == _shipped()


@pytest.mark.parametrize("distribution", _shipped())
@pytest.mark.parametrize("spelled", ["short", "long"])
def test_refuses_a_first_party_name_even_when_not_installed(
    distribution: str,
    spelled: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Installed first or later, the first-party distribution and the new package would
    replace each other, pip saying nothing (and ctxwindow-serve's ``ctxwindow-fixed``
    requirement met by the user's package): refused though neither it nor a strategy
    of that name is here, as in a fresh environment with only ctxwindow-scaffold."""
    real_version = metadata.version

    def version(name: str) -> str:
        if name == distribution:
            raise metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(metadata, "version", version)  # the module scaffold.py reads
    monkeypatch.setattr(scaffold, "describe_strategies", list)
    name = distribution if spelled == "long" else distribution.removeprefix("ctxwindow-")
    assert cli.main(["new-plugin", name, "--dir", str(tmp_path)]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert f"{distribution} is a first-party ctxwindow distribution" in err
    assert "pick another name" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("recency-decay", "ctxwindow-recency-decay {} is installed here"),  # would replace it
        ("ctxwindow-recency-decay", "ctxwindow-recency-decay {} is installed here"),
        ("clear-tool-outputs", None),  # a strategy name, spelled otherwise: free
    ],
)
def test_refuses_the_name_of_an_installed_plugin(
    name: str, said: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pip would replace the installed plugin with the new package, without a word."""
    distribution = "ctxwindow-" + name.removeprefix("ctxwindow-")
    if said is not None:
        try:
            version = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{distribution} (examples/) is not installed here")
    code = cli.main(["new-plugin", name, "--dir", str(tmp_path)])
    if said is None:
        assert code == 0
        return
    assert code == cli.EXIT_ERROR
    assert said.format(version) in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_refuses_a_strategy_name_another_plugin_registers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two plugins registering one strategy name block each other."""

    class RecentFirst(BaseStrategy):
        name = "recent-first"

        def choose(self, history: History) -> Selection:
            return history.selection()

    class Other:
        @ctxwindow.hookimpl
        def register_strategies(self, register: Any) -> None:
            register(RecentFirst)

    ctxwindow.register_plugin(Other(), "other", "ctxwindow-other")
    try:
        code = cli.main(["new-plugin", "recent-first", "--dir", str(tmp_path)])
    finally:
        ctxwindow.unregister_plugin("other")
    assert code == cli.EXIT_ERROR
    assert "registered by 'ctxwindow-other'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_names_derive_from_the_strategy_name() -> None:
    names = plugin_names("ctxwindow-recency-decay2")
    assert (names.name, names.distribution, names.module, names.class_name) == (
        "recency-decay2",
        "ctxwindow-recency-decay2",
        "ctxwindow_recency_decay2",
        "RecencyDecay2",
    )


@pytest.mark.parametrize(
    ("name", "class_name"),
    [
        ("none", "NoneStrategy"),
        ("true", "TrueStrategy"),
        ("false", "FalseStrategy"),
        ("any", "AnyStrategy"),
        ("option", "OptionStrategy"),
        ("base-strategy", "BaseStrategyStrategy"),
        ("test-conformance", "TestConformanceStrategy"),
        ("import", "Import"),  # a keyword only in lowercase: the class name is fine
    ],
)
def test_a_name_that_makes_no_valid_class_gets_one(
    name: str, class_name: str, tmp_path: Path
) -> None:
    """``class None(BaseStrategy)`` would not compile, and ``class Option(...)`` would
    shadow the template's own import: each generated file compiles and binds the
    strategy's class name once (the class, or its import in a test)."""
    assert plugin_names(name).class_name == class_name
    package = create_plugin(name, tmp_path)
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))  # SyntaxError fails
        assert _top_level_names(tree).count(class_name) == 1, path


def _top_level_names(tree: ast.Module) -> list[str]:
    """The names a module's top-level statements bind (imports, classes, functions)."""
    bound: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.extend(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            bound.append(node.name)
    return bound


def test_template_ships_inside_the_package(tmp_path: Path) -> None:
    """The template is package data of ctxwindow-scaffold (found through
    importlib.resources), so a pip-installed ctxwindow-scaffold can scaffold too; every
    file is a ``.tmpl``."""
    assert template().joinpath("pyproject.toml.tmpl").is_file()
    target = create_plugin("x", tmp_path / "deeper")
    assert (target / "src" / "ctxwindow_x" / "__init__.py").is_file()


def test_new_plugin_without_a_name_is_a_one_line_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as usage:
        cli.main(["new-plugin"])
    assert usage.value.code == cli.EXIT_USAGE
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ctxwindow: error: ") and "--help" in line


def test_the_next_command_is_quoted_for_a_folder_with_a_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The "next:" line is a command to paste: a folder with a space must stay one word."""
    import shlex

    folder = tmp_path / "my plugins"
    folder.mkdir()
    assert cli.main(["new-plugin", "spaced", "--dir", str(folder)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("next: ")]
    words = shlex.split(line.removeprefix("next: "))
    assert words[:3] == ["cd", str(folder / "ctxwindow-spaced"), "&&"]
