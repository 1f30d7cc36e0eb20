"""How the ONNX encoder calls the model: long texts a few at a time (few tokens per call),
short ones together, and a text's vector never depends on the texts run beside it; the
int8 model one text per call (``onnx-int8-solo``, the default), bit for bit whatever it
is embedded with, and close to torch's."""

from __future__ import annotations

import os
import signal
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


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8-solo"])
def test_a_long_history_is_tokenized_a_pass_at_a_time(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold history's Encodings are held a pass at a time, not all at once (about 1 GB
    at 100,000 messages), and give the vectors one pass over all of them gives."""
    texts = SHORT + LONG[:3] + SOLO_TEXTS
    embedder = SentenceTransformerEmbedder(backend=backend)
    encoder = embedder._loaded()
    assert isinstance(encoder, onnx_backend.OnnxEncoder)
    whole = encoder.encode(texts, batch_size=64)
    sizes: list[int] = []
    tokenizer = encoder.tokenizer

    class Counting:
        def encode_batch(self, batch: list[str]) -> Any:
            sizes.append(len(batch))
            return tokenizer.encode_batch(batch)

    monkeypatch.setattr(onnx_backend, "TEXTS_PER_PASS", 4)
    monkeypatch.setattr(encoder, "tokenizer", Counting())
    passes = encoder.encode(texts, batch_size=64)
    assert sizes == [4] * (len(texts) // 4) + ([len(texts) % 4] if len(texts) % 4 else [])
    assert np.abs(passes - whole).max() < 1e-6
    if backend == "onnx-int8-solo":
        assert np.array_equal(passes, whole)  # one text per call: bit for bit


def test_the_export_runs_attention_as_plain_steps() -> None:
    """Eager attention: no NaN guards of PyTorch's fused attention left in the graph."""
    import onnx

    SentenceTransformerEmbedder(backend="onnx").preload()
    folders = [f for f in onnx_backend.exports_folder().iterdir() if not f.name.startswith(".")]
    (folder,) = folders
    ops = {node.op_type for node in onnx.load(str(folder / onnx_backend.FP32_FILE)).graph.node}
    assert "Softmax" in ops
    assert "IsNaN" not in ops


# -- the int8 model one text per call (onnx-int8-solo) ------------------------------------
SOLO_TEXTS = [
    "What did we decide about the hotel budget?",
    "The morning flight to Lisbon leaves at 7:40 from terminal 2.",
    "Überprüfe die Zahlung: 42 € — fertig 🚀",
    "ok",
    "",
    "tool output " * 300,  # longer than the model reads: truncated alike
]
OTHERS = [
    f"step {i}: tool output with rows {' '.join(map(str, range(i, i + 40 * i)))}" for i in range(6)
] + [f"did the hotel budget change for day {i}?" for i in range(12)]


@pytest.fixture(scope="module")
def solo() -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder(backend="onnx-int8-solo")
    embedder.preload()
    return embedder


def test_a_vector_is_the_same_whatever_it_is_embedded_with(
    solo: SentenceTransformerEmbedder,
) -> None:
    alone = np.concatenate([solo.embed([text]) for text in SOLO_TEXTS])
    rng = np.random.default_rng(0)
    for batch_size in (1, 3, 64):
        mixed = SOLO_TEXTS + OTHERS
        order = rng.permutation(len(mixed))
        solo.batch_size = batch_size
        vectors = solo.embed([mixed[i] for i in order])
        back = vectors[np.argsort(order)][: len(SOLO_TEXTS)]
        assert np.array_equal(back, alone)  # bit for bit, not merely close
    assert np.allclose(np.linalg.norm(alone, axis=1), 1.0, atol=1e-6)


def test_solo_calls_run_side_by_side_to_the_same_vectors() -> None:
    """Solo calls run single-threaded, one per core at once: the vectors are those of one
    call after another, bit for bit, however many run side by side."""
    texts = SOLO_TEXTS + OTHERS
    one = SentenceTransformerEmbedder(backend="onnx-int8-solo", threads=1)
    two = SentenceTransformerEmbedder(backend="onnx-int8-solo", threads=2)
    encoder = two._loaded()
    assert isinstance(encoder, onnx_backend.OnnxEncoder) and encoder.workers == 2
    assert np.array_equal(one.embed(texts), two.embed(texts))
    assert encoder._pool is not None  # they did run on the pool


def test_each_text_runs_alone_without_padding(
    solo: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoder = solo._loaded()
    assert isinstance(encoder, onnx_backend.OnnxEncoder)
    recording = RecordingSession(encoder.session)
    monkeypatch.setattr(encoder, "session", recording)
    texts = SOLO_TEXTS[:3] + OTHERS[:4]
    encoder.encode(texts, batch_size=64)
    lengths = sorted(len(encoder.tokenizer.encode(text).ids) for text in texts)
    assert sorted(length for _, length in recording.shapes) == lengths
    assert all(rows == 1 for rows, _ in recording.shapes)


def test_close_to_torch_and_cached_under_its_own_name(solo: SentenceTransformerEmbedder) -> None:
    torch_vectors = SentenceTransformerEmbedder(backend="torch").embed(SOLO_TEXTS)
    vectors = solo.embed(SOLO_TEXTS)
    assert (vectors * torch_vectors).sum(axis=1).min() > 0.97
    assert np.abs(vectors - torch_vectors).max() > 1e-4  # really quantized
    assert solo.name == "sentence-transformers:all-MiniLM-L6-v2+int8-solo"
    names = {SentenceTransformerEmbedder(backend=b).name for b in ("torch", "onnx-int8")}
    assert solo.name not in names


def test_batched_int8_depends_on_its_neighbours() -> None:
    """Why solo exists: one activation scale per call moves a text with its batch."""
    batched = SentenceTransformerEmbedder(backend="onnx-int8")
    alone = batched.embed(SOLO_TEXTS[:2])
    together = batched.embed([*SOLO_TEXTS[:2], OTHERS[5]])[:2]
    assert np.abs(together - alone).max() > 1e-4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_process_forked_after_texts_ran_side_by_side_embeds_them_too() -> None:
    """The pool that runs texts side by side was the parent's: a child forked after it
    was made (gunicorn's --preload after a warm-up, a fork pool) has none of its
    threads, and its first batch waited for them for good."""
    embedder = SentenceTransformerEmbedder(backend="onnx-int8-solo")
    solo = embedder.embed(SHORT)  # the pool made, in this process
    encoder = embedder._encoder
    assert isinstance(encoder, onnx_backend.OnnxEncoder)
    if encoder.workers == 1:
        pytest.skip("one worker: no pool to fork")
    child = os.fork()
    if child == 0:  # the child: nothing but its batch, then out (no pytest teardown)
        signal.alarm(60)  # a hang is killed, and seen below as a signal
        try:
            again = embedder.embed(SHORT)
            os._exit(0 if np.array_equal(again, solo) else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(child, 0)
    assert not os.WIFSIGNALED(status), "the forked process's batch never ran"
    assert os.WEXITSTATUS(status) == 0, f"the child's vectors differ ({status})"
