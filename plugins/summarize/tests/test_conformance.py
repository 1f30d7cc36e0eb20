import pytest

from ctxwindow.testing import StrategyConformance
from ctxwindow_summarize import SummarizeWindow


class TestSummarizeConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self) -> SummarizeWindow:
        return SummarizeWindow()


class TestSummarizeSmallSummaryConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self) -> SummarizeWindow:
        return SummarizeWindow(summary_share=0.1, low_water=0.6)
