"""The shape of the core: a light import, no import cycles, a public line, no plugin named.

The import graph is read from the source (``ast``), so these hold for every module,
imported by a test or not. Imports under ``if TYPE_CHECKING:`` are for annotations only
and never run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import ctxwindow

SOURCE = Path(ctxwindow.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[2]
#: What a plugin may import: the package itself and its public modules.
PUBLIC = (
    "ctxwindow",
    "ctxwindow.errors",
    "ctxwindow.hookspecs",
    "ctxwindow.testing",
    "ctxwindow.kit",
    "ctxwindow.kit.ranking",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path) -> Iterator[tuple[str, bool, int]]:
    """(module imported, at module level?, line) for each ctxwindow import that runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    known = modules()

    def visit(node: ast.AST, top: bool) -> Iterator[tuple[str, bool, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                yield from (found for stmt in child.orelse for found in visit(stmt, top))
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "ctxwindow":
                        yield alias.name, top, child.lineno
            elif isinstance(child, ast.ImportFrom):  # the core has no relative imports
                base = child.module or ""
                if base.split(".")[0] == "ctxwindow":
                    for alias in child.names:  # `from ctxwindow import _tokens` imports a module
                        candidate = f"{base}.{alias.name}"
                        yield (candidate if candidate in known else base), top, child.lineno
            inner = top and not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            yield from visit(child, inner)

    yield from visit(tree, True)


def graph() -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for target, top, _ in imports(path):
            if top and target in known and target != name:
                edges[name].add(target)
    return edges


def test_import_ctxwindow_imports_no_asyncio_ssl_or_optional_dependency() -> None:
    code = (
        "import sys, ctxwindow\n"
        "heavy = ('asyncio', 'ssl', 'sqlite3', 'numpy', 'tiktoken', 'tokenizers', 'redis',"
        " 'pytest', 'hypothesis', 'argparse', 'importlib.metadata', 'concurrent.futures')\n"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == ""


def test_the_core_import_graph_has_no_cycle() -> None:
    edges = graph()
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> None:
        if node in path:
            cycle = [*path[path.index(node) :], node]
            pytest.fail(f"import cycle: {' -> '.join(cycle)}")
        if node in done:
            return
        for target in sorted(edges[node]):
            walk(target, [*path, node])
        done.add(node)

    for name in edges:
        walk(name, [])


def test_no_function_local_import_of_ctxwindow_modules_without_a_reason() -> None:
    unexplained = []
    for name, path in modules().items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for target, top, line in imports(path):
            if not top and "#" not in lines[line - 1]:
                unexplained.append(f"{name}:{line} imports {target}")
    assert unexplained == []


def test_every_module_is_public_or_marked_internal() -> None:
    public = {
        name for name in modules() if not any(part.startswith("_") for part in name.split("."))
    }
    allowed = {name for name in public if name == "ctxwindow" or name.startswith(PUBLIC[1:])}
    assert public == allowed, sorted(public - allowed)


def test_plugins_import_only_the_public_modules() -> None:
    found = []
    folders = [*ROOT.glob("plugins/*/src"), *ROOT.glob("examples/*/src")]
    for path in sorted(p for folder in folders for p in folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                if name.split(".")[0] != "ctxwindow":
                    continue
                if (
                    not any(name == p or name.startswith(f"{p}.") for p in PUBLIC[1:])
                    and (name != "ctxwindow")
                ) or any(part.startswith("_") for part in name.split(".")):
                    found.append(f"{path.relative_to(ROOT)}: {name}")
    assert found == []


def test_the_core_names_no_plugin() -> None:
    """Plugins are named only in the table of install hints, which is data."""
    first_party = [folder.name for folder in ROOT.glob("plugins/*") if folder.is_dir()]
    assert first_party, "run from the repository"
    named = []
    for name, path in modules().items():
        text = path.read_text(encoding="utf-8")
        for plugin in first_party:
            for spelling in (f"ctxwindow-{plugin}", f"ctxwindow_{plugin}"):
                if spelling in text:
                    named.append(f"{name}: {spelling}")
    assert named == []
