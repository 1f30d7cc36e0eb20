"""The package pages say what ships: the README names every distribution, the stability
policy every hook, the core README every extra, and a package README (its PyPI page)
links where PyPI can follow."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

from ctxwindow import hookspecs

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (ROOT / "versions.toml").is_file(), reason="needs the repository (not in an sdist)"
)
#: The package READMEs whose links are absolute (the strategies' READMEs are also the
#: documentation site's strategy pages, whose links docs_gen rewrites for the site).
#: Every package whose README is its PyPI page.
ABSOLUTE_LINKS = [
    "core",
    *sorted(f"plugins/{p.parent.name}" for p in (ROOT / "plugins").glob("*/pyproject.toml")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _toml(path: str) -> dict[str, object]:
    loaded: dict[str, object] = tomllib.loads((ROOT / path).read_text(encoding="utf-8"))
    return loaded


def _text(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def test_the_readme_names_every_distribution_and_lays_out_every_plugin() -> None:
    readme = _text("README.md")
    versions = _toml("versions.toml")["versions"]
    assert isinstance(versions, dict)
    for distribution in versions:
        assert f"`{distribution}`" in readme, distribution
    layout = readme.split("\n## Layout\n", 1)[1]
    for folder in sorted(ROOT.glob("plugins/*/pyproject.toml")):
        row = f"| `plugins/{folder.parent.name}/` | distribution "
        assert row in layout, row


def test_the_stability_policy_lists_every_hook() -> None:
    marker = f"{hookspecs.PROJECT}_spec"
    hooks = [
        name
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, marker)
    ]
    assert "register_config_tables" in hooks
    listed = _text("docs/stability.md").split("**`ctxwindow.hookspecs`**", 1)[1]
    listed = listed.split("\n- ", 1)[0]
    for hook in hooks:
        assert f"`{hook}`" in listed, hook


def test_the_core_readme_lists_every_extra() -> None:
    project = _toml("core/pyproject.toml")["project"]
    assert isinstance(project, dict)
    extras = project["optional-dependencies"]
    line = _text("core/README.md").split("\nExtras: ", 1)[1].split("\n\n", 1)[0]
    for extra in extras:
        assert f"`{extra}`" in line, extra


@pytest.mark.parametrize("folder", ABSOLUTE_LINKS)
def test_a_package_readme_links_to_the_repository_not_beside_itself(folder: str) -> None:
    """On PyPI a link relative to the monorepo (``../../docs/serve.md``) is a 404: links
    go to the repository of project.urls."""
    project = _toml(f"{folder}/pyproject.toml")["project"]
    assert isinstance(project, dict)
    home = project["urls"]["Homepage"]
    links = LINK.findall(_text(f"{folder}/README.md"))
    assert links
    for link in links:
        assert re.match(r"^[a-z]+://", link), link
        if "github.com" in link:
            assert link.startswith((f"{home}#", f"{home}/blob/main/")), link
            if "/blob/main/" in link:
                target = link.split("/blob/main/", 1)[1].split("#")[0]
                assert (ROOT / target).is_file(), link
