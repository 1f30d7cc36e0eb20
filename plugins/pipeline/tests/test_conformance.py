import pytest

from ctxwindow.testing import StrategyConformance
from ctxwindow_pipeline import ClearToolOutputs, PipelineStrategy

AGGRESSIVE = {"strategy": "clear_tool_outputs", "keep_recent": 0, "min_tokens": 0}


class TestClearToolOutputsConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self) -> ClearToolOutputs:
        return ClearToolOutputs(keep_recent=1, min_tokens=5)


class TestClearToolOutputsAlwaysConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self) -> ClearToolOutputs:
        return ClearToolOutputs(keep_recent=0, min_tokens=0, when="always")


class TestClearThenFixedConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self) -> PipelineStrategy:
        return PipelineStrategy(stages=[AGGRESSIVE, "fixed"])


class TestClearSummarizeSlidingConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self) -> PipelineStrategy:
        return PipelineStrategy(
            stages=[{**AGGRESSIVE, "when": "always"}, "summarize", {"strategy": "sliding"}]
        )


class TestSummarizeThenClearLastConformance(StrategyConformance):
    """A transform as the last stage fits the budget itself."""

    @pytest.fixture
    def strategy(self) -> PipelineStrategy:
        return PipelineStrategy(stages=["summarize", AGGRESSIVE])


@pytest.fixture(scope="session")
def semantic_pipeline() -> PipelineStrategy:
    """One pipeline (one loaded model, one memory cache) for the semantic runs."""
    return PipelineStrategy(stages=[AGGRESSIVE, {"strategy": "semantic", "cache": "memory"}])


class TestClearThenSemanticConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self, semantic_pipeline: PipelineStrategy) -> PipelineStrategy:
        return semantic_pipeline
