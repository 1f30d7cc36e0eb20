"""The embedder protocol: texts in, unit-length float32 vectors out.

Strategies that rank messages by meaning (``semantic``) name an embedder the way they
name a token counter; plugins register embedders through ``register_embedders``. The
core defines only the protocol, so it needs neither numpy nor a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors whose dot product is their cosine similarity."""

    #: A stable id of the model and its settings: embeddings are cached under it, so
    #: two embedders with the same name must give the same vectors.
    name: str

    def embed(self, texts: Sequence[str]) -> Any:
        """A float32 array of shape (len(texts), dimension), each row of length 1."""
        ...
