"""The contract, checked by ctxwindow's conformance suite, with and without keywords."""

import pytest

from ctxwindow.testing import StrategyConformance
from ctxwindow_recency_decay import RecencyDecay


class TestRecencyDecayConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self) -> RecencyDecay:
        return RecencyDecay()


class TestRecencyDecayWithKeywordsConformance(StrategyConformance):
    @pytest.fixture
    def strategy(self) -> RecencyDecay:
        # words the conformance battery uses, so the boost changes what is kept
        return RecencyDecay(keywords=["weather", "question"], half_life=2)
