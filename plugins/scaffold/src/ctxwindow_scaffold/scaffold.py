"""``ctxwindow new-plugin NAME``: a new strategy plugin package, ready to test.

The template ships inside this distribution (``ctxwindow_scaffold/templates/plugin``), so
a pip-installed ctxwindow-scaffold can scaffold. Each ``*.tmpl`` file is copied without that
suffix, with ``{{name}}``, ``{{distribution}}``, ``{{module}}`` and ``{{class_name}}``
filled in (in paths too, where ``__module__`` also stands for the module). The package
it makes passes its own tests, the conformance suite included, as generated.
"""

from __future__ import annotations

import keyword
import re
import sys
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import TYPE_CHECKING

from ctxwindow import describe_strategies

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
PREFIX = "ctxwindow-"
SUFFIX = ".tmpl"
#: The names the template's files import or define besides the strategy class: a class
#: of one of these names would shadow it (``class Option(BaseStrategy)``, say).
TEMPLATE_NAMES = frozenset(
    {
        "Any",
        "BaseStrategy",
        "ClassVar",
        "History",
        "Option",
        "RegisterStrategy",
        "Selection",
        "StrategyConformance",
        "TestConformance",
        "TestConformanceWithoutSkipping",
    }
)
#: Added to a class name that would not work as it is: "none" makes ``NoneStrategy``.
CLASS_SUFFIX = "Strategy"
#: The core's table of first-party names and the commands that install them (package
#: data of ctxwindow): each command names a distribution this project ships.
HINTS_FILE = "install_hints.toml"
#: First-party distributions the hints table does not name, as it lists only what
#: registers something by name (ctxwindow-stores is a library the strategies import).
UNHINTED_FIRST_PARTY = frozenset({"ctxwindow-stores"})
#: A distribution name in an install command: ``'ctxwindow-summarize[openai]'``.
HINTED = re.compile(r"(?<![\w.-])(ctxwindow-[a-z0-9][a-z0-9-]*)")


@dataclass(frozen=True)
class PluginNames:
    """The names one plugin goes by, all derived from the strategy's name."""

    name: str  # the strategy: "recent-first"
    distribution: str  # on PyPI: "ctxwindow-recent-first"
    module: str  # to import: "ctxwindow_recent_first"
    class_name: str  # the strategy class: "RecentFirst"

    def substitutions(self) -> dict[str, str]:
        return {
            "{{name}}": self.name,
            "{{distribution}}": self.distribution,
            "{{module}}": self.module,
            "{{class_name}}": self.class_name,
            "{{not_a_test}}": _not_a_test(self.class_name),
            "__module__": self.module,
        }


def _not_a_test(class_name: str) -> str:
    """For a class pytest would take for a test class (``TestX``, imported by the
    generated tests), the line that tells it not to: else it warns "cannot collect"."""
    if not class_name.startswith("Test"):
        return ""
    return "\n    __test__ = False  # a strategy, not a test class: pytest collects Test*"


def plugin_names(name: str) -> PluginNames:
    """The names for ``name`` (``ctxwindow-`` in front is allowed), or ValueError."""
    strategy = name.removeprefix(PREFIX)
    if not NAME.match(strategy):
        raise ValueError(
            f"plugin name {name!r} must be lowercase letters and digits in words joined "
            f"by single hyphens, starting with a letter (for example 'recent-first')"
        )
    words = strategy.split("-")
    return PluginNames(
        name=strategy,
        distribution=PREFIX + strategy,
        module="ctxwindow_" + "_".join(words),
        class_name=_class_name(words),
    )


def _class_name(words: list[str]) -> str:
    """The strategy's words in CamelCase, with "Strategy" added when that would be a
    keyword (``None``, ``True``, ``False``) or a name the template uses: the package
    must compile and pass its tests whatever the strategy is called."""
    plain = "".join(word.capitalize() for word in words)
    if keyword.iskeyword(plain) or plain in TEMPLATE_NAMES:
        return plain + CLASS_SUFFIX
    return plain


def first_party_distributions() -> frozenset[str]:
    """The distributions the ctxwindow project ships besides the core, installed or not:
    those the core's install hints name, and ctxwindow-stores."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 (tomli is a dependency of ctxwindow there)
        import tomli as tomllib
    found = set(UNHINTED_FIRST_PARTY)
    hints = resources.files("ctxwindow").joinpath(HINTS_FILE)
    if hints.is_file():  # else a core without the table: the names above only
        tables = tomllib.loads(hints.read_text(encoding="utf-8"))
        for table in tables.values():
            for command in table.values():
                found.update(HINTED.findall(str(command)))
    return frozenset(found)


def _check_untaken(names: PluginNames) -> None:
    """ValueError when the names are another plugin's: a first-party distribution's
    (installed or not: pip would let either package replace the other, and a first-party
    plugin's dependents would run the new one), a distribution of that name is installed
    (installing the new one would replace it, with no warning from pip), or an installed
    plugin registers a strategy of that name (neither could be selected)."""
    if names.distribution in first_party_distributions():
        raise ValueError(
            f"{names.distribution} is a first-party ctxwindow distribution: a package of "
            f"that name would replace it when installed (and be replaced by it); pick "
            f"another name, such as 'my-{names.name}'"
        )
    try:
        installed = metadata.version(names.distribution)
    except metadata.PackageNotFoundError:
        installed = None
    if installed is not None:
        raise ValueError(
            f"{names.distribution} {installed} is installed here: installing a new package "
            f"of that name would replace it; pick another name"
        )
    taken = next((d for d in describe_strategies() if d.get("name") == names.name), None)
    if taken is not None:
        raise ValueError(
            f"strategy {names.name!r} is registered by {taken.get('distribution')!r}: two "
            f"plugins of one name block each other; pick another name"
        )


def template() -> Traversable:
    """The template directory inside the installed ctxwindow-scaffold."""
    return resources.files("ctxwindow_scaffold").joinpath("templates").joinpath("plugin")


def create_plugin(name: str, directory: str | Path = ".") -> Path:
    """Write the package for strategy ``name`` into ``directory/ctxwindow-NAME``.

    Raises ValueError for a bad name and FileExistsError when the target exists.
    """
    names = plugin_names(name)
    _check_untaken(names)
    target = Path(directory) / names.distribution
    if target.exists():
        raise FileExistsError(f"{target} already exists; not overwriting it")
    files = dict(_files(template(), ()))
    if not files:
        raise FileNotFoundError(
            "the plugin template is missing from this ctxwindow-scaffold install"
        )
    substitutions = names.substitutions()
    target.mkdir(parents=True)
    for parts, source in sorted(files.items()):
        path = target.joinpath(*(_fill(part, substitutions) for part in parts))
        path = path.with_name(path.name.removesuffix(SUFFIX))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_fill(source.read_text(encoding="utf-8"), substitutions), "utf-8")
    return target


def _files(
    folder: Traversable, parts: tuple[str, ...]
) -> list[tuple[tuple[str, ...], Traversable]]:
    found: list[tuple[tuple[str, ...], Traversable]] = []
    for entry in folder.iterdir():
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            found.extend(_files(entry, (*parts, entry.name)))
        elif entry.name.endswith(SUFFIX):
            found.append(((*parts, entry.name), entry))
    return found


def _fill(text: str, substitutions: dict[str, str]) -> str:
    for placeholder, value in substitutions.items():
        text = text.replace(placeholder, value)
    return text
