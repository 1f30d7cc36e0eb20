import pytest

from ctxwindow.testing import StrategyConformance
from ctxwindow_semantic import SemanticWindow


class TestSemanticConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self, shared_strategy: SemanticWindow) -> SemanticWindow:
        return shared_strategy


class TestSemanticWithoutTailConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self, shared_strategy: SemanticWindow) -> SemanticWindow:
        return SemanticWindow(cache="memory", recent_share=0.0, reach=0)
