"""The scripts of docs_gen/ (the docs' generators, a folder of scripts rather than a
package), loaded by path for the tests that check the docs against them.

Test infrastructure of this repository, on pytest's ``pythonpath``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

FOLDER = Path(__file__).resolve().parents[2] / "docs_gen"


def load(name: str) -> ModuleType:
    """``docs_gen/<name>.py`` as a module (a fresh one each call)."""
    spec = importlib.util.spec_from_file_location(f"ctxwindow_docs_{name}", FOLDER / f"{name}.py")
    assert spec is not None and spec.loader is not None, f"no docs_gen/{name}.py"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
