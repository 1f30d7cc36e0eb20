"""docs/adapters.md cannot go stale: every Python block on the page runs as shown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[3] / "docs" / "adapters.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def test_the_page_has_an_example_per_framework() -> None:
    assert len(BLOCKS) == 5
    for module in ("openai", "openai_responses", "anthropic", "langchain", "pydantic_ai"):
        imports = (f"ctxwindow_adapters.{module} import", f"ctxwindow_adapters import {module}")
        assert any(name in block for block in BLOCKS for name in imports), module


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_example_runs(block: str) -> None:
    exec(compile(block, str(PAGE), "exec"), {})
