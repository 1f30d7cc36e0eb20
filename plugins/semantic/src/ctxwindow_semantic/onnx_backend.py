"""A sentence-transformers model run by ONNX Runtime: exported once, then no torch.

The whole model (transformer, pooling, normalisation, any dense layers) is exported with
``torch.onnx.export`` at first use and kept in the user cache folder, with its fast
tokenizer; ``int8`` adds a dynamically quantized copy (onnxruntime's
``quantize_dynamic``). An export is checked against the PyTorch model on probe texts
before it is kept, so a model that does not export faithfully is never used.

The int8 copy quantizes each call's activations with one scale for the whole call, so a
text's vector depends on the texts (and padding) run beside it. Run ``solo`` (one text
per call, no padding) it depends on the text alone, bit for bit. A call of one short
text is too small to share between threads, so solo calls run single-threaded, one per
core side by side (`python -m ctxwindow_semantic.bench` times the backends against each
other; see the README).

Why not sentence-transformers' own ``backend="onnx"``: it needs optimum-onnx, which
requires transformers < 4.58 while sentence-transformers 6 requires transformers 5.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ctxwindow.errors import EmbedderUnavailable
from ctxwindow_semantic.cache import default_cache_path

if TYPE_CHECKING:
    import torch
    from tokenizers import Encoding, Tokenizer

logger = logging.getLogger("ctxwindow.semantic")

#: Bumped when the exported files change shape, so older exports are not reused
#: (3: attention exported in its eager form).
EXPORT_FORMAT = 3
FP32_FILE = "model.onnx"
INT8_FILE = "model-int8.onnx"
#: Largest difference an fp32 export may show against PyTorch on the probe texts (the
#: two agree to about 3e-7; more means the graph does not follow the model).
FAITHFUL = 1e-4
PROBES = (
    "hello",
    "  Where is the hotel booking for the 14th of March?  ",
    "Überprüfe die Zahlung — 42 € — und schreibe «fertig» 🚀",
    "word " * 400,  # past the model's length: truncation must match
)
NEEDS = ("onnxruntime", "onnx")
INSTALL_HINT = "pip install 'ctxwindow-semantic[onnx]'"
#: Most tokens (rows x longest row) given to one model call. Long texts go a few at a
#: time: 64 texts of 256 tokens in one call (200 MB of attention scores) ran no faster
#: than PyTorch, while calls of up to 1,024 tokens ran over twice as fast (2 busy cores).
#: Short texts still share a call, up to the embedder's batch size.
TOKENS_PER_CALL = 1024
#: Texts tokenized at a time. A tokenizer's Encoding holds a text's tokens as strings,
#: its offsets and masks: about 10 KB for a 60-token message, so a cold history of
#: 100,000 messages tokenized at once held 1 GB until the last call returned.
TEXTS_PER_PASS = 2048
#: A text longer than this many characters per token the model reads is cut before it
#: is tokenized (a 4 MB tool result took 12 s to tokenize whole, for 256 tokens), then
#: tokenized whole after all when the cut would change its tokens (see :func:`shortened`).
CHARS_PER_TOKEN = 16
_SPACES = " \t\n\r"


class ModelUnavailable(EmbedderUnavailable):
    """The model itself could not be loaded (not the export): no backend can run it."""


def available() -> bool:
    """Whether onnxruntime and onnx are installed, without importing them."""
    return all(importlib.util.find_spec(name) is not None for name in NEEDS)


def exports_folder() -> Path:
    """Where exports live: beside the embedding cache, in the user cache folder."""
    return default_cache_path().parent / "onnx"


def export_key(name: str, fingerprint: str) -> str:
    """The folder name of one model's export: the model and its files, the format, and
    the versions of the tools whose output it is."""
    tools = "|".join(_version(package) for package in ("torch", "sentence-transformers"))
    seen = f"{name}|{fingerprint}|{EXPORT_FORMAT}|{tools}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(seen).hexdigest()[:16]


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "-"


class OnnxEncoder:
    """Embeds texts with an exported model; the tokenizer pads and truncates as the
    model's own did."""

    def __init__(
        self, folder: Path, quantized: bool, threads: int | None, solo: bool = False
    ) -> None:
        try:
            import onnxruntime  # type: ignore[import-untyped]
            from tokenizers import Tokenizer
        except ImportError:
            raise EmbedderUnavailable(
                f"the ONNX backend needs onnxruntime: {INSTALL_HINT}"
            ) from None
        meta = json.loads((folder / "meta.json").read_text())
        self.inputs: list[str] = meta["inputs"]
        self.dimension: int = meta["dimension"]
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.max_length: int = meta["max_length"]
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.no_padding()  # saved with padding to the longest: padded per call here
        self.solo = solo  # one text per call: its vector cannot depend on other texts
        self.pad_id: int = meta["pad_id"]
        self.pad_token: str = meta["pad_token"]
        options = onnxruntime.SessionOptions()
        #: Solo: texts run side by side, one single-threaded call each (a call of one
        #: short text is too small to share between threads: their hand-offs cost it
        #: more than the second core gives), as many at once as there are ``threads``.
        self.workers = (threads or _cores()) if solo else 1
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0  # the process whose threads the pool's are
        if solo:
            options.intra_op_num_threads = 1
        elif threads is not None:
            options.intra_op_num_threads = threads
        options.log_severity_level = 3  # errors only: no warnings in the app's stderr
        # Idle worker threads sleep rather than spin: on a shared CPU the spinning took
        # the cores the next call (and the tokenizer between calls) needed: 1.2x slower.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(
            str(folder / (INT8_FILE if quantized else FP32_FILE)),
            options,
            providers=["CPUExecutionProvider"],
        )

    def encode(
        self,
        texts: Sequence[str],
        batch_size: int,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Unit vectors for ``texts``: tokenized :data:`TEXTS_PER_PASS` at a time, each
        pass run longest first in calls of similar token counts (little padding), of at
        most ``batch_size`` texts and :data:`TOKENS_PER_CALL` tokens (one text per call
        when ``solo``)."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for first in range(0, len(texts), TEXTS_PER_PASS):
            part = texts[first : first + TEXTS_PER_PASS]
            encodings = self.tokenizer.encode_batch(
                shortened(self.tokenizer, self.max_length, part)
            )
            done = out[first : first + len(encodings)]
            if self.solo:
                done[:] = self._each_alone(encodings, progress)
            else:
                self._batched(encodings, batch_size, done, progress)
        return _normalized(out)

    def _batched(
        self,
        encodings: list[Encoding],
        batch_size: int,
        out: np.ndarray,
        progress: Callable[[int], None] | None,
    ) -> None:
        """Run ``encodings`` longest first in calls of similar token counts, into ``out``."""
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
        start = 0
        while start < len(order):
            longest = max(len(encodings[order[start]].ids), 1)
            rows = order[start : start + max(1, min(batch_size, TOKENS_PER_CALL // longest))]
            out[rows] = self._run([encodings[row] for row in rows], longest)
            if progress is not None:
                progress(len(rows))
            start += len(rows)

    def _each_alone(
        self, encodings: list[Encoding], progress: Callable[[int], None] | None
    ) -> np.ndarray:
        """Each text run in a call of its own (no neighbour, no padding), ``workers`` at
        once: ONNX Runtime runs calls side by side, and each text's vector is the same,
        bit for bit, whichever thread runs it."""
        out = np.empty((len(encodings), self.dimension), dtype=np.float32)
        if len(encodings) == 1 or self.workers == 1:  # a turn's new message: no hand-off
            for row, encoding in enumerate(encodings):
                out[row] = self._alone(encoding)
                if progress is not None:
                    progress(1)
            return out
        for row, vector in enumerate(self._workers().map(self._alone, encodings)):
            out[row] = vector
            if progress is not None:
                progress(1)
        return out

    def _workers(self) -> ThreadPoolExecutor:
        """The pool that runs texts side by side, made on first need in this process: a
        process forked after the pool was made (gunicorn's --preload, a fork pool) has
        none of its threads, and work handed to it would wait for good."""
        pid = os.getpid()
        if self._pool is None or self._pool_pid != pid:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="ctxwindow-onnx")
            self._pool_pid = pid
        return self._pool

    def _alone(self, encoding: Encoding) -> np.ndarray:
        vector: np.ndarray = self._run([encoding], max(len(encoding.ids), 1))[0]
        return vector

    def _run(self, encodings: list[Encoding], length: int) -> np.ndarray:
        for encoding in encodings:  # in place: each is run once
            encoding.pad(length, pad_id=self.pad_id, pad_token=self.pad_token)
        columns = {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
        }
        feed = {name: np.asarray(columns[name], dtype=np.int64) for name in self.inputs}
        result: np.ndarray = self.session.run(None, feed)[0]
        return result


def shortened(tokenizer: Tokenizer, max_length: int, texts: Sequence[str]) -> list[str]:
    """``texts``, each long one cut to :data:`CHARS_PER_TOKEN` characters per token the
    model reads, where that keeps its tokens: ``tokenizer`` (truncating at
    ``max_length``) reads ``max_length`` tokens of the cut, all ending before its last
    word (which the cut may have split). Otherwise (mostly spaces, one huge word) the
    text stays whole. The model then sees the very tokens of the whole text."""
    limit = max_length * CHARS_PER_TOKEN
    out = list(texts)
    long = [row for row, text in enumerate(out) if len(text) > limit]
    if not long:
        return out
    cuts = [out[row][:limit] for row in long]
    for row, cut, encoding in zip(long, cuts, tokenizer.encode_batch(cuts), strict=True):
        if len(encoding.ids) >= max_length:
            last_word = max(cut.rfind(space) for space in _SPACES)
            if max(end for _start, end in encoding.offsets) <= last_word:
                out[row] = cut
    return out


def _normalized(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    normalized: np.ndarray = vectors / np.maximum(norms, 1e-12)
    return normalized


def _cores() -> int:
    """The cores this process may run on (its affinity where the OS says)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def exported(folder: Path, quantized: bool) -> bool:
    """Whether ``folder`` already holds a finished export (and its int8 copy if wanted)."""
    files = [FP32_FILE, "meta.json", "tokenizer.json"] + ([INT8_FILE] if quantized else [])
    return all((folder / name).is_file() for name in files)


def ensure_export(source: str, folder: Path, quantized: bool) -> Path:
    """``folder`` holding the export of the model at ``source`` (made now if missing),
    with the int8 copy when ``quantized``. Safe between processes: each export is
    written to a temporary folder and moved into place whole."""
    if not exported(folder, quantized=False):
        _publish(folder, lambda work: _export(source, work))
    if quantized and not (folder / INT8_FILE).is_file():
        _publish(folder, lambda work: _quantize(folder, work), merge=True)
    return folder


def _publish(folder: Path, make: Callable[[Path], None], merge: bool = False) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        make(work)
        if merge:  # one file added beside a finished export
            for file in work.iterdir():
                os.replace(file, folder / file.name)
        else:
            try:
                os.replace(work, folder)  # fails if another process got there first
            except OSError:
                if not (folder / FP32_FILE).is_file():
                    shutil.rmtree(folder, ignore_errors=True)
                    os.replace(work, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _export(source: str, work: Path) -> None:
    """Export the model, check it against PyTorch, and write what the encoder reads."""
    import torch
    from sentence_transformers import SentenceTransformer

    logger.info("exporting %s to ONNX (once) into %s", source, work.parent)
    try:
        model = SentenceTransformer(source, device="cpu").eval()
    except Exception as error:  # the hub when offline, a broken folder, ...
        raise ModelUnavailable(
            f"cannot load model {source!r} ({type(error).__name__}: {error})"
        ) from None
    _eager_attention(model)
    tokenizer = getattr(model.tokenizer, "backend_tokenizer", None)
    if tokenizer is None or model.max_seq_length is None:
        raise EmbedderUnavailable(f"model {source!r} has no fast tokenizer: it cannot run on ONNX")
    sample = (getattr(model, "preprocess", None) or model.tokenize)(list(PROBES[:2]))
    inputs = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in sample]

    class Whole(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.model(dict(zip(inputs, tensors, strict=True)))[
                "sentence_embedding"
            ]
            return out

    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on the pooling's shape checks
        torch.onnx.export(
            Whole().eval(),
            tuple(sample[name] for name in inputs),
            str(work / FP32_FILE),
            dynamo=False,  # the TorchScript exporter: no onnxscript needed
            input_names=inputs,
            output_names=["sentence_embedding"],
            dynamic_axes={**dict.fromkeys(inputs, axes), "sentence_embedding": {0: "batch"}},
            opset_version=17,
        )
    tokenizer.save(str(work / "tokenizer.json"))
    dimension = model.encode(["x"], convert_to_numpy=True).shape[1]
    meta = {
        "source": source,
        "inputs": inputs,
        "dimension": int(dimension),
        "max_length": int(model.max_seq_length),
        "pad_id": int(model.tokenizer.pad_token_id or 0),
        "pad_token": str(model.tokenizer.pad_token or "[PAD]"),
    }
    (work / "meta.json").write_text(json.dumps(meta, indent=1))
    expected = model.encode(list(PROBES), normalize_embeddings=True, convert_to_numpy=True)
    got = OnnxEncoder(work, quantized=False, threads=None).encode(list(PROBES), len(PROBES))
    gap = float(np.abs(got - expected).max())
    if gap > FAITHFUL:
        raise EmbedderUnavailable(
            f"the ONNX export of {source!r} differs from the model by {gap:.2g} "
            f"(more than {FAITHFUL}): use the torch backend for it"
        )


def _eager_attention(model: torch.nn.Module) -> None:
    """Have the model's transformers modules compute attention step by step: the
    exported graph is then plain MatMul/Softmax (ran 1.1-1.2x faster here than the
    export of PyTorch's fused attention, whose NaN guards ONNX Runtime keeps)."""
    for module in model.modules():
        switch = getattr(module, "set_attn_implementation", None)
        if callable(switch):
            try:
                switch("eager")
            except (ValueError, NotImplementedError):  # a model without it keeps its own
                logger.info("%s keeps its attention implementation", type(module).__name__)


def _quantize(folder: Path, work: Path) -> None:
    from onnxruntime.quantization import (  # type: ignore[import-untyped]
        QuantType,
        quantize_dynamic,
    )

    root = logging.getLogger()
    root.addFilter(_no_preprocessing_advice)
    try:
        quantize_dynamic(
            str(folder / FP32_FILE),
            str(work / INT8_FILE),
            weight_type=QuantType.QInt8,
            per_channel=True,  # a scale per output column: cosine to fp32 0.99, not 0.96
        )
    finally:
        root.removeFilter(_no_preprocessing_advice)


def _no_preprocessing_advice(record: logging.LogRecord) -> bool:
    """Drop onnxruntime's advice to pre-process a model before quantizing it, logged on
    the app's root logger at the first use: the export is quantized as measured (the
    recall and speed the README gives), and the app's log is not ours to fill."""
    return "pre-processing before quantization" not in record.getMessage()


def loader_error(error: BaseException, source: str) -> EmbedderUnavailable:
    """The error to raise when an export or session could not be made."""
    if isinstance(error, EmbedderUnavailable):
        return error
    hint = "choose the torch backend" if available() else f"{INSTALL_HINT}, or choose torch"
    return EmbedderUnavailable(
        f"cannot run {source!r} on ONNX ({type(error).__name__}: {error}); {hint} "
        "(embedder = 'sentence-transformers:<model>@torch')"
    )
