import pytest

from ctxwindow.testing import StrategyConformance
from ctxwindow_fixed import FixedWindow


class TestFixedConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self) -> FixedWindow:
        return FixedWindow()


class TestFixedWithMaxMessagesConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self) -> FixedWindow:
        return FixedWindow(max_messages=4)
