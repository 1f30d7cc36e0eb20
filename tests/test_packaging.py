"""Every distribution's metadata: the licence (its text shipped in each wheel and sdist),
authors, project URLs, Python classifiers, and for plugins a core range that includes
the core's version (see docs/stability.md); every version from one place, versions.toml.

The pyproject files are read with tomllib; one sdist is built, and its wheel from it, to
see the LICENSE and the version inside them.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import re
import subprocess
import sys
import tarfile
import zipfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the core depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
LICENSE = ROOT / "LICENSE"
VERSIONS = ROOT / "versions.toml"
REPO_URL = "https://github.com/ctxwindow/ctxwindow"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
TEMPLATE = ROOT / "plugins/scaffold/src/ctxwindow_scaffold/templates/plugin/pyproject.toml.tmpl"

#: Every distribution of the repository: the core, the plugins and the example plugin.
#: (tests/fixtures/* are test fixtures, not distributions.)
DISTRIBUTIONS = sorted(
    [ROOT / "core"]
    + [path.parent for path in ROOT.glob("plugins/*/pyproject.toml")]
    + [path.parent for path in ROOT.glob("examples/*/pyproject.toml")]
)
PLUGINS = [folder for folder in DISTRIBUTIONS if folder != ROOT / "core"]
#: The tutorial's example plugin stands for a third party's package: its version is its
#: own, typed in its pyproject.toml, as a package outside this repository would have it.
FIRST_PARTY = [folder for folder in DISTRIBUTIONS if folder.parent != ROOT / "examples"]


def project(folder: Path) -> dict[str, Any]:
    with (folder / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def versions() -> dict[str, str]:
    """versions.toml's table: the one place each first-party distribution's version is."""
    with VERSIONS.open("rb") as file:
        table: dict[str, str] = tomllib.load(file)["versions"]
    return table


def core_version() -> Version:
    return Version(versions()["ctxwindow"])


def built_version(folder: Path) -> str:
    """The version hatchling gives ``folder``'s distribution, read as its regex version
    source reads it (the file and pattern of ``[tool.hatch.version]``)."""
    source = project(folder)["tool"]["hatch"]["version"]
    text = (folder / source["path"]).read_text(encoding="utf-8")
    match = re.search(source["pattern"], text, flags=re.MULTILINE)
    assert match is not None, f"{folder_id(folder)}: its pattern matches no line"
    return match["version"]


def core_requirement(dependencies: list[str]) -> Requirement:
    (requirement,) = [Requirement(d) for d in dependencies if Requirement(d).name == "ctxwindow"]
    return requirement


def folder_id(folder: Path) -> str:
    return str(folder.relative_to(ROOT))


def test_every_distribution_is_found() -> None:
    names = {project(folder)["project"]["name"] for folder in DISTRIBUTIONS}
    assert {"ctxwindow", "ctxwindow-fixed", "ctxwindow-recency-decay"} <= names
    assert len(names) == len(DISTRIBUTIONS) >= 10


def test_license_is_the_apache_2_text() -> None:
    text = LICENSE.read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text


@pytest.mark.parametrize("folder", DISTRIBUTIONS, ids=folder_id)
def test_license_ships_with_every_distribution(folder: Path) -> None:
    """hatchling ships only files under the project folder, so each holds a copy of the
    repository's LICENSE, named by PEP 639 metadata (no License classifiers beside it)."""
    data = project(folder)
    meta = data["project"]
    assert meta["license"] == "Apache-2.0"
    assert meta["license-files"] == ["LICENSE"]
    assert (folder / "LICENSE").read_bytes() == LICENSE.read_bytes(), (
        f"{folder_id(folder)}/LICENSE differs from the repository's LICENSE"
    )
    assert not [c for c in meta.get("classifiers", []) if c.startswith("License ::")]
    # license-files as a list of globs (PEP 639) needs hatchling 1.27 or later.
    assert data["build-system"]["build-backend"] == "hatchling.build"
    (backend,) = [Requirement(r) for r in data["build-system"]["requires"]]
    assert backend.name == "hatchling"
    assert Version("1.26") not in backend.specifier and Version("1.27") in backend.specifier


@pytest.mark.parametrize("folder", DISTRIBUTIONS, ids=folder_id)
def test_authors_urls_and_classifiers(folder: Path) -> None:
    meta = project(folder)["project"]
    assert {"name": "ctxwindow developers"} in meta["authors"]
    urls = meta["urls"]
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert urls["Homepage"] == REPO_URL
    assert all(url.startswith(REPO_URL) for url in urls.values()), urls
    assert urls["Source"] in (REPO_URL, f"{REPO_URL}/tree/main/{folder_id(folder)}")
    classifiers = meta["classifiers"]
    assert "Programming Language :: Python :: 3 :: Only" in classifiers
    listed = [c.rsplit(" :: ", 1)[1] for c in classifiers if re.search(r":: 3\.\d+$", c)]
    assert listed == list(PYTHONS)
    assert meta["requires-python"] == f">={PYTHONS[0]}"
    assert "Typing :: Typed" in classifiers
    packages = project(folder)["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    for package in packages:  # Typing :: Typed is a promise the py.typed marker keeps
        assert (folder / package / "py.typed").is_file(), f"{package} has no py.typed"


def test_versions_table_names_every_first_party_distribution() -> None:
    names = {project(folder)["project"]["name"] for folder in FIRST_PARTY}
    assert set(versions()) == names
    for name, version in versions().items():
        assert str(Version(version)) == version, f"{name}: {version!r} is not normalized"


@pytest.mark.parametrize("folder", FIRST_PARTY, ids=folder_id)
def test_every_version_comes_from_the_versions_table(folder: Path) -> None:
    meta = project(folder)["project"]
    assert "version" not in meta, f"{folder_id(folder)} types its version by hand"
    assert meta["dynamic"] == ["version"]
    source = project(folder)["tool"]["hatch"]["version"]
    assert (folder / source["path"]).resolve() == VERSIONS
    assert built_version(folder) == versions()[meta["name"]]


@pytest.mark.parametrize("name", sorted(versions()))
def test_installed_versions_are_the_tables(name: str) -> None:
    """An environment installed before a bump reports the old version: reinstall."""
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{name} is not installed here")
    assert installed == versions()[name], f"{name}: reinstall it (pip install -e)"
    if name == "ctxwindow":
        import ctxwindow

        assert ctxwindow.__version__ == versions()[name]


def test_core_has_no_core_range_and_every_version_a_changelog_entry() -> None:
    version = core_version()
    assert version.release[0] == 0, "a 1.0 core: revisit docs/stability.md's 0.x rules"
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    unreleased = changelog.split("## [Unreleased]", 1)[1].split("\n## [", 1)[0]
    for name, number in versions().items():
        released = f"\n## [{number}]" in changelog
        assert released or f"{name} {number}" in unreleased, (
            f"CHANGELOG.md has no [{number}] release and its Unreleased section does not "
            f"name {name} {number}"
        )


def _minor_range(version: Version) -> str:
    major, minor = version.release[:2]
    return f">={major}.{minor},<{major}.{minor + 1}"


@pytest.mark.parametrize("folder", PLUGINS, ids=folder_id)
def test_plugins_require_the_cores_minor_series(folder: Path) -> None:
    requirement = core_requirement(project(folder)["project"]["dependencies"])
    assert core_version() in requirement.specifier
    assert requirement.specifier == SpecifierSet(_minor_range(core_version()))


@pytest.mark.parametrize("folder", [f for f in FIRST_PARTY if f in PLUGINS], ids=folder_id)
def test_plugins_require_the_first_party_plugins_they_use_as_released_here(folder: Path) -> None:
    """A first-party plugin needs the plugins it imports as this repository has them:
    their minor series at least (the 0.1 ones lack what this release's use), so pip
    does not keep an older one that would fail at import."""
    meta = project(folder)["project"]
    extras = meta.get("optional-dependencies", {})
    runtime = (listed for extra, listed in extras.items() if extra != "test")
    listed = [*meta["dependencies"], *itertools.chain(*runtime)]
    table = versions()
    for requirement in map(Requirement, listed):
        if requirement.name in table and requirement.name != "ctxwindow":
            ours = Version(table[requirement.name])
            older = Version(f"{ours.release[0]}.{max(ours.release[1] - 1, 0)}.0")
            assert requirement.specifier.contains(ours), (requirement, ours)
            assert ours.release[1] == 0 or not requirement.specifier.contains(older), (
                f"{meta['name']} admits {requirement.name} {older}: require >={ours.major}."
                f"{ours.minor}"
            )


def test_template_requires_the_cores_minor_series() -> None:
    text = TEMPLATE.read_text(encoding="utf-8")
    meta = tomllib.loads(re.sub(r"\{\{\w+\}\}", "x", text))["project"]
    requirement = core_requirement(meta["dependencies"])
    assert requirement.specifier == SpecifierSet(_minor_range(core_version()))
    assert "Programming Language :: Python :: 3 :: Only" in meta["classifiers"]


def test_tutorial_names_the_example_packages_range() -> None:
    expected = _minor_range(core_version())
    example = ROOT / "examples" / "ctxwindow-recency-decay"
    requirement = core_requirement(project(example)["project"]["dependencies"])
    assert requirement.specifier == SpecifierSet(expected)
    tutorial = (ROOT / "docs" / "plugins" / "tutorial.md").read_text(encoding="utf-8")
    assert f"`ctxwindow{expected}`" in tutorial


def test_stability_policy_is_in_the_docs_nav() -> None:
    assert (ROOT / "docs" / "stability.md").is_file()
    assert re.search(r"^\s*- [^:]+: stability\.md$", (ROOT / "mkdocs.yml").read_text(), re.M)


@pytest.mark.skipif(find_spec("build") is None, reason="the 'build' package is not installed")
def test_wheel_and_sdist_carry_the_license_and_the_version(tmp_path: Path) -> None:
    """One distribution built as a user's build would (an isolated build: hatchling
    comes from the package index), sdist first and the wheel from the sdist, unpacked
    away from versions.toml: the sdist carries its version in PKG-INFO."""
    folder = ROOT / "plugins" / "fixed"
    subprocess.run(
        [sys.executable, "-m", "build", "-o", str(tmp_path), str(folder)],
        check=True,
        capture_output=True,
    )
    (sdist,) = tmp_path.glob("*.tar.gz")
    (wheel,) = tmp_path.glob("*.whl")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        (license_name,) = [n for n in names if n.count("/") == 1 and n.endswith("/LICENSE")]
        member = archive.extractfile(license_name)
        assert member is not None and member.read() == LICENSE.read_bytes()
    with zipfile.ZipFile(wheel) as archive:
        (license_name,) = [
            n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")
        ]
        assert archive.read(license_name) == LICENSE.read_bytes()
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text and "License-File: LICENSE" in text
    assert f"Project-URL: Homepage, {REPO_URL}" in text
    assert f"\nVersion: {versions()['ctxwindow-fixed']}\n" in text
