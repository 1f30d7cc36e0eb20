import pytest

from ctxwindow.testing import StrategyConformance
from ctxwindow_sliding import SlidingWindow


class TestSlidingConformance(StrategyConformance):
    @pytest.fixture(params=[0.9, 0.0, 1.0], ids=["default", "all-recent", "all-important"])
    def strategy(self, request: pytest.FixtureRequest) -> SlidingWindow:
        return SlidingWindow(important_share=request.param)
