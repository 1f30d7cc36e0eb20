"""Shared helpers for the core tests, which stand on the core alone: the strategies they
run are ctxwindow.testing's own, registered by the autouse fixture below (no plugin
needs to be installed)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import ApproxCounter, Message
from ctxwindow.testing.strategies import FAULTY, BareNewest, Newest


class CountingCounter:
    """An approx counter that records every message it is asked to count."""

    def __init__(self, name: str = "counting") -> None:
        self.name = name
        self._inner = ApproxCounter()
        self.counted: list[Message] = []

    def count_text(self, text: str) -> int:
        return self._inner.count_text(text)

    def count_message(self, message: Message) -> int:
        self.counted.append(message)
        return self._inner.count_message(message)

    @property
    def calls(self) -> int:
        return len(self.counted)


@pytest.fixture
def counting() -> CountingCounter:
    return CountingCounter()


@pytest.fixture
def counting_factory() -> type[CountingCounter]:
    """The class itself, to build several independent counters in one test."""
    return CountingCounter


#: The distribution the core tests' strategies are registered as.
TESTING = "ctxwindow-testing"
#: The strategies every core test can name: the reference ones and the faulty ones.
STRATEGIES = (Newest, BareNewest, *FAULTY)


@pytest.fixture(autouse=True)
def _test_strategies(ctxwindow_register: Any) -> None:
    """``newest``, ``bare-newest`` and the ``faulty-*`` strategies, registered as
    :data:`TESTING` for each test."""
    ctxwindow_register(*STRATEGIES, name="testing", distribution=TESTING)


#: A ``python -c`` program that registers the same strategies, then runs the CLI with
#: its arguments: the CLI as a user runs it, without installing a plugin.
CLI = (
    "import sys, ctxwindow; from ctxwindow._cli import main; "
    "from ctxwindow.testing.pytest_plugin import _Strategies; "
    "from ctxwindow.testing.strategies import FAULTY, BareNewest, Newest; "
    "plugin = _Strategies((Newest, BareNewest, *FAULTY)); "
    f"ctxwindow.register_plugin(plugin, 'testing', {TESTING!r}); "
    "sys.exit(main(sys.argv[1:]))"
)


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_cli(*args, stdin=None)``: ``ctxwindow ARGS`` in a new process, as a user runs
    it, with the test strategies registered; the finished process."""

    def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", CLI, *args],
            input=stdin.decode() if stdin is not None else None,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run


#: The distribution hidden when every first-party plugin is installed.
HIDDEN = "ctxwindow-sliding"


@pytest.fixture
def install_advice(uninstalled_first_party: str) -> str:
    """What the UnknownStrategy for that strategy tells the user to do: install it, or,
    when the fixture hid it, which variable kept it out (the real uninstall is tested in
    tests/test_ecosystem.py)."""
    import os

    if os.environ.get("CTXWINDOW_DISABLE_PLUGINS") == HIDDEN:
        return f"{HIDDEN} (CTXWINDOW_DISABLE_PLUGINS)"
    return f"pip install ctxwindow-{uninstalled_first_party}"


@pytest.fixture
def uninstalled_first_party(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A first-party strategy that is not installed here (``sliding``); when it is, it
    is hidden with CTXWINDOW_DISABLE_PLUGINS (for this process and the CLI runs it
    starts)."""
    installed = {entry["name"] for entry in ctxwindow.describe_strategies()}
    if "sliding" not in installed:
        yield "sliding"
        return
    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", HIDDEN)
    ctxwindow.reload_plugins()
    try:
        yield "sliding"
    finally:
        monkeypatch.delenv("CTXWINDOW_DISABLE_PLUGINS")
        ctxwindow.reload_plugins()


#: ``install(distribution, module, source, entry_points, submodules=None)``.
Install = Callable[..., str]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """``install(distribution, module, source, entry_points, submodules=None)``: a
    distribution installed on the path for one test (its dist-info with ``ctxwindow``
    entry points naming ``module``, and the module, or a package when ``submodules``
    are given), as pip would leave it; the plugins are loaded again."""
    modules: list[str] = []

    def installed(
        distribution: str,
        module: str,
        source: str,
        entry_points: list[str],
        submodules: dict[str, str] | None = None,
    ) -> str:
        if submodules is None:
            (tmp_path / f"{module}.py").write_text(source, encoding="utf-8")
        else:  # a package: ``source`` its __init__.py
            (tmp_path / module).mkdir()
            for name, text in {"__init__": source, **submodules}.items():
                (tmp_path / module / f"{name}.py").write_text(text, encoding="utf-8")
        info = tmp_path / f"{distribution.replace('-', '_')}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n", encoding="utf-8"
        )
        lines = "".join(f"{name} = {module}\n" for name in entry_points)
        (info / "entry_points.txt").write_text(f"[ctxwindow]\n{lines}", encoding="utf-8")
        modules.append(module)
        ctxwindow.reload_plugins()
        return distribution

    monkeypatch.syspath_prepend(str(tmp_path))
    yield installed
    monkeypatch.undo()
    for module in modules:
        for loaded in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
            sys.modules.pop(loaded, None)
    ctxwindow.reload_plugins()
