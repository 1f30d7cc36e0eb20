"""The plugin tutorial's package, ``examples/ctxwindow-recency-decay``, passes its tests,
and every file the tutorial pages include (``--8<--`` snippet lines) exists.

The package is installed (editable, no dependencies) into a fresh virtual environment
in ``tmp_path`` that sees this environment's packages through a ``.pth`` file, so the
environment running these tests is left as it was.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import ctxwindow

#: The fixture package_tests (tests/support, on pytest's pythonpath).
pytest_plugins = ["package_tests"]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "examples" / "ctxwindow-recency-decay"
PAGES = ROOT / "docs" / "plugins"
SNIPPET = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$', re.MULTILINE)


def test_tutorial_package_passes_its_tests(package_tests: Any) -> None:
    result = package_tests(PACKAGE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout and "failed" not in result.stdout


@pytest.mark.parametrize("page", ["tutorial.md", "testing.md", "extension-points.md"])
def test_pages_include_code_from_real_files(page: str) -> None:
    text = (PAGES / page).read_text(encoding="utf-8")
    included = SNIPPET.findall(text)
    assert included, f"{page} includes no code from the repository"
    missing = [path for path in included if not (ROOT / path.split(":")[0]).is_file()]
    assert not missing, f"{page} includes files that do not exist: {missing}"


def test_tutorial_includes_every_file_of_its_package() -> None:
    text = (PAGES / "tutorial.md").read_text(encoding="utf-8")
    included = {path.split(":")[0] for path in SNIPPET.findall(text)}
    files = {
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*")
        if path.is_file() and path.suffix in (".py", ".toml") and "__pycache__" not in path.parts
    }
    assert files <= included, f"tutorial.md leaves out {sorted(files - included)}"


def test_environment_page_names_every_variable() -> None:
    from ctxwindow import _plugins

    text = (PAGES / "environment.md").read_text(encoding="utf-8")
    for variable in (_plugins.LOAD_ENV, _plugins.DISABLE_ENV, "CTXWINDOW_DEBUG"):
        assert variable in text


def test_extension_points_page_names_every_hook() -> None:
    from ctxwindow import hookspecs

    text = (PAGES / "extension-points.md").read_text(encoding="utf-8")
    hooks = [name for name in dir(hookspecs) if name.startswith("register_")]
    assert len(hooks) == 8  # a new hook: add it to the page, then count it here
    for hook in hooks:
        assert f"`{hook}`" in text, hook


def test_extension_point_examples_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The examples of extension-points.md, registered as one plugin and used by name."""
    import importlib.util
    import json

    from ctxwindow._cli import main

    spec = importlib.util.spec_from_file_location(
        "ctxwindow_docs_extensions", PAGES / "snippets" / "extensions.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ctxwindow.register_plugin(module, "docs-extensions")
    try:
        assert not [p for p in ctxwindow.plugin_problems() if "docs-extensions" in p]
        counter = ctxwindow.get_counter("words:3")
        assert counter.count_message(ctxwindow.Message.from_dict(MESSAGE)) == 3 + 4
        with pytest.raises(ctxwindow.InvalidOption, match="whole number"):
            ctxwindow.get_counter("words:x")

        vectors = ctxwindow.get_embedder("hashing:64").embed(["a b", "a b", ""])
        assert vectors.shape == (3, 64)
        assert float(vectors[0] @ vectors[1]) == pytest.approx(1.0)

        summarizer: Any = ctxwindow.get_summarizer("first-lines")
        request = ctxwindow.SummaryRequest(None, ["one\ntwo", "three"], 50, counter)
        assert summarizer.summarize(request).text == "one\nthree"

        history = ctxwindow.Conversation(CHAT).view(counter, 1000)
        scores = ctxwindow.get_importance_scorer("questions").score(history)
        assert list(scores) == [0.0, 1.0, 0.0, 1.0]

        chat = tmp_path / "chat.json"
        chat.write_text(json.dumps(CHAT), encoding="utf-8")
        assert main(["count", str(chat), "--counter", "words:3"]) == 0
        counted = json.loads(capsys.readouterr().out)
        assert counted == {"counter": "words:3", "total": 20, "messages": [5, 6, 4, 5]}
    finally:
        ctxwindow.unregister_plugin("docs-extensions")


MESSAGE = {"role": "user", "content": "is this four words"}
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Is it raining?"},
    {"role": "assistant", "content": "No."},
    {"role": "user", "content": "Will it?"},
]
