"""A plugin author's review (4): a strategy called ``test-...`` makes ``class TestX``,
which the generated tests import; pytest must not take it for a test class."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ctxwindow_scaffold import create_plugin, plugin_names


def test_a_class_named_like_a_test_class_is_not_collected_by_pytest(tmp_path: Path) -> None:
    assert plugin_names("test-x").class_name == "TestX"
    package = create_plugin("test-x", tmp_path)
    source = (package / "src" / "ctxwindow_test_x" / "__init__.py").read_text(encoding="utf-8")
    assert "    __test__ = False" in source
    compile(source, "__init__.py", "exec")
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=package,
        env={"PYTHONPATH": str(package / "src"), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "cannot collect test class 'TestX'" not in collected.stdout + collected.stderr
    assert collected.returncode == 0, collected.stdout + collected.stderr


def test_another_name_gets_no_marker(tmp_path: Path) -> None:
    package = create_plugin("recent-first", tmp_path)
    source = (package / "src" / "ctxwindow_recent_first" / "__init__.py").read_text("utf-8")
    assert "__test__" not in source
