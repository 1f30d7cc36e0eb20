"""mkdocs-gen-files script: write the generated pages (see reference.py) into the site."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import mkdocs_gen_files

HERE = Path(__file__).resolve().parent


def _reference():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("ctxwindow_docs_reference", HERE / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


reference = _reference()
for path, text in reference.pages().items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(text)
