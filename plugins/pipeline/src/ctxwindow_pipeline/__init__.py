"""ctxwindow-pipeline: strategies run in order under one budget, and the
clear_tool_outputs transform that makes old tool results cheap."""

from __future__ import annotations

import ctxwindow
from ctxwindow.hookspecs import RegisterStrategy
from ctxwindow_pipeline.clear import ClearToolOutputs
from ctxwindow_pipeline.pipeline import PipelineStrategy

__all__ = ["ClearToolOutputs", "PipelineStrategy"]


@ctxwindow.hookimpl
def register_strategies(register: RegisterStrategy) -> None:
    register(ClearToolOutputs)
    register(PipelineStrategy)
