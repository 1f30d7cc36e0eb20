from typing import Any

import pytest
from agent import agent

from ctxwindow import Message
from ctxwindow.testing import StrategyConformance, check_window
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


TOOL_HEAVY_CASES = [
    ClearToolOutputs(keep_recent=1, min_tokens=20),
    ClearToolOutputs(keep_recent=0, min_tokens=0, when="always"),
    PipelineStrategy(stages=[AGGRESSIVE, "fixed"]),
    PipelineStrategy(stages=[{**AGGRESSIVE, "when": "always"}, "summarize", "sliding"]),
]


@pytest.mark.parametrize("strategy", TOOL_HEAVY_CASES, ids=repr)
@pytest.mark.parametrize("as_messages", [False, True])
def test_contract_on_tool_heavy_histories(strategy: Any, as_messages: bool) -> None:
    """The battery's tool results are too short to clear; these are long, so the
    independent check sees cleared outputs (stubs or notes) at every budget."""
    base = agent(8, words=120)
    messages = [Message.from_dict(m) for m in base] if as_messages else base
    cleared_somewhere = False
    for budget in range(300, 4200, 300):
        window = check_window(strategy, messages, budget)
        if window is not None:
            made = [m for m in window.messages if m not in messages]
            cleared_somewhere |= any("cleared by ctxwindow" in _text(m) for m in made)
    assert cleared_somewhere


def _text(message: Any) -> str:
    return message.text if isinstance(message, Message) else str(message.get("content"))
