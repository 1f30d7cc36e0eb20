"""How the ONNX encoder calls the model: long texts a few at a time (few tokens per call),
short ones together, and a text's vector never depends on the texts run beside it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ctxwindow_semantic import onnx_backend
from ctxwindow_semantic.embedder import SentenceTransformerEmbedder

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.usefixtures("ctxwindow_cache_home")

LONG = [
    f"step {i}: tool output with rows {' '.join(map(str, range(i, i + 300)))}" for i in range(9)
]
SHORT = [f"did the hotel budget change for day {i}?" for i in range(10)]


class RecordingSession:
    """The real ONNX Runtime session, noting the shape of every call it runs."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.shapes: list[tuple[int, int]] = []

    def run(self, outputs: Any, feed: dict[str, np.ndarray]) -> Any:
        self.shapes.append(feed["input_ids"].shape)
        return self.session.run(outputs, feed)


@pytest.fixture(scope="module")
def encoder() -> onnx_backend.OnnxEncoder:
    embedder = SentenceTransformerEmbedder(backend="onnx")
    embedder.preload()
    assert isinstance(embedder._encoder, onnx_backend.OnnxEncoder)
    return embedder._encoder


@pytest.fixture
def recorded(
    encoder: onnx_backend.OnnxEncoder, monkeypatch: pytest.MonkeyPatch
) -> RecordingSession:
    recording = RecordingSession(encoder.session)
    monkeypatch.setattr(encoder, "session", recording)
    return recording


def test_long_texts_go_a_few_tokens_per_call(
    encoder: onnx_backend.OnnxEncoder, recorded: RecordingSession
) -> None:
    encoder.encode(LONG, batch_size=64)
    assert sum(rows for rows, _ in recorded.shapes) == len(LONG)
    assert len(recorded.shapes) > 1
    assert all(rows * length <= onnx_backend.TOKENS_PER_CALL for rows, length in recorded.shapes)


def test_short_texts_share_a_call_up_to_the_batch_size(
    encoder: onnx_backend.OnnxEncoder, recorded: RecordingSession
) -> None:
    encoder.encode(SHORT, batch_size=4)
    assert [rows for rows, _ in recorded.shapes] == [4, 4, 2]
    assert all(length < 20 for _, length in recorded.shapes)  # padded to the call's longest


def test_a_vector_does_not_depend_on_its_neighbours(encoder: onnx_backend.OnnxEncoder) -> None:
    mixed = [LONG[0], SHORT[0], LONG[1], SHORT[1] * 5, ""]
    together = encoder.encode(mixed, batch_size=64)
    alone = np.concatenate([encoder.encode([text], batch_size=1) for text in mixed])
    assert np.abs(together - alone).max() < 1e-6
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-6)


def test_the_export_runs_attention_as_plain_steps() -> None:
    """Eager attention: no NaN guards of PyTorch's fused attention left in the graph."""
    import onnx

    SentenceTransformerEmbedder(backend="onnx").preload()
    folders = [f for f in onnx_backend.exports_folder().iterdir() if not f.name.startswith(".")]
    (folder,) = folders
    ops = {node.op_type for node in onnx.load(str(folder / onnx_backend.FP32_FILE)).graph.node}
    assert "Softmax" in ops
    assert "IsNaN" not in ops
