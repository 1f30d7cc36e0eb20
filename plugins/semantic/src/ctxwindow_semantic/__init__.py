"""ctxwindow-semantic: keep the turns that matter to the question."""

from __future__ import annotations

import ctxwindow
from ctxwindow.hookspecs import RegisterEmbedder, RegisterStrategy
from ctxwindow_semantic.embedder import SentenceTransformerEmbedder, embedder_factory
from ctxwindow_semantic.strategy import SemanticWindow

__all__ = ["SemanticWindow", "SentenceTransformerEmbedder"]


@ctxwindow.hookimpl
def register_strategies(register: RegisterStrategy) -> None:
    register(SemanticWindow)


@ctxwindow.hookimpl
def register_embedders(register: RegisterEmbedder) -> None:
    register("sentence-transformers", embedder_factory)
