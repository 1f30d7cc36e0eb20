"""``import ctxwindow`` is light: the errors load with the package, every other public
name loads its module on first use (PEP 562), and the plugin host's dependencies load
with the first plugin lookup. Each check runs in a fresh interpreter (``sys.modules``
of this one holds whatever other tests imported); none is timed."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import ctxwindow

#: What ``import ctxwindow`` must not import: the event loop and TLS (slow, and unsafe
#: to import in some hosts), the plugin host's dependencies, and the standard library
#: modules only some names need (dataclasses and inspect come with the first type).
DEFERRED = (
    "asyncio",
    "ssl",
    "concurrent.futures",
    "importlib.metadata",
    "tomllib",
    "pluggy",
    "logging",
    "traceback",
    "pathlib",
    "json",
    "urllib.parse",
    "numbers",
    "dataclasses",
    "inspect",
)
#: The modules of the package that ``import ctxwindow`` loads.
EAGER = {"ctxwindow", "ctxwindow.errors"}


def run(program: str, **environment: str) -> dict[str, object]:
    """The dict that ``program`` prints (its repr: printing JSON would import json), run
    in a fresh interpreter with ``environment`` added to this one's."""
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **environment},
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = ast.literal_eval(done.stdout)
    return found


def test_import_ctxwindow_loads_none_of_what_it_defers() -> None:
    found = run(
        "import sys, ctxwindow\n"
        f"deferred = {DEFERRED!r}\n"
        "print(repr({\n"
        "    'deferred': [m for m in deferred if m in sys.modules],\n"
        "    'package': sorted(m for m in sys.modules if m.split('.')[0] == 'ctxwindow'),\n"
        "}))"
    )
    assert found["deferred"] == []
    assert set(found["package"]) == EAGER  # type: ignore[arg-type]


def test_the_names_work_after_a_plain_import() -> None:
    """The one-call API and the plugin functions, first used after ``import ctxwindow``:
    each loads what it needs (and still no asyncio, ssl or thread pool: the installed
    plugins, which may import them, are kept out)."""
    found = run(
        "import sys, ctxwindow\n"
        "from ctxwindow.kit import recent_units\n"
        "class Newest:  # ctxwindow.testing's imports pytest, and pytest asyncio\n"
        "    name = 'newest'\n"
        "    def choose(self, history):\n"
        "        selection = history.selection()\n"
        "        for unit in recent_units(history, history.budget - history.must_keep_tokens):\n"
        "            selection.keep(unit, 'newest')\n"
        "        return selection\n"
        "class Plugin:\n"
        "    @ctxwindow.hookimpl\n"
        "    def register_strategies(self, register):\n"
        "        register(Newest)\n"
        "ctxwindow.register_plugin(Plugin(), 'testing', 'ctxwindow-testing')\n"
        "messages = [{'role': 'user', 'content': 'hello ' * 50}, "
        "{'role': 'assistant', 'content': 'hi'}, {'role': 'user', 'content': 'and now?'}]\n"
        "window = ctxwindow.select(messages, budget=40, strategy='newest')\n"
        "print(repr({\n"
        "    'kept': [messages.index(m) for m in window.messages],\n"
        "    'window': type(window) is ctxwindow.Window,\n"
        "    'counter': ctxwindow.get_counter().name,\n"
        "    'strategies': [s['name'] for s in ctxwindow.describe_strategies()],\n"
        "    'plugins': [p.name for p in ctxwindow.get_plugins()],\n"
        "    'hookimpl': type(ctxwindow.hookimpl).__name__,\n"
        "    'version': isinstance(ctxwindow.__version__, str),\n"
        "    'loaded': [m for m in ('asyncio', 'ssl', 'concurrent.futures') if m in sys.modules],\n"
        "}))",
        CTXWINDOW_LOAD_PLUGINS="",
    )
    assert found["kept"] == [1, 2]
    assert found["window"] is True
    assert found["counter"] == "approx"
    assert "newest" in found["strategies"]  # type: ignore[operator]
    assert "testing" in found["plugins"]  # type: ignore[operator]
    assert found["hookimpl"] == "HookimplMarker"
    assert found["version"] is True
    assert found["loaded"] == []


def test_every_public_name_is_its_modules_object() -> None:
    """``from ctxwindow import *`` and each ``ctxwindow.X`` give the defining module's
    object, and ``dir(ctxwindow)`` lists every public name before it is used."""
    found = run(
        "import sys, ctxwindow\n"
        "listed = set(dir(ctxwindow))\n"
        "namespace = {}\n"
        "exec('from ctxwindow import *', namespace)\n"
        "print(repr({\n"
        "    'unlisted': sorted(set(ctxwindow.__all__) - listed),\n"
        "    'star': sorted(set(ctxwindow.__all__) - set(namespace)),\n"
        "    'same': all(namespace[n] is getattr(ctxwindow, n) for n in ctxwindow.__all__),\n"
        "}))"
    )
    assert found == {"unlisted": [], "star": [], "same": True}
    for name in ctxwindow.__all__:
        value = getattr(ctxwindow, name)
        module = getattr(value, "__module__", None)
        if isinstance(module, str) and module.startswith("ctxwindow."):
            assert getattr(sys.modules[module], name, value) is value, name


def test_the_type_checking_imports_are_the_lazy_names() -> None:
    """What type checkers and the docs read (the imports under TYPE_CHECKING) is what
    ``__getattr__`` loads, name for name and module for module."""
    tree = ast.parse(Path(ctxwindow.__file__).read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )
    imported: dict[str, tuple[str, ...]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None
        imported[node.module] = (*imported.get(node.module, ()), *(a.name for a in node.names))
    assert imported == ctxwindow._LAZY_MODULES
    eager = {name for name in ctxwindow.__all__ if name in vars(ctxwindow.errors)}
    lazy = {name for names in imported.values() for name in names}
    assert lazy | eager == set(ctxwindow.__all__)
    assert not lazy & eager


def test_submodules_are_attributes_as_before() -> None:
    """``import ctxwindow`` once imported every core module, so ``ctxwindow.kit.X`` worked
    without ``import ctxwindow.kit``: it still does; a name that is no submodule is an
    AttributeError, and ``__main__`` (which runs the CLI) is never imported this way."""
    found = run(
        "import sys, ctxwindow\n"
        "print(repr({\n"
        "    'kit': ctxwindow.kit.redact('https://u:secret@example.com/') ,\n"
        "    'plugins': callable(ctxwindow._plugins.plugins),\n"
        "    'missing': hasattr(ctxwindow, 'no_such_module'),\n"
        "    'main': hasattr(ctxwindow, '__main__') or 'ctxwindow.__main__' in sys.modules,\n"
        "}))"
    )
    assert found == {
        "kit": "https://u:***@example.com/",
        "plugins": True,
        "missing": False,
        "main": False,
    }


def test_the_ranking_kit_without_numpy_names_the_extra() -> None:
    """numpy is the ``ranking`` extra's: without it ``import ctxwindow`` and the kit's
    other modules work, and importing the ranking kit says what to install (not a bare
    "No module named 'numpy'")."""
    found = run(
        "import sys\n"
        "sys.modules['numpy'] = None  # importing numpy raises ModuleNotFoundError\n"
        "import ctxwindow, ctxwindow.kit\n"
        "try:\n"
        "    import ctxwindow.kit.ranking\n"
        "except ModuleNotFoundError as error:\n"
        "    said, name = str(error), error.name\n"
        "print(repr({'said': said, 'name': name, 'kit': 'ctxwindow.kit' in sys.modules}))\n"
    )
    assert found["kit"] is True
    assert found["name"] == "numpy"
    said = str(found["said"])
    assert said.startswith("ctxwindow.kit.ranking needs numpy")
    assert said.endswith("pip install 'ctxwindow[ranking]'")
