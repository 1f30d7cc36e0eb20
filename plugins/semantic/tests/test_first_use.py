"""What a new user meets first: configuring checks the model's files without loading
torch, the model loads once on first use (even under 8 threads), and a long first
embedding draws a progress bar on a terminal only."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow.errors import EmbedderUnavailable
from ctxwindow_semantic import embedder as embedder_module
from ctxwindow_semantic.embedder import PROGRESS_ENV, SentenceTransformerEmbedder

pytestmark = pytest.mark.usefixtures("ctxwindow_cache_home")


def _fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


def test_configuring_semantic_loads_no_model_runtime() -> None:
    done = _fresh_python(
        "import sys, ctxwindow\n"
        "ctxwindow.from_config({'strategy': 'semantic', 'budget': 1000, 'cache': 'memory'})\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'onnxruntime', "
        "'transformers') if m in sys.modules))\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_missing_model_fails_at_configuration_without_torch(tmp_path: Path) -> None:
    done = _fresh_python(
        "import sys, ctxwindow\n"
        "from ctxwindow.errors import EmbedderUnavailable\n"
        "try:\n"
        f"    ctxwindow.from_config({{'strategy': 'semantic', 'budget': 1000, "
        f"'embedder': 'sentence-transformers:{tmp_path}'}})\n"
        "except EmbedderUnavailable as error:\n"
        "    print('refused:', error)\n"
        "print('torch' in sys.modules)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "holds no model" in done.stdout
    assert done.stdout.strip().endswith("False")


def test_a_missing_folder_fails_at_configuration() -> None:
    with pytest.raises(EmbedderUnavailable, match="no model folder"):
        ctxwindow.from_config(
            {"strategy": "semantic", "budget": 1000, "embedder": "sentence-transformers:/no/model"}
        )


def test_a_hub_model_not_in_the_cache_fails_at_configuration_when_offline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(EmbedderUnavailable, match="not in the local hub cache"):
        SentenceTransformerEmbedder("someone/a-model-nobody-has")


def test_eight_threads_at_once_load_the_model_once(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = SentenceTransformerEmbedder()
    opened = []
    real_open = SentenceTransformerEmbedder._open

    def counted(self: SentenceTransformerEmbedder) -> Any:
        opened.append(threading.get_ident())
        return real_open(self)

    monkeypatch.setattr(SentenceTransformerEmbedder, "_open", counted)
    start = threading.Barrier(8)
    shapes: list[tuple[int, ...]] = []

    def use() -> None:
        start.wait()
        shapes.append(embedder.embed([f"thread {threading.get_ident()}"]).shape)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(opened) == 1
    assert shapes == [(1, 384)] * 8


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def small_batches() -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder(batch_size=4)
    embedder.preload()
    return embedder


@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_long_work_draws_a_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    pytest.importorskip("onnxruntime")
    embedder = SentenceTransformerEmbedder(batch_size=4, backend=backend)
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    embedder.embed([f"message {i}" for i in range(20)])
    assert "ctxwindow: embedding" in terminal.getvalue()
    assert "/20 [" in terminal.getvalue()


def test_no_bar_when_stderr_is_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch, small_batches: SentenceTransformerEmbedder
) -> None:
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    small_batches.embed([f"note {i}" for i in range(20)])
    assert log.getvalue() == ""


def test_no_bar_when_turned_off_or_for_one_batch(
    monkeypatch: pytest.MonkeyPatch, small_batches: SentenceTransformerEmbedder
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv(PROGRESS_ENV, "0")
    small_batches.embed([f"line {i}" for i in range(20)])
    monkeypatch.delenv(PROGRESS_ENV)
    small_batches.embed(["one", "small", "batch"])
    assert terminal.getvalue() == ""
    assert embedder_module.progress_wanted()  # on, had there been more than a batch
