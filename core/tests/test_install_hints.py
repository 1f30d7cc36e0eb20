"""The install hints (install_hints.toml) say what the READMEs tell users to install."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxwindow import _plugins
from ctxwindow.errors import UnknownStrategy

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
needs_repository = pytest.mark.skipif(
    not README.is_file(), reason="needs the repository's README.md (not in an sdist)"
)
#: A row of the README's strategy table: the strategies' names, then the install command.
ROW = re.compile(r"^\| (`[^|]+`) \| `(pip install [^`]+)` \|", re.MULTILINE)


def _hints() -> dict[str, dict[str, str]]:
    return _plugins._hints()


def _readme_installs() -> dict[str, str]:
    """The README strategy table's install command of each strategy."""
    text = README.read_text(encoding="utf-8")
    table = text.split("<!-- strategy-table")[1].split("<!-- end of strategy-table")[0]
    found = {
        name: command
        for names, command in ROW.findall(table)
        for name in re.findall(r"`([^`]+)`", names)
    }
    assert found, "the README's strategy table has no rows"
    return found


@needs_repository
def test_every_strategy_hint_is_the_readme_tables_command() -> None:
    """`semantic` needs its [bundled-model] extra: without it, offline, the embedder
    spends a minute and a half retrying the hub before it fails."""
    readme = _readme_installs()
    assert set(_hints()["strategy"]) == set(readme)
    for name, command in _hints()["strategy"].items():
        assert command == readme[name], name


def test_the_embedder_hint_installs_what_the_semantic_hint_installs() -> None:
    hints = _hints()
    assert hints["embedder"]["sentence-transformers"] == hints["strategy"]["semantic"]
    assert "[bundled-model]" in hints["strategy"]["semantic"]


@needs_repository
def test_every_hint_is_a_command_the_documentation_gives() -> None:
    """Each hint is written, word for word, in a README or a docs page."""
    pages = [README, *ROOT.glob("plugins/*/README.md"), *ROOT.glob("docs/**/*.md")]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    for kind, table in _hints().items():
        for name, command in table.items():
            assert command in text, (kind, name, command)


def test_a_kept_out_strategy_whose_hint_has_an_extra_is_not_said_to_need_installing() -> None:
    """The hint's last word is the distribution, quoted with its extras: a strategy kept
    out by the environment is not also told to be installed."""
    hint = _hints()["strategy"]["semantic"]
    kept_out = UnknownStrategy(
        "semantic", ["fixed"], hint, ["ctxwindow-semantic (CTXWINDOW_DISABLE_PLUGINS)"]
    )
    assert hint not in str(kept_out)
